"""`Linear`: ``y = x @ weight + bias`` with ``weight`` of shape ``[d_input, d_output]``
(Burn's convention; PyTorch stores the transpose)."""
from __future__ import annotations

import math

import ember as em

from ._util import as_device, initializer_arg, make_config, positive_int
from .initializer import Initializer, KaimingUniform

__all__ = ["Linear", "LinearConfig"]

# bound 1/sqrt(fan_in) for weight and bias: PyTorch's and Burn's default
DEFAULT_INIT = KaimingUniform(gain=1.0 / math.sqrt(3.0), fan_out_only=False)


class Linear(em.Module):
    """Applies ``x @ weight + bias`` to the last dim of ``x`` ``[..., d_input]``.

    ``weight`` is ``[d_input, d_output]`` and ``bias`` ``[d_output]`` (or None); both are
    drawn from ``initializer`` with ``fan_in = d_input``, ``fan_out = d_output`` (default:
    uniform with bound ``1/sqrt(d_input)``, as PyTorch and Burn)."""

    def __init__(self, d_input: int, d_output: int, bias: bool = True, *, device=None,
                 initializer: Initializer | None = None):
        self.d_input = positive_int("Linear", "d_input", d_input)
        self.d_output = positive_int("Linear", "d_output", d_output)
        init = initializer_arg("Linear", initializer, DEFAULT_INIT)
        device = as_device(device)
        fans = {"fan_in": d_input, "fan_out": d_output, "device": device}
        self.weight = init.init((d_input, d_output), **fans)
        self.bias = init.for_bias().init((d_output,), **fans) if bias else None

    def forward(self, x):
        return em.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"d_input={self.d_input}, d_output={self.d_output}, bias={self.bias is not None}"


LinearConfig = make_config(Linear)
