"""Initializers: values that say how a parameter is filled, usable in configs.

``Initializer.init(shape, fan_in=..., fan_out=..., device=...)`` returns an `em.Param`;
``Initializer.tensor(...)`` the plain Tensor. Fans are passed by the layer (a Linear's
``fan_in`` is its input size, a Conv2d's ``in_channels / groups * kH * kW``); when omitted
they are read from the shape: a 2-d shape is Burn's ``[in, out]``, and a shape of more dims
PyTorch's convolution layout ``[out, in, *kernel]``.

Samples come from the device's seeded stream (``em.seed(n)`` makes them reproducible);
`Orthogonal` orthogonalizes its normal samples on the host with NumPy.

Every initializer is a frozen dataclass; ``to_dict()`` / ``Initializer.from_dict(d)`` give
its JSON form ``{"type": "KaimingUniform", "gain": ..., ...}``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

import ember as em
from ember.errors import ConfigError, ShapeError

__all__ = [
    "Initializer", "Constant", "Ones", "Zeros", "Uniform", "Normal", "KaimingUniform",
    "KaimingNormal", "XavierUniform", "XavierNormal", "Orthogonal",
    "constant", "ones", "zeros", "uniform", "normal", "kaiming_uniform", "kaiming_normal",
    "xavier_uniform", "xavier_normal", "orthogonal", "calculate_gain",
]

_REGISTRY: dict[str, type] = {}


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for an activation (PyTorch's table): linear/conv/sigmoid 1,
    tanh 5/3, relu sqrt(2), leaky_relu sqrt(2 / (1 + slope^2)), selu 3/4."""
    n = nonlinearity.lower()
    if n in ("linear", "identity", "conv1d", "conv2d", "conv_transpose1d",
             "conv_transpose2d", "sigmoid"):
        return 1.0
    if n == "tanh":
        return 5.0 / 3.0
    if n == "relu":
        return math.sqrt(2.0)
    if n == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1.0 + slope * slope))
    if n == "selu":
        return 0.75
    raise ConfigError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}; valid: linear, "
                      f"sigmoid, tanh, relu, leaky_relu, selu")


def _fans(shape, fan_in, fan_out):
    if fan_in is not None and fan_out is not None:
        return fan_in, fan_out
    if len(shape) == 0:
        fi = fo = 1
    elif len(shape) == 1:
        fi = fo = shape[0]
    elif len(shape) == 2:  # Burn's [in, out]
        fi, fo = shape[0], shape[1]
    else:  # [out, in, *kernel]
        k = math.prod(shape[2:])
        fi, fo = shape[1] * k, shape[0] * k
    return (fi if fan_in is None else fan_in), (fo if fan_out is None else fan_out)


class Initializer:
    """Base class of the initializers (each one a frozen dataclass). Configs save one with
    its ``to_dict`` and load it with ``from_dict``, so it can be a config field."""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        _REGISTRY[cls.__name__] = cls

    def tensor(self, shape, *, fan_in: int | None = None, fan_out: int | None = None,
               device=None, dtype=None):
        """A plain Tensor of ``shape`` filled by this initializer."""
        from ._util import as_device
        shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
        dtype = em.float32 if dtype is None else dtype
        return self._sample(shape, fan_in, fan_out, as_device(device), dtype)

    def init(self, shape, *, fan_in: int | None = None, fan_out: int | None = None,
             device=None, dtype=None, require_grad: bool = True):
        """An `em.Param` of ``shape`` filled by this initializer."""
        t = self.tensor(shape, fan_in=fan_in, fan_out=fan_out, device=device, dtype=dtype)
        return em.Param(t, require_grad=require_grad)

    def for_bias(self) -> "Initializer":
        """The initializer layers use for their biases given this one for their weights:
        itself (as Burn), except where a 1-d tensor makes no sense (`Orthogonal`: zeros)."""
        return self

    def _sample(self, shape, fan_in, fan_out, device, dtype):  # pragma: no cover
        raise NotImplementedError

    # -- JSON form ------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"type": type(self).__name__, **asdict(self)}

    @staticmethod
    def from_dict(d: dict) -> "Initializer":
        if isinstance(d, Initializer):
            return d
        if not isinstance(d, dict) or "type" not in d:
            raise ConfigError(f"Initializer.from_dict: expected a dict with a 'type' key, got "
                              f"{d!r}")
        name = d["type"]
        cls = _REGISTRY.get(name)
        if cls is None:
            raise ConfigError(f"Initializer.from_dict: unknown initializer {name!r}; valid: "
                              f"{', '.join(sorted(_REGISTRY))}")
        names = {f.name for f in fields(cls)}
        args = {k: v for k, v in d.items() if k != "type"}
        unknown = sorted(set(args) - names)
        if unknown:
            raise ConfigError(f"Initializer.from_dict: unknown keys {unknown} for {name}; "
                              f"valid: {sorted(names)}")
        return cls(**args)


