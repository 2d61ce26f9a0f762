"""Convolutions: `Conv1d`, `Conv2d`, `ConvTranspose1d`, `ConvTranspose2d` (PyTorch's
weight layouts: ``[out, in/groups, *kernel]`` and, transposed, ``[in, out/groups,
*kernel]``)."""
from __future__ import annotations

import math
import ember as em
from ember.errors import ConfigError

from ._util import as_device, initializer_arg, ints, make_config, padding_arg, positive_int
from .initializer import Initializer, KaimingUniform

__all__ = ["Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "Conv1dConfig",
           "Conv2dConfig", "ConvTranspose1dConfig", "ConvTranspose2dConfig"]

DEFAULT_INIT = KaimingUniform(gain=1.0 / math.sqrt(3.0), fan_out_only=False)


class _ConvNd(em.Module):
    _nd = 2
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, output_padding=0, *, device=None,
                 initializer=None):
        name = type(self).__name__
        nd = self._nd
        self.in_channels = positive_int(name, "in_channels", in_channels)
        self.out_channels = positive_int(name, "out_channels", out_channels)
        self.kernel_size = ints(name, "kernel_size", kernel_size, nd, 1)
        self.stride = ints(name, "stride", stride, nd, 1)
        self.dilation = ints(name, "dilation", dilation, nd, 1)
        self.groups = positive_int(name, "groups", groups)
        if self._transposed:
            self.padding = ints(name, "padding", padding, nd, 0)
            self.output_padding = ints(name, "output_padding", output_padding, nd, 0)
        else:
            self.padding = padding_arg(name, padding, nd)
        if in_channels % groups or out_channels % groups:
            raise ConfigError(f"{name}: groups {groups} must divide both in_channels "
                              f"{in_channels} and out_channels {out_channels}")
        init = initializer_arg(name, initializer, DEFAULT_INIT)
        device = as_device(device)
        k = math.prod(self.kernel_size)
        if self._transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
            # PyTorch's fans for a transposed conv weight
            fan_in, fan_out = out_channels // groups * k, in_channels * k
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
            fan_in, fan_out = in_channels // groups * k, out_channels * k
        fans = {"fan_in": fan_in, "fan_out": fan_out, "device": device}
        self.weight = init.init(shape, **fans)
        self.bias = init.for_bias().init((out_channels,), **fans) if bias else None

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}, padding={self.padding}")
        if any(d != 1 for d in self.dilation):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        return s + f", bias={self.bias is not None}"


class Conv1d(_ConvNd):
    """1-d convolution of ``[N, C_in, L]`` (or ``[C_in, L]``) to ``[N, C_out, L_out]``.
    ``padding``: an int, 'same' or 'valid'."""
    _nd = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, *, device=None,
                 initializer: Initializer | None = None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, device=device, initializer=initializer)

    def forward(self, x):
        return em.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                         self.groups)


class Conv2d(_ConvNd):
    """2-d convolution of ``[N, C_in, H, W]`` (or ``[C_in, H, W]``); stride, padding,
    dilation an int or a pair; padding also 'same' or 'valid'."""
    _nd = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, *, device=None,
                 initializer: Initializer | None = None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, device=device, initializer=initializer)

    def forward(self, x):
        return em.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                         self.groups)


class ConvTranspose1d(_ConvNd):
    """1-d transposed convolution; ``weight`` ``[C_in, C_out/groups, K]``."""
    _nd = 1
    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1, *,
                 device=None, initializer: Initializer | None = None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, output_padding, device=device, initializer=initializer)

    def forward(self, x):
        return em.conv_transpose1d(x, self.weight, self.bias, self.stride, self.padding,
                                   self.output_padding, self.groups, self.dilation)


class ConvTranspose2d(_ConvNd):
    """2-d transposed convolution; ``weight`` ``[C_in, C_out/groups, kH, kW]``."""
    _nd = 2
    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1, *,
                 device=None, initializer: Initializer | None = None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, output_padding, device=device, initializer=initializer)

    def forward(self, x):
        return em.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                   self.output_padding, self.groups, self.dilation)


Conv1dConfig = make_config(Conv1d)
Conv2dConfig = make_config(Conv2d)
ConvTranspose1dConfig = make_config(ConvTranspose1d)
ConvTranspose2dConfig = make_config(ConvTranspose2d)
