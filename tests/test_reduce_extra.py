"""Reductions, scans and sorts beyond the conformance cases: errors, result dtypes, tie and
NaN rules, and gradients compared with PyTorch where the rule is a choice (ties, zeros)."""
import numpy as np
import pytest

import ember as em
from ember.errors import DTypeError, IndexError_, ShapeError

torch = pytest.importorskip("torch")


def _ad_device():
    from ember.backend.stacks import stacks
    for s in stacks():
        if s.autodiff and s.availability() is None:
            return s.make_device()
    pytest.skip("no autodiff stack")


def _grad(fn, a, seed_weights=None):
    """d/da of sum(fn(a) * w) with ember, and the same with torch."""
    dev = _ad_device()
    x = em.tensor(a, device=dev).require_grad()
    out = fn(x)
    out = out[0] if isinstance(out, tuple) else out
    w = np.random.default_rng(0).normal(size=out.shape) if seed_weights is None \
        else seed_weights
    g = (out * em.tensor(w, device=dev)).sum().backward()
    return x.grad(g).numpy(), w


def _torch_grad(fn, a, w):
    t = torch.tensor(a, requires_grad=True)
    out = fn(t)
    out = out[0] if isinstance(out, tuple) else out
    (out * torch.tensor(w)).sum().backward()
    return t.grad.numpy()


# -- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda x: x.max(0), lambda x: x.min(), lambda x: x.argmax(0), lambda x: x.argmin(),
    lambda x: x.max_dim_with_indices(0), lambda x: x.min_dim_with_indices(0),
    lambda x: x.max_abs(0),
])
def test_extremes_over_empty_dim_raise(call):
    x = em.zeros(0, 3)
    with pytest.raises(ShapeError, match="size 0"):
        call(x)


def test_empty_reductions_with_identity():
    x = em.zeros(0, 3)
    np.testing.assert_array_equal(x.sum(0).numpy(), np.zeros(3))
    np.testing.assert_array_equal(x.prod(0).numpy(), np.ones(3))
    assert np.isnan(x.mean(0).numpy()).all()
    assert x.any().item() is False and x.all().item() is True
    assert x.logsumexp(0).numpy().tolist() == [-np.inf] * 3
    assert x.max(1).shape == (0,)          # reducing a non-empty dim of an empty tensor


def test_dim_errors():
    x = em.zeros(2, 3)
    with pytest.raises(IndexError_, match="out of range"):
        x.sum(2)
    with pytest.raises(IndexError_, match="out of range"):
        x.cumsum(-3)
    with pytest.raises(ShapeError, match="repeat"):
        x.sum((1, -1))
    with pytest.raises(DTypeError, match="dim must be an int"):
        x.argmax(1.0)
    with pytest.raises(ShapeError, match="k=4"):
        x.topk(4)
    with pytest.raises(ShapeError, match="k=-1"):
        x.topk(-1)
    with pytest.raises(IndexError_):
        em.tensor(1.0).sum(1)


def test_0d_dims():
    x = em.tensor(2.5)
    for f in (lambda t: t.sum(0), lambda t: t.max(-1), lambda t: t.prod(0, keepdim=True),
              lambda t: t.cumsum(0), lambda t: t.sort(0), lambda t: t.cummax(0)[0]):
        r = f(x)
        assert r.shape == () and r.item() == 2.5
    assert x.argmax(0).item() == 0 and x.topk(1)[1].item() == 0


# -- result dtypes --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,sum_dt,mean_dt", [
    (em.bool, em.int64, em.float32), (em.int8, em.int8, em.float32),
    (em.uint8, em.uint8, em.float32), (em.int64, em.int64, em.float32),
    (em.float16, em.float16, em.float16), (em.bfloat16, em.bfloat16, em.bfloat16),
    (em.float64, em.float64, em.float64)])
