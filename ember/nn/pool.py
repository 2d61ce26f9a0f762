"""Pooling layers (no params): `MaxPool1d`, `MaxPool2d`, `AvgPool1d`, `AvgPool2d`,
`AdaptiveAvgPool1d`, `AdaptiveAvgPool2d`. The stride defaults to the kernel size."""
from __future__ import annotations

import ember as em

from ._util import ints, make_config

__all__ = ["MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d",
           "AdaptiveAvgPool2d", "MaxPool1dConfig", "MaxPool2dConfig", "AvgPool1dConfig",
           "AvgPool2dConfig", "AdaptiveAvgPool1dConfig", "AdaptiveAvgPool2dConfig"]


class _MaxPool(em.Module):
    _nd = 2

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 ceil_mode: bool = False, *, device=None):
        name = type(self).__name__
        self.kernel_size = ints(name, "kernel_size", kernel_size, self._nd, 1)
        self.stride = None if stride is None else ints(name, "stride", stride, self._nd, 1)
        self.padding = ints(name, "padding", padding, self._nd, 0)
        self.dilation = ints(name, "dilation", dilation, self._nd, 1)
        self.ceil_mode = bool(ceil_mode)

    def forward(self, x):
        f = em.max_pool1d if self._nd == 1 else em.max_pool2d
        return f(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, "
                f"padding={self.padding}, dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPool):
    """Max pooling of ``[N, C, L]`` (or ``[C, L]``)."""
    _nd = 1


class MaxPool2d(_MaxPool):
    """Max pooling of ``[N, C, H, W]`` (or ``[C, H, W]``)."""
    _nd = 2


class _AvgPool(em.Module):
    _nd = 2

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, *, device=None):
        name = type(self).__name__
        self.kernel_size = ints(name, "kernel_size", kernel_size, self._nd, 1)
        self.stride = None if stride is None else ints(name, "stride", stride, self._nd, 1)
        self.padding = ints(name, "padding", padding, self._nd, 0)
        self.ceil_mode = bool(ceil_mode)
        self.count_include_pad = bool(count_include_pad)

    def forward(self, x):
        f = em.avg_pool1d if self._nd == 1 else em.avg_pool2d
        return f(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                 self.count_include_pad)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, "
                f"padding={self.padding}, ceil_mode={self.ceil_mode}, "
                f"count_include_pad={self.count_include_pad}")


class AvgPool1d(_AvgPool):
    """Average pooling of ``[N, C, L]``; zero padding is counted unless
    ``count_include_pad=False``."""
    _nd = 1


class AvgPool2d(_AvgPool):
    """Average pooling of ``[N, C, H, W]``; zero padding is counted unless
    ``count_include_pad=False``."""
    _nd = 2


class AdaptiveAvgPool1d(em.Module):
    """Average pooling of ``[N, C, L]`` to ``output_size`` positions (PyTorch's windows)."""

    def __init__(self, output_size, *, device=None):
        self.output_size = output_size if output_size is None or isinstance(output_size, int) \
            else tuple(output_size)

    def forward(self, x):
        return em.adaptive_avg_pool1d(x, self.output_size)


class AdaptiveAvgPool2d(em.Module):
    """Average pooling of ``[N, C, H, W]`` to ``output_size`` (an int or a pair; None keeps
    that dim)."""

    def __init__(self, output_size, *, device=None):
        self.output_size = output_size if output_size is None or isinstance(output_size, int) \
            else tuple(output_size)

    def forward(self, x):
        return em.adaptive_avg_pool2d(x, self.output_size)


MaxPool1dConfig = make_config(MaxPool1d)
MaxPool2dConfig = make_config(MaxPool2d)
AvgPool1dConfig = make_config(AvgPool1d)
AvgPool2dConfig = make_config(AvgPool2d)
AdaptiveAvgPool1dConfig = make_config(AdaptiveAvgPool1d)
AdaptiveAvgPool2dConfig = make_config(AdaptiveAvgPool2d)
