"""The conformance harness: op cases, input generation, layouts, tolerances, and the
backend stacks every case runs on.

A *case* runs one ember call on generated inputs and compares it with an independent NumPy
reference computed in float64 (ints in int64). Spec modules (``specs_*.py``) each export
``CASES``; ``test_ops.py`` and ``test_grad.py`` run them on every registered stack.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import ember as em
from ember.backend.stacks import stacks

FLOATS = ("f64", "f32", "f16", "bf16")
INTS = ("i64", "i32", "i16", "i8", "u8")
NUMERIC = FLOATS + INTS
ALL = NUMERIC + ("bool",)

# (atol, rtol) per dtype for comparing with the float64 reference.
TOL = {
    "f64": (1e-10, 1e-9), "f32": (1e-5, 1e-5), "f16": (2e-3, 4e-3), "bf16": (1.6e-2, 1.6e-2),
    "i64": (0, 0), "i32": (0, 0), "i16": (0, 0), "i8": (0, 0), "u8": (0, 0), "bool": (0, 0),
}


@dataclass
class Input:
    """How to generate one tensor input: values drawn by ``gen`` ("normal", "uniform",
    "positive", "int", "bool", "index" (0..high-1), or a callable (rng, shape) -> array)."""
    gen: str | Callable = "normal"
    low: float = -2.0
    high: float = 2.0
    dtype: str | None = None        # fixed dtype (e.g. index inputs are i64)
    differentiable: bool = True     # include in gradient checks


@dataclass
class Case:
    """One op exercised by one call.

    ``fn(*tensors)`` is the ember call; ``ref(*arrays)`` the independent reference on float64
    (or int64/bool) arrays. ``shapes`` lists input shape tuples; the first is also run with
    non-contiguous layouts. ``dtypes`` are the dtypes the op supports for its tensor inputs
    (inputs with a fixed ``Input.dtype`` keep theirs).
    """
    name: str
    ops: tuple                      # registry op names this case exercises
    fn: Callable
    ref: Callable
    shapes: list
    inputs: tuple = (Input(),)
    dtypes: tuple = FLOATS
    grad: bool = True
    tol: dict = field(default_factory=dict)
    layouts: bool = True
    grad_tol: float = 1e-6

    def __post_init__(self):
        if isinstance(self.ops, str):
            self.ops = (self.ops,)
        if len(self.inputs) == 1 and len(self.shapes[0]) > 1:
            self.inputs = tuple(self.inputs) * len(self.shapes[0])

    @property
    def id(self):
        return self.name


def gen_array(rng, inp: Input, shape, dtype: str):
    if callable(inp.gen):
        a = np.asarray(inp.gen(rng, shape))
    elif inp.gen == "normal":
        a = rng.normal(size=shape)
    elif inp.gen == "uniform":
        a = rng.uniform(inp.low, inp.high, size=shape)
    elif inp.gen == "positive":
        a = rng.uniform(max(inp.low, 0.1), max(inp.high, 0.2), size=shape)
    elif inp.gen == "int":
        a = rng.integers(int(inp.low), int(inp.high) + 1, size=shape)
    elif inp.gen == "bool":
        a = rng.random(size=shape) < 0.5
    elif inp.gen == "index":
        a = rng.integers(0, int(inp.high), size=shape)
    else:
        raise ValueError(inp.gen)
    d = em.dtype.as_dtype(inp.dtype or dtype)
    if d.kind == "int" and a.dtype.kind == "f":
        a = np.round(a * 3)
        if not d.signed:
            a = np.abs(a)
    if d.kind == "bool" and a.dtype.kind != "b":
        a = a > 0
    return a.astype(d.np)


def widen(a: np.ndarray) -> np.ndarray:
    """The reference's view of an input: floats as f64, ints as i64."""
    a = np.asarray(a)
    if a.dtype.kind in "fV" or a.dtype.name == "bfloat16":
        return a.astype(np.float64)
    if a.dtype.kind in "iu":
        return a.astype(np.int64)
    return a