def test_result_dtypes(dtype, sum_dt, mean_dt):
    x = em.ones(2, 3, dtype=dtype)
    assert x.sum().dtype is sum_dt and x.prod(1).dtype is sum_dt
    assert x.cumsum(0).dtype is sum_dt and x.cumprod(0).dtype is sum_dt
    assert x.mean().dtype is mean_dt and x.var(1).dtype is mean_dt
    assert x.std().dtype is mean_dt and x.logsumexp(1).dtype is mean_dt
    assert x.max().dtype is dtype and x.cummax(1)[0].dtype is dtype
    assert x.sort().dtype is dtype and x.topk(1)[0].dtype is dtype
    for idx in (x.argmax(1), x.argsort(), x.topk(2)[1], x.cummin(0)[1],
                x.max_dim_with_indices(0)[1]):
        assert idx.dtype is em.int64
    assert x.any().dtype is em.bool and x.all(0).dtype is em.bool


def test_int_sums_wrap_like_torch():
    a = np.full((40,), 100, np.int8)
    assert em.tensor(a).sum().item() == torch.tensor(a).sum(dtype=torch.int8).item()
    b = np.arange(1, 9, dtype=np.uint8)
    assert em.tensor(b).prod().item() == np.prod(b.astype(np.int64)) % 256


def test_low_precision_accumulates_in_f32():
    a = np.full(5000, 100.0)
    # the sum (5e5) exceeds f16's range, the mean does not
    assert em.tensor(a, dtype=em.float16).mean().item() == 100.0
    assert em.tensor(np.ones(3000), dtype=em.bfloat16).sum().item() == pytest.approx(3000, 0.01)
    assert em.tensor(np.ones(3000), dtype=em.float16).cumsum(0).numpy()[-1] == 3000
    assert em.tensor(a, dtype=em.bfloat16).var().item() == 0.0


# -- ties and NaN ---------------------------------------------------------------------------
def test_ties_and_nan_match_torch():
    a = np.array([[1.0, 3.0, 3.0, np.nan, 2.0, 3.0], [2.0, 2.0, 1.0, 1.0, 5.0, 5.0]])
    x, t = em.tensor(a), torch.tensor(a)
    v, i = x.cummax(1)
    tv, ti = torch.cummax(t, 1)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    v, i = x.cummin(1)
    tv, ti = torch.cummin(t, 1)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    for desc in (False, True):
        v, i = x.sort_with_indices(1, descending=desc)
        tv, ti = torch.sort(t, dim=1, descending=desc, stable=True)
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
    np.testing.assert_array_equal(x.argmax(1).numpy(), t.argmax(1).numpy())
    np.testing.assert_array_equal(x.argmin(1).numpy(), t.argmin(1).numpy())
    np.testing.assert_array_equal(x.max(1).numpy(), t.amax(1).numpy())


def test_topk_with_nan_and_long_rows_match_torch():
    rng = np.random.default_rng(4)
    a = rng.normal(size=(3, 200))
    a[0, 17] = np.nan
    a[1, :] = np.round(a[1] * 2)              # ties at the boundary
    for k, largest in ((1, True), (5, True), (7, False)):
        v, i = em.tensor(a).topk(k, largest=largest)
        tv, ti = torch.tensor(a).topk(k, largest=largest)
        np.testing.assert_array_equal(v.numpy()[[0, 2]], tv.numpy()[[0, 2]])
        np.testing.assert_array_equal(i.numpy()[[0, 2]], ti.numpy()[[0, 2]])
        # torch leaves the order of ties open; ember takes the lower index first
        ref = np.argsort(-a[1] if largest else a[1], kind="stable")[:k]
        np.testing.assert_array_equal(i.numpy()[1], ref)


