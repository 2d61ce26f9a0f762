"""Distributions for `Tensor.random`: Default (uniform [0, 1)), Uniform, Normal, Bernoulli.

A distribution is an immutable, hashable value (it travels as a static attribute of the
``random`` op). ``check(dtype)`` says whether it can produce that dtype; ``sample_numpy`` is
the NumPy reference the NdArray backend samples with, from the device's seeded stream; given
``xp`` (CuPy, with a CuPy generator) it samples on that array library's device.

Supported dtypes: Default gives floats in [0, 1) and, for bool, fair coin flips; Uniform gives
floats in [low, high) or ints in [low, high) (integer bounds); Normal gives floats; Bernoulli
gives 0/1 (or False/True) in any dtype.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import DTypeError, ShapeError

_F64 = np.dtype(np.float64)
_F32 = np.dtype(np.float32)


class Distribution:
    """A distribution to sample tensors from. Backends sample with their own streams;
    ``sample_numpy`` is the NumPy reference."""

    def check(self, dtype) -> None:
        """Raise DTypeError unless this distribution can produce ``dtype``."""
        if dtype.kind != "float":
            raise DTypeError(f"random: {self!r} samples floats, got dtype {dtype.short}")

    def sample_numpy(self, rng: np.random.Generator, shape, np_dtype, *, xp=np):
        """Samples of ``shape`` as ``np_dtype`` from ``rng``, a generator of the array
        namespace ``xp`` (NumPy's, or CuPy's on the Cuda backend)."""
        raise NotImplementedError

    @staticmethod
    def default():
        return Default()

    @staticmethod
    def uniform(low: float, high: float):
        return Uniform(low, high)

    @staticmethod
    def normal(mean: float = 0.0, std: float = 1.0):
        return Normal(mean, std)

    @staticmethod
    def bernoulli(prob: float):
        return Bernoulli(prob)


def _unit(rng, shape, np_dtype, xp=np):
    """Uniform samples in [0, 1) that are exact in ``np_dtype`` (so rounding can never give
    1.0): multiples of 2**-p for the dtype's p bits of precision."""
    np_dtype = np.dtype(np_dtype)
    if np_dtype == _F64:
        return rng.random(shape)
    if np_dtype == _F32:
        return rng.random(shape, dtype=np.float32)
    bits = _precision(np_dtype)
    u = rng.integers(0, 1 << bits, size=shape, dtype=np.int32).astype(np.float32)
    return u * np.float32(2.0 ** -bits)


def _precision(np_dtype) -> int:
    import ml_dtypes
    return int(ml_dtypes.finfo(np_dtype).nmant) + 1


def _below(value: float, np_dtype):
    """The largest value of ``np_dtype`` strictly below ``value``."""
    v = np.asarray(value).astype(np_dtype)
    if float(v) >= value:
        v = np.nextafter(v, np.asarray(-np.inf).astype(np_dtype))
    return v


@dataclass(frozen=True)
class Default(Distribution):
    """Uniform on [0, 1) for floats; fair coin flips for bool."""

    def check(self, dtype):
        if dtype.kind == "int":
            raise DTypeError(f"random: the Default distribution gives floats in [0, 1), not "
                             f"{dtype.short}; use Uniform(low, high) for ints")

    def sample_numpy(self, rng, shape, np_dtype, *, xp=np):
        if np.dtype(np_dtype).kind == "b":
            return rng.random(shape) < 0.5
        return xp.asarray(_unit(rng, shape, np_dtype, xp)).astype(np_dtype, copy=False)


@dataclass(frozen=True)
class Uniform(Distribution):
    """Uniform on [low, high): floats, or ints when both bounds are integers."""

    low: float
    high: float

    def __post_init__(self):
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ShapeError(f"Uniform: bounds must be finite, got {self.low}, {self.high}")
        if not self.low <= self.high:
            raise ShapeError(f"Uniform: low {self.low} must be <= high {self.high}")

    def check(self, dtype):
        if dtype.kind == "float":
            return
        if dtype.kind == "bool":
            raise DTypeError("random: Uniform cannot produce bool; use Bernoulli(p)")
        lo, hi = self.low, self.high
        if float(lo) != int(lo) or float(hi) != int(hi):
            raise DTypeError(f"random: Uniform({lo}, {hi}) for {dtype.short} needs integer "
                             f"bounds")
        if int(hi) <= int(lo):
            raise ShapeError(f"random: Uniform({lo}, {hi}) over ints is empty; it samples "
                             f"low <= v < high, so high must exceed low")
        info = np.iinfo(dtype.np)
        if int(lo) < info.min or int(hi) - 1 > info.max:
            raise DTypeError(f"random: Uniform({lo}, {hi}) does not fit in {dtype.short} "
                             f"({info.min}..{info.max})")

    def sample_numpy(self, rng, shape, np_dtype, *, xp=np):
        np_dtype = np.dtype(np_dtype)
        lo, hi = self.low, self.high
        if np_dtype.kind in "iu":
            return rng.integers(int(lo), int(hi), size=shape, dtype=np.int64).astype(np_dtype)
        u = _unit(rng, shape, np_dtype, xp)
        work = _F64 if np_dtype == _F64 else _F32
        v = xp.asarray(u * work.type(hi - lo) + work.type(lo)).astype(np_dtype)
        if hi > lo:
            # rounding to the dtype may land on ``high``; keep the interval half-open
            below = _below(hi, np_dtype)
            v = xp.where(v.astype(np.float64) >= hi, below if xp is np else xp.asarray(below),
                         v)
        return v


@dataclass(frozen=True)
class Normal(Distribution):
    """Normal with ``mean`` and standard deviation ``std`` (floats only)."""

    mean: float = 0.0
    std: float = 1.0

    def __post_init__(self):
        if not (math.isfinite(self.mean) and math.isfinite(self.std)):
            raise ShapeError(f"Normal: mean and std must be finite, got {self.mean}, "
                             f"{self.std}")
        if self.std < 0:
            raise ShapeError(f"Normal: std {self.std} must be >= 0")

    def sample_numpy(self, rng, shape, np_dtype, *, xp=np):
        np_dtype = np.dtype(np_dtype)
        work = _F64 if np_dtype == _F64 else _F32
        z = rng.standard_normal(shape, dtype=work)
        return xp.asarray(z * work.type(self.std) + work.type(self.mean)).astype(np_dtype)


@dataclass(frozen=True)
class Bernoulli(Distribution):
    """1 with probability ``prob``, else 0 (True/False for bool), in any dtype."""

    prob: float

    def __post_init__(self):
        if not 0.0 <= self.prob <= 1.0:
            raise ShapeError(f"Bernoulli: prob {self.prob} must be in [0, 1]")

    def check(self, dtype):
        pass

    def sample_numpy(self, rng, shape, np_dtype, *, xp=np):
        return xp.asarray(rng.random(shape) < self.prob).astype(np_dtype)