def _check_fan(name, fan):
    if fan <= 0:
        raise ShapeError(f"{name}: the fan ({fan}) must be positive to compute a scale")
    return fan


@dataclass(frozen=True)
class Constant(Initializer):
    """Every element ``value``."""
    value: float = 0.0

    def _sample(self, shape, fan_in, fan_out, device, dtype):
        return em.full(shape, self.value, dtype=dtype, device=device)


@dataclass(frozen=True)
class Ones(Initializer):
    """Every element 1."""

    def _sample(self, shape, fan_in, fan_out, device, dtype):
        return em.full(shape, 1.0, dtype=dtype, device=device)


@dataclass(frozen=True)
class Zeros(Initializer):
    """Every element 0."""

    def _sample(self, shape, fan_in, fan_out, device, dtype):
        return em.full(shape, 0.0, dtype=dtype, device=device)


@dataclass(frozen=True)
class Uniform(Initializer):
    """Uniform on ``[min, max)``."""
    min: float = 0.0
    max: float = 1.0

    def _sample(self, shape, fan_in, fan_out, device, dtype):
        return em.random(shape, em.Uniform(float(self.min), float(self.max)), dtype=dtype,
                         device=device)


@dataclass(frozen=True)
class Normal(Initializer):
    """Normal with ``mean`` and standard deviation ``std``."""
    mean: float = 0.0
    std: float = 1.0

    def _sample(self, shape, fan_in, fan_out, device, dtype):
        return em.random(shape, em.Normal(float(self.mean), float(self.std)), dtype=dtype,
                         device=device)


def _uniform_std(std, shape, device, dtype):
    bound = math.sqrt(3.0) * std
    return em.random(shape, em.Uniform(-bound, bound), dtype=dtype, device=device)


@dataclass(frozen=True)
class KaimingUniform(Initializer):
    """He initialization, uniform: bound ``gain * sqrt(3 / fan)`` with ``fan`` the fan-in
    (the fan-out when ``fan_out_only``). ``gain = 1/sqrt(3)`` gives PyTorch's and Burn's
    default for Linear and Conv (bound ``1/sqrt(fan_in)``)."""
    gain: float = math.sqrt(2.0)
    fan_out_only: bool = False

    def _sample(self, shape, fan_in, fan_out, device, dtype):
        fi, fo = _fans(shape, fan_in, fan_out)
        fan = _check_fan("KaimingUniform", fo if self.fan_out_only else fi)
        return _uniform_std(self.gain / math.sqrt(fan), shape, device, dtype)