@pytest.mark.parametrize("dtype", [em.bfloat16, em.float16])
def test_low_precision_sort_with_nan(dtype):
    a = np.array([3.0, np.nan, -1.0, 2.0, np.nan, 0.5])
    v, i = em.tensor(a, dtype=dtype).sort_with_indices()
    np.testing.assert_array_equal(i.numpy(), [2, 5, 3, 0, 1, 4])
    v, i = em.tensor(a, dtype=dtype).sort_with_indices(descending=True)
    np.testing.assert_array_equal(i.numpy(), [1, 4, 0, 3, 5, 2])
    assert em.tensor(a, dtype=dtype).argmax().item() == 1


# -- gradients where the rule is a choice -----------------------------------------------------
def test_max_ties_share_gradient_like_torch_amax():
    a = np.array([[1.0, 4.0, 4.0, 2.0], [3.0, 3.0, 3.0, 3.0], [0.0, -1.0, 5.0, 2.0]])
    g, w = _grad(lambda x: x.max(1), a)
    np.testing.assert_allclose(g, _torch_grad(lambda t: t.amax(1), a, w))
    g, w = _grad(lambda x: x.min(), a)
    np.testing.assert_allclose(g, _torch_grad(lambda t: t.amin(), a, w))


def test_max_with_indices_gradient_goes_to_returned_index():
    a = np.array([[1.0, 4.0, 4.0, 2.0], [3.0, 3.0, 3.0, 3.0]])
    g, w = _grad(lambda x: x.max_dim_with_indices(1), a)
    expect = np.zeros_like(a)
    expect[0, 1], expect[1, 0] = w[0], w[1]
    np.testing.assert_allclose(g, expect)
    g, w = _grad(lambda x: x.cummax(1), a)
    np.testing.assert_allclose(g, _torch_grad(lambda t: torch.cummax(t, 1)[0], a, w))


@pytest.mark.parametrize("zeros", [0, 1, 2, 3])
def test_prod_gradient_with_zeros_matches_torch(zeros):
    rng = np.random.default_rng(zeros)
    a = rng.uniform(0.5, 1.5, size=(3, 5))
    a[:, :zeros] = 0.0
    a[1] = rng.permutation(a[1])
    for fn, tfn in ((lambda x: x.prod(1), lambda t: t.prod(1)),
                    (lambda x: x.prod(), lambda t: t.prod())):
        g, w = _grad(fn, a)
        np.testing.assert_allclose(g, _torch_grad(tfn, a, w), rtol=1e-12, atol=1e-12)


def test_cumprod_and_scan_gradients_match_torch():
    rng = np.random.default_rng(1)
    a = rng.uniform(0.5, 1.5, size=(3, 6)) * rng.choice([-1, 1], size=(3, 6))
    g, w = _grad(lambda x: x.cumprod(1), a)
    np.testing.assert_allclose(g, _torch_grad(lambda t: t.cumprod(1), a, w), rtol=1e-10)
    g, w = _grad(lambda x: x.cumsum(0), a)
    np.testing.assert_allclose(g, _torch_grad(lambda t: t.cumsum(0), a, w), rtol=1e-10)


def test_sort_topk_gradients_match_torch():
    a = np.random.default_rng(2).permutation(20).reshape(4, 5) * 0.5
    g, w = _grad(lambda x: x.sort(0, descending=True), a)
    np.testing.assert_allclose(g, _torch_grad(lambda t: t.sort(0, descending=True)[0], a, w))
    g, w = _grad(lambda x: x.topk(2, 1, largest=False), a)
    np.testing.assert_allclose(g, _torch_grad(lambda t: t.topk(2, 1, largest=False)[0], a, w))


def test_logsumexp_matches_torch_and_is_stable():
    a = np.array([[1000.0, 1000.0, -5.0], [-np.inf, -np.inf, -np.inf], [1.0, np.inf, 0.0],
                  [-1000.0, -1001.0, -np.inf]])
    np.testing.assert_allclose(em.tensor(a).logsumexp(1).numpy(),
                               torch.tensor(a).logsumexp(1).numpy())
    b = a[[0, 3]]
    g, w = _grad(lambda x: x.logsumexp(1, keepdim=True), b)
    np.testing.assert_allclose(g, _torch_grad(lambda t: t.logsumexp(1, keepdim=True), b, w))


