"""Cases for creation ops (arange, linspace, eye) in every dtype they support, and for the
random op where its result is deterministic (degenerate distributions). The tensor input
only supplies the dtype and the device. Statistics and reproducibility of random sampling
are tested in tests/test_creation.py."""
import numpy as np

import ember as em
from tests.conformance.harness import ALL, FLOATS, NUMERIC, Case, Input

ONE = [((),)]  # a 0-d input: only its dtype and device are used


def _make(fn, ref, name, ops, dtypes):
    return Case(name, ops, fn, lambda a: ref(), ONE, inputs=(Input(),), dtypes=dtypes,
                grad=False, layouts=False)


def _trunc(a):
    return np.trunc(a)


CASES = [
    _make(lambda a: em.arange(7, dtype=a.dtype, device=a.device), lambda: np.arange(7),
          "arange_stop", "arange", NUMERIC),
    _make(lambda a: em.arange(2, 11, 3, dtype=a.dtype, device=a.device),
          lambda: np.arange(2, 11, 3), "arange_step", "arange", NUMERIC),
    _make(lambda a: em.arange(5, -5, -2, dtype=a.dtype, device=a.device),
          lambda: np.arange(5, -5, -2), "arange_negative_step", "arange",
          ("f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8")),
    _make(lambda a: em.arange(3, 3, dtype=a.dtype, device=a.device),
          lambda: np.arange(3, 3), "arange_empty", "arange", NUMERIC),
    _make(lambda a: em.arange(-1.0, 1.0, 0.3, dtype=a.dtype, device=a.device),
          lambda: -1.0 + 0.3 * np.arange(7), "arange_float_step", "arange", FLOATS),
    _make(lambda a: em.arange(0.5, 3, dtype=a.dtype, device=a.device),
          lambda: np.array([0.5, 1.5, 2.5]), "arange_float_start", "arange", FLOATS),
    _make(lambda a: em.linspace(-1, 2, 7, dtype=a.dtype, device=a.device),
          lambda: np.linspace(-1, 2, 7), "linspace", "linspace", FLOATS),
    _make(lambda a: em.linspace(-3, 9.5, 6, dtype=a.dtype, device=a.device),
          lambda: _trunc(np.linspace(-3, 9.5, 6)), "linspace_int", "linspace",
          ("i64", "i32", "i16", "i8")),
    _make(lambda a: em.linspace(0, 100, 5, dtype=a.dtype, device=a.device),
          lambda: np.array([0, 25, 50, 75, 100]), "linspace_u8", "linspace", ("u8",)),
    _make(lambda a: em.linspace(4, 5, 1, dtype=a.dtype, device=a.device),
          lambda: np.array([4.0]), "linspace_one", "linspace", FLOATS),
    _make(lambda a: em.linspace(4, 5, 0, dtype=a.dtype, device=a.device),
          lambda: np.zeros(0), "linspace_zero", "linspace", FLOATS),
    _make(lambda a: em.eye(3, dtype=a.dtype, device=a.device), lambda: np.eye(3),
          "eye", "eye", ALL),
    _make(lambda a: em.eye(2, 4, dtype=a.dtype, device=a.device), lambda: np.eye(2, 4),
          "eye_wide", "eye", ALL),
    _make(lambda a: em.eye(4, 1, dtype=a.dtype, device=a.device), lambda: np.eye(4, 1),
          "eye_tall", "eye", ALL),
    _make(lambda a: em.eye(0, 3, dtype=a.dtype, device=a.device), lambda: np.eye(0, 3),
          "eye_empty", "eye", ALL),
    # the random op in every dtype, through distributions whose samples are certain
    _make(lambda a: em.random((2, 3), em.Uniform(2.5, 2.5), dtype=a.dtype, device=a.device),
          lambda: np.full((2, 3), 2.5), "random_uniform_point", "random", FLOATS),
    _make(lambda a: em.random((2, 3), em.Uniform(-4, -3), dtype=a.dtype, device=a.device),
          lambda: np.full((2, 3), -4), "random_uniform_int_point", "random",
          ("i64", "i32", "i16", "i8")),
    _make(lambda a: em.random((4,), em.Uniform(7, 8), dtype=a.dtype, device=a.device),
          lambda: np.full((4,), 7), "random_uniform_u8_point", "random", ("u8",)),
    _make(lambda a: em.random((3, 2), em.Normal(3.0, 0.0), dtype=a.dtype, device=a.device),
          lambda: np.full((3, 2), 3.0), "random_normal_point", "random", FLOATS),
    _make(lambda a: em.random((2, 2), em.Bernoulli(1.0), dtype=a.dtype, device=a.device),
          lambda: np.ones((2, 2)), "random_bernoulli_one", "random", ALL),
    _make(lambda a: em.random((0, 2), em.Bernoulli(0.0), dtype=a.dtype, device=a.device),
          lambda: np.zeros((0, 2)), "random_bernoulli_empty", "random", ALL),
    _make(lambda a: em.random((), dtype=a.dtype, device=a.device) * 0.0,
          lambda: np.zeros(()), "random_default_0d", ("random", "mul"), FLOATS),
]