@dataclass(frozen=True)
class KaimingNormal(Initializer):
    """He initialization, normal: std ``gain / sqrt(fan)`` (fan-in, or fan-out when
    ``fan_out_only``)."""
    gain: float = math.sqrt(2.0)
    fan_out_only: bool = False

    def _sample(self, shape, fan_in, fan_out, device, dtype):
        fi, fo = _fans(shape, fan_in, fan_out)
        fan = _check_fan("KaimingNormal", fo if self.fan_out_only else fi)
        return em.random(shape, em.Normal(0.0, self.gain / math.sqrt(fan)), dtype=dtype,
                         device=device)


@dataclass(frozen=True)
class XavierUniform(Initializer):
    """Glorot initialization, uniform: bound ``gain * sqrt(6 / (fan_in + fan_out))``."""
    gain: float = 1.0

    def _sample(self, shape, fan_in, fan_out, device, dtype):
        fi, fo = _fans(shape, fan_in, fan_out)
        std = self.gain * math.sqrt(2.0 / _check_fan("XavierUniform", fi + fo))
        return _uniform_std(std, shape, device, dtype)


@dataclass(frozen=True)
class XavierNormal(Initializer):
    """Glorot initialization, normal: std ``gain * sqrt(2 / (fan_in + fan_out))``."""
    gain: float = 1.0

    def _sample(self, shape, fan_in, fan_out, device, dtype):
        fi, fo = _fans(shape, fan_in, fan_out)
        std = self.gain * math.sqrt(2.0 / _check_fan("XavierNormal", fi + fo))
        return em.random(shape, em.Normal(0.0, std), dtype=dtype, device=device)


@dataclass(frozen=True)
class Orthogonal(Initializer):
    """A (semi-)orthogonal matrix times ``gain`` (Saxe et al.): the shape is viewed as
    ``[shape[0], prod(shape[1:])]``, whose rows (or columns, whichever are fewer) are
    orthonormal. Normal samples from the device's stream, orthogonalized by a QR on the
    host with the sign of R's diagonal folded in (so the result is Haar distributed)."""
    gain: float = 1.0

    def for_bias(self):
        return Zeros()

    def _sample(self, shape, fan_in, fan_out, device, dtype):
        if len(shape) < 2:
            raise ShapeError(f"Orthogonal: needs a shape of at least 2 dims, got {shape}")
        rows = shape[0]
        cols = math.prod(shape[1:])
        z = em.random((rows, cols), em.Normal(0.0, 1.0), dtype=em.float64,
                      device=device).numpy().astype(np.float64)
        if rows < cols:
            z = z.T
        q, r = np.linalg.qr(z)
        q = q * np.sign(np.diag(r))[None, :]
        if rows < cols:
            q = q.T
        q = (self.gain * q).reshape(shape)
        return em.tensor(q, dtype=dtype, device=device)


# -- lowercase constructors (torch.nn.init's names) ------------------------------------------
def constant(value: float) -> Constant:
    return Constant(value)


def ones() -> Ones:
    return Ones()


def zeros() -> Zeros:
    return Zeros()


def uniform(min: float = 0.0, max: float = 1.0) -> Uniform:  # noqa: A002
    return Uniform(min, max)


def normal(mean: float = 0.0, std: float = 1.0) -> Normal:
    return Normal(mean, std)


def kaiming_uniform(gain: float = math.sqrt(2.0), mode: str = "fan_in") -> KaimingUniform:
    """``mode`` "fan_in" (default) or "fan_out"."""
    return KaimingUniform(gain, _mode(mode))


def kaiming_normal(gain: float = math.sqrt(2.0), mode: str = "fan_in") -> KaimingNormal:
    return KaimingNormal(gain, _mode(mode))


def xavier_uniform(gain: float = 1.0) -> XavierUniform:
    return XavierUniform(gain)


def xavier_normal(gain: float = 1.0) -> XavierNormal:
    return XavierNormal(gain)


def orthogonal(gain: float = 1.0) -> Orthogonal:
    return Orthogonal(gain)


def _mode(mode):
    if mode not in ("fan_in", "fan_out"):
        raise ConfigError(f"kaiming: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    return mode == "fan_out"
