"""Creation and random ops: tensors made from static arguments on a device.

Attributes are canonical (the Tensor API normalizes them): sizes are ints, range bounds are
Python ints or floats, ``dtype`` a DType. ``infer`` validates them.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError, ShapeError
from .registry import declare


FULL = declare(
    "full", "creation", nin=0, attrs=("shape", "value", "dtype"),
    infer=lambda shape, value, dtype: (shape, dtype),  # full() checked the shape
    numpy=lambda shape, value, dtype, *, xp=np: xp.full(shape, value, dtype=dtype.np),
    doc="a tensor of one value")


def _random_infer(shape, distribution, dtype):
    distribution.check(dtype)
    return (shape, dtype)  # random() checked the shape


def _random_numpy(rng, shape, distribution, dtype, *, xp=np):
    if xp is np:
        return distribution.sample_numpy(rng, shape, dtype.np)
    return distribution.sample_numpy(rng, shape, dtype.np, xp=xp)


RANDOM = declare(
    "random", "random", nin=0, attrs=("shape", "distribution", "dtype"),
    infer=_random_infer,
    numpy=_random_numpy,
    doc="samples of a Distribution from the device's seeded stream")


# -- ranges ---------------------------------------------------------------------------------
def _int_bounds(op, dtype, lo, hi):
    """Raise DTypeError unless the values ``lo`` and ``hi`` fit in the int ``dtype``."""
    info = np.iinfo(dtype.np)
    if lo < info.min or hi > info.max:
        raise DTypeError(f"{op}: values from {lo} to {hi} do not fit in {dtype.short} "
                         f"(range {info.min}..{info.max}); use a wider dtype")


def _finite(op, **values):
    for k, v in values.items():
        if not math.isfinite(v):
            raise ShapeError(f"{op}: {k} must be finite, got {v}")


def arange_len(start, stop, step) -> int:
    """The number of values ``start, start + step, ...`` strictly before ``stop``."""
    if isinstance(start, int) and isinstance(stop, int) and isinstance(step, int):
        return max(0, -((start - stop) // step))
    return max(0, math.ceil((stop - start) / step))


def _arange_infer(start, stop, step, dtype):
    if step == 0:
        raise ShapeError(f"arange: step must be nonzero, got start={start}, stop={stop}, "
                         f"step={step}")
    _finite("arange", start=start, stop=stop, step=step)
    if (stop - start) * step < 0:
        raise ShapeError(f"arange: start={start} to stop={stop} cannot be reached with "
                         f"step={step}; the step's sign must match stop - start")
    if dtype.kind == "bool":
        raise DTypeError("arange: expects a float or int dtype, got bool")
    n = arange_len(start, stop, step)
    if dtype.kind == "int" and n:
        last = start + (n - 1) * step
        _int_bounds("arange", dtype, min(start, last), max(start, last))
    return ((n,), dtype)


def _arange_numpy(start, stop, step, dtype, *, xp=np):
    n = arange_len(start, stop, step)
    if dtype.kind == "int" and isinstance(start, int) and isinstance(step, int):
        return (xp.arange(n, dtype=np.int64) * step + start).astype(dtype.np)
    # start + i * step in f64 (no accumulated error), then one rounding to the dtype.
    return (xp.arange(n, dtype=np.float64) * step + start).astype(dtype.np)


ARANGE = declare(
    "arange", "creation", nin=0, attrs=("start", "stop", "step", "dtype"),
    infer=_arange_infer, numpy=_arange_numpy,
    doc="start, start + step, ... strictly before stop (1-d)")


def _linspace_infer(start, end, steps, dtype):
    if steps < 0:
        raise ShapeError(f"linspace: steps must be >= 0, got {steps}")
    _finite("linspace", start=start, end=end)
    if dtype.kind == "bool":
        raise DTypeError("linspace: expects a float or int dtype, got bool")
    if dtype.kind == "int" and steps:
        _int_bounds("linspace", dtype, math.floor(min(start, end)), math.ceil(max(start, end)))
    return ((steps,), dtype)


def _linspace_numpy(start, end, steps, dtype, *, xp=np):
    # computed on the host everywhere: a device may contract start + i * step into one
    # fused multiply-add, and an int dtype would then truncate some values differently
    out = np.linspace(float(start), float(end), steps, dtype=np.float64).astype(dtype.np)
    return out if xp is np else xp.asarray(out)


LINSPACE = declare(
    "linspace", "creation", nin=0, attrs=("start", "end", "steps", "dtype"),
    infer=_linspace_infer, numpy=_linspace_numpy,
    doc="steps evenly spaced values from start to end, both included (1-d)")


def _eye_infer(n, m, dtype):
    if n < 0 or m < 0:
        raise ShapeError(f"eye: sizes must be >= 0, got n={n}, m={m}")
    return ((n, m), dtype)


EYE = declare(
    "eye", "creation", nin=0, attrs=("n", "m", "dtype"),
    infer=_eye_infer, numpy=lambda n, m, dtype, *, xp=np: xp.eye(n, m, dtype=dtype.np),
    doc="an n x m matrix with ones on the diagonal")
