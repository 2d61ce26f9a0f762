"""A float division by a scalar power of two is planned as a multiply by its reciprocal
(`ember.backend.fusion.planner.scalar_tag`): the same bits as NumPy's division for every
input, special values and denormals included, on every kernel runtime; other divisors,
scalar dividends and int tensors keep the division."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import dtype as dt
from ember.backend.fusion.planner import scalar_tag
from tests.fusion._util import RUNTIMES, fusion_device

DIVISORS = (2, 2.0, 0.5, -4.0, 1024.0, 3.0, -0.1, 2.0 ** -126, 2.0 ** 127, 2.0 ** -149,
            2.0 ** -1022, 2.0 ** 1000, 0.0, -0.0, float("inf"), float("nan"), True)


def _inputs(dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(997) * np.exp(rng.uniform(-90, 90, 997))
    tiny = np.finfo(dtype).smallest_subnormal
    head = [0.0, -0.0, np.inf, -np.inf, np.nan, tiny, -tiny, np.finfo(dtype).max, 1.0, 3.0]
    with np.errstate(over="ignore"):
        return np.concatenate([head, x]).astype(dtype)


def _same_bits(got, want):
    return ((got.view(np.uint8) == want.view(np.uint8)).reshape(len(got), -1).all(1)
            | (np.isnan(got) & np.isnan(want)))


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_division_by_a_scalar_matches_numpy_bitwise(runtime, dtype):
    dev = fusion_device(runtime)
    x = _inputs(dtype)
    t = em.tensor(x, device=dev)
    for c in DIVISORS:
        with np.errstate(all="ignore"):
            want = x / np.asarray(c).astype(dtype)
            rwant = np.asarray(c).astype(dtype) / x
        got, rgot = (t / c).numpy(), (c / t).numpy()
        ok = _same_bits(got, want)
        assert ok.all(), (c, x[~ok][:3], got[~ok][:3], want[~ok][:3])
        ok = _same_bits(rgot, rwant)
        assert ok.all(), ("scalar / tensor", c, x[~ok][:3], rgot[~ok][:3], rwant[~ok][:3])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_int_and_half_tensors_keep_the_division(runtime):
    dev = fusion_device(runtime)
    i = np.arange(-7, 9, dtype=np.int32)
    np.testing.assert_array_equal((em.tensor(i, device=dev) / 2).numpy(),
                                  (i / 2).astype(np.float32))
    h = np.linspace(-3, 3, 13, dtype=np.float16)
    np.testing.assert_array_equal((em.tensor(h, device=dev) / 4.0).numpy(), h / np.float16(4))


def test_which_divisors_become_reciprocals():
    f32, f64 = dt.float32, dt.float64
    assert scalar_tag("div", 1, 2.0, f32) == "r" and scalar_tag("div", 1, -0.25, f64) == "r"
    assert scalar_tag("div", 1, 2, f32) == "r"
    assert scalar_tag("div", 1, 2.0 ** 126, f32) == "r"
    assert scalar_tag("div", 1, 2.0 ** 127, f32) == "s"      # 2^-127 is denormal in f32
    assert scalar_tag("div", 1, 2.0 ** 127, f64) == "r"
    for v in (3.0, 0.0, float("inf"), float("nan"), True, 10 ** 400):
        assert scalar_tag("div", 1, v, f64) == "s", v
    assert scalar_tag("div", 0, 2.0, f32) == "s"              # 2 / x
    assert scalar_tag("mul", 1, 2.0, f32) == "s"
    assert scalar_tag("div", 1, 2.0, dt.float16) == "s"