def test_var_std_match_torch():
    a = np.random.default_rng(3).normal(size=(3, 4, 5))
    t = torch.tensor(a)
    x = em.tensor(a)
    for kw, tkw in (({}, {}), ({"dim": 1}, {"dim": 1}),
                    ({"dim": (0, 2), "correction": 0, "keepdim": True},
                     {"dim": (0, 2), "correction": 0, "keepdim": True})):
        np.testing.assert_allclose(x.var(**kw).numpy(), torch.var(t, **tkw).numpy())
        np.testing.assert_allclose(x.std(**kw).numpy(), torch.std(t, **tkw).numpy())
        v, m = x.std_mean(**kw)
        tv, tm = torch.std_mean(t, **tkw)
        np.testing.assert_allclose(v.numpy(), tv.numpy())
        np.testing.assert_allclose(m.numpy(), tm.numpy())
    assert np.isnan(em.tensor([1.0]).var().item())


def test_functional_and_burn_names():
    x = em.tensor(np.arange(6.0).reshape(2, 3))
    assert em.sum(x).item() == 15 and em.max(x).item() == 5 and em.any(x).item()
    assert x.sum_dim(1).shape == (2, 1) and x.max_dim(0).shape == (1, 3)
    assert x.mean_dim(1).numpy().tolist() == [[1.0], [4.0]]
    assert x.prod_dim(0).numpy().tolist() == [[0.0, 4.0, 10.0]]
    assert x.min_dim(1).numpy().tolist() == [[0.0], [3.0]]
    assert em.topk(x, 1, dim=0)[0].numpy().tolist() == [[3.0, 4.0, 5.0]]


# -- sums of short kept rows (bias gradients): summed blocked on NdArray ---------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["channels_last", "rows", "odd_rows", "two_dims"])
def test_sum_of_short_rows_matches_float64(case, dtype):
    """A sum whose reduced dims are outermost in memory and whose kept dims are a short row
    (ember.ops.reduce._sum_rows_blocked) agrees with float64 as NumPy's own sum does."""
    from ember.ops.reduce import SUM, _sum_rows_blocked
    rng = np.random.default_rng(5)
    if case == "channels_last":
        x, dims = rng.standard_normal((32, 8, 8, 16)).astype(dtype).transpose(0, 3, 1, 2), \
            (0, 2, 3)
    elif case == "rows":
        x, dims = rng.standard_normal((2048, 16)).astype(dtype), (0,)
    elif case == "odd_rows":
        x, dims = rng.standard_normal((4097, 3)).astype(dtype), (0,)
    else:
        x, dims = rng.standard_normal((64, 32, 10)).astype(dtype), (0, 1)
    assert _sum_rows_blocked(x, dims) is not None          # the blocked path is taken
    ref = x.astype(np.float64).sum(axis=dims, keepdims=True)
    for keepdim in (True, False):
        got = SUM.numpy(x, dims=dims, keepdim=keepdim)
        assert got.dtype == x.dtype
        want = ref if keepdim else ref.reshape(got.shape)
        assert got.shape == np.sum(x, axis=dims, keepdims=keepdim).shape
        tol = 1e-5 if dtype is np.float32 else 1e-13
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(x).sum() / x.size)


def test_sum_blocked_declines_what_it_does_not_hold():
    from ember.ops.reduce import _sum_rows_blocked
    rng = np.random.default_rng(6)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    assert _sum_rows_blocked(x, (0,)) is None              # a long kept row: NumPy's own
    assert _sum_rows_blocked(x, (0, 1)) is None            # a full sum stays pairwise
    assert _sum_rows_blocked(x.T, (0,)) is None            # reduced dim innermost in memory
    y = rng.standard_normal((32, 16, 8, 8)).astype(np.float32)
    assert _sum_rows_blocked(y, (0, 2)) is None            # reduced dims not outermost