def make_tensor(arr: np.ndarray, device, layout: str):
    """An ember tensor with ``arr``'s values in the given memory layout."""
    if layout == "contiguous" or arr.ndim == 0:
        return em.tensor(arr, device=device)
    if layout == "transposed":
        if arr.ndim < 2:
            return em.tensor(arr, device=device)
        return em.tensor(np.ascontiguousarray(np.swapaxes(arr, -1, -2)),
                         device=device).swap_dims(-1, -2)
    if layout == "strided":
        big = np.repeat(arr, 2, axis=0)  # every other row is the original
        big = np.flip(big, axis=0) if arr.shape[0] > 0 else big
        t = em.tensor(np.ascontiguousarray(big), device=device)
        return t[::-2] if arr.shape[0] > 0 else em.tensor(arr, device=device)
    if layout == "expanded":
        if arr.ndim == 0 or arr.shape[0] == 0:
            return em.tensor(arr, device=device)
        if (arr == arr[:1]).all():
            return em.tensor(arr[:1], device=device).expand(arr.shape)
        return em.tensor(arr, device=device)
    raise ValueError(layout)


LAYOUTS = ("contiguous", "transposed", "strided", "expanded")


def expanded_array(rng, inp, shape, dtype):
    """An input whose dim 0 repeats one row, so the 'expanded' layout can represent it."""
    a = gen_array(rng, inp, (1,) + tuple(shape[1:]) if shape else shape, dtype)
    return np.broadcast_to(a, shape).copy() if shape else a


def to_numpy_out(out):
    if isinstance(out, (tuple, list)):
        return [np.asarray(o.numpy()) for o in out]
    return [np.asarray(out.numpy())]


def compare(actual: np.ndarray, expected, dtype_short: str, tol_override=None, what=""):
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs reference " \
                                           f"{expected.shape}"
    atol, rtol = (tol_override or {}).get(dtype_short, TOL.get(dtype_short, (1e-5, 1e-5)))
    if actual.dtype.kind in "iu" and expected.dtype.kind in "iuf":
        # integer results wrap around like C, PyTorch and NumPy: compare in the output dtype
        expected = expected.astype(actual.dtype)
    a = actual.astype(np.float64) if actual.dtype.kind not in "b" else actual
    e = expected.astype(np.float64) if expected.dtype.kind not in "b" else expected
    if a.dtype.kind == "b" or e.dtype.kind == "b":
        np.testing.assert_array_equal(a.astype(bool), e.astype(bool), err_msg=what)
        return
    if atol == 0 and rtol == 0:
        np.testing.assert_array_equal(a, e, err_msg=what)
        return
    np.testing.assert_allclose(a, e, atol=atol, rtol=rtol, equal_nan=True, err_msg=what)


def selected_stacks():
    """The registered stacks, or those named by ``EMBER_TEST_STACKS`` (comma-separated names
    or shell patterns, e.g. ``cuda,autodiff(cuda)`` or ``*cuda*``): a GPU run tests only its
    own stacks. A pattern that matches no stack is an error, not an empty run."""
    import fnmatch
    import os
    spec = os.environ.get("EMBER_TEST_STACKS", "").strip()
    if not spec:
        return stacks()
    pats = [p.strip() for p in spec.split(",") if p.strip()]
    names = [s.name for s in stacks()]
    for p in pats:
        if not fnmatch.filter(names, p):
            raise ValueError(f"EMBER_TEST_STACKS: {p!r} matches no registered stack; "
                             f"registered: {', '.join(names)}")
    return [s for s in stacks() if any(fnmatch.fnmatchcase(s.name, p) for p in pats)]


def stack_params(*, autodiff_only: bool = False):
    """pytest params for each registered backend stack (or those `selected_stacks` keeps);
    absent ones skip with the reason."""
    params = []
    for s in selected_stacks():
        if autodiff_only and not s.autodiff:
            continue
        reason = s.availability()
        marks = [pytest.mark.skip(reason=f"{s.name}: {reason}")] if reason else []
        params.append(pytest.param(s, id=s.name, marks=marks))
    return params
