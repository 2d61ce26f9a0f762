"""Autodiff semantics: tracking, grad mode, the Gradients value, broadcasting, accumulation,
freed graphs, and that graphs do not leak. References are hand-derived NumPy gradients."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import ember as em
from ember.backend.autodiff import live_nodes
from ember.backend.autodiff.graph import Node
from ember.errors import AutodiffError, ShapeError

ND = em.device("cpu")
AD = ND.autodiff()


def leaf(a, dtype=em.f64):
    return em.tensor(np.asarray(a), dtype=dtype, device=AD).require_grad()


def const(a, dtype=em.f64):
    return em.tensor(np.asarray(a), dtype=dtype, device=AD)


# -- tracking -------------------------------------------------------------------------------
def test_require_grad_detach_is_require_grad():
    x = const([1.0, 2.0])
    assert not x.is_require_grad()
    w = x.require_grad()
    assert w.is_require_grad() and not x.is_require_grad()   # tensors are immutable values
    assert w.require_grad().id() == w.id()                   # already a leaf: same id
    y = w * 2.0
    assert y.is_require_grad()
    assert y.id() is None                                     # interior tensors have no id
    d = y.detach()
    assert not d.is_require_grad()
    np.testing.assert_array_equal(d.numpy(), [2.0, 4.0])
    assert not (d * w.detach()).is_require_grad()
    assert w.set_require_grad(False).is_require_grad() is False
    assert x.set_require_grad(True).is_require_grad()


def test_require_grad_only_floats():
    with pytest.raises(AutodiffError, match="only float.*i64"):
        em.tensor([1, 2], device=AD).require_grad()


def test_require_grad_is_a_noop_on_plain_devices():
    x = em.tensor([1.0], device=ND).require_grad()
    assert not x.is_require_grad()
    with pytest.raises(AutodiffError, match="does not track gradients"):
        (x * 2.0).backward()
    with pytest.raises(AutodiffError, match="tracks no gradients"):
        x.grad(em.Gradients())


def test_leaves_have_distinct_stable_ids():
    a, b = leaf([1.0]), leaf([1.0])
    assert a.id() != b.id() and a.id() is not None
    assert (a + 0.0).require_grad().id() not in (a.id(), b.id())


# -- grad mode ------------------------------------------------------------------------------
def test_no_grad_context_records_nothing():
    x = leaf(np.ones(3))
    before = live_nodes()
    with em.no_grad():
        assert not em.is_grad_enabled()
        ys = [(x * 2.0).exp() + x for _ in range(5)]
        assert not any(y.is_require_grad() for y in ys)
        assert live_nodes() == before
    assert em.is_grad_enabled()
    assert (x * 2.0).is_require_grad()


def test_no_grad_decorator_both_spellings():
    x = leaf([1.0, 2.0])

    @em.no_grad()
    def f(t):
        assert not em.is_grad_enabled()
        return t * 3.0

    @em.no_grad
    def g(t):
        return t * 3.0

    assert not f(x).is_require_grad()
    assert not g(x).is_require_grad()
    assert f.__name__ == "f" and g.__name__ == "g"
    assert em.is_grad_enabled()
    assert (x * 3.0).is_require_grad()


def test_enable_grad_inside_no_grad_and_nesting():
    x = leaf([1.0])
    ctx = em.no_grad()
    with ctx:
        with ctx:               # one object entered twice restores correctly
            with em.enable_grad():
                assert em.is_grad_enabled()
                assert (x * 2.0).is_require_grad()
            assert not (x * 2.0).is_require_grad()
        assert not em.is_grad_enabled()
    assert em.is_grad_enabled()


def test_no_grad_restored_after_exception():
    with pytest.raises(ValueError):
        with em.no_grad():
            raise ValueError("boom")
    assert em.is_grad_enabled()
    assert (leaf([1.0]) * 2.0).is_require_grad()


def test_no_grad_is_thread_local():
    x = leaf(np.arange(4.0))
    entered, checked = threading.Event(), threading.Event()
    seen = {}

    def worker():
        assert entered.wait(10)
        try:
            seen["enabled"] = em.is_grad_enabled()
            y = (x * 2.0).sum()
            seen["tracked"] = y.is_require_grad()
            seen["grad"] = x.grad(y.backward()).numpy()
        finally:
            checked.set()

    t = threading.Thread(target=worker)
    t.start()
    with em.no_grad():
        entered.set()
        assert checked.wait(10)
        assert not (x * 2.0).is_require_grad()   # this thread still records nothing
    t.join()
    assert seen == {"enabled": True, "tracked": True, "grad": seen["grad"]}
    np.testing.assert_array_equal(seen["grad"], [2.0] * 4)


def test_no_grad_in_a_thread_does_not_affect_main():
    x = leaf([1.0])
    inside, release = threading.Event(), threading.Event()
    out = {}

    def worker():
        with em.no_grad():
            out["worker"] = (x * 2.0).is_require_grad()
            inside.set()
            release.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    assert inside.wait(10)
    try:
        assert em.is_grad_enabled()
        assert (x * 2.0).is_require_grad()
    finally:
        release.set()
        t.join()
    assert out["worker"] is False


# -- the Gradients value --------------------------------------------------------------------
def test_backward_returns_gradients_and_mutates_nothing():
    xv = np.array([0.5, -1.0, 2.0])
    x = leaf(xv)
    w = leaf([3.0])
    grads = (x * w).exp().sum().backward()
    assert isinstance(grads, em.Gradients)
    assert len(grads) == 2 and x.id() in grads and w.id() in grads
    np.testing.assert_allclose(x.grad(grads).numpy(), 3.0 * np.exp(3.0 * xv))
    np.testing.assert_allclose(w.grad(grads).numpy(), [np.sum(xv * np.exp(3.0 * xv))])
    np.testing.assert_array_equal(x.numpy(), xv)
    # an untracked input and an interior tensor have no gradient
    assert const([1.0]).grad(grads) is None


def test_grad_remove_and_replace():
    x, w = leaf([1.0, 2.0]), leaf([2.0, 2.0])
    grads = (x * w).sum().backward()
    gx = x.grad_remove(grads)
    np.testing.assert_array_equal(gx.numpy(), [2.0, 2.0])
    assert x.grad(grads) is None and x.grad_remove(grads) is None
    assert len(grads) == 1
    new = em.tensor([7.0, 8.0], dtype=em.f64)
    x.grad_replace(grads, new)
    np.testing.assert_array_equal(x.grad(grads).numpy(), [7.0, 8.0])
    with pytest.raises(ShapeError, match="grad_replace.*\\(3,\\).*\\(2,\\)"):
        x.grad_replace(grads, em.tensor([1.0, 2.0, 3.0], dtype=em.f64))
    with pytest.raises(AutodiffError, match="does not require grad"):
        const([1.0]).grad_replace(grads, new)


def test_gradients_live_on_the_inner_device():
    x = leaf(np.ones((2, 2)), em.f32)
    g = x.grad((x.exp() * 2.0).sum().backward())
    assert g.device is ND
    assert g.device is AD.inner
    assert not g.device.backend.is_autodiff
    assert g.dtype is em.f32 and g.shape == (2, 2)


# -- values of gradients --------------------------------------------------------------------
def test_broadcast_inputs_are_reduced_to_their_shapes():
    rng = np.random.default_rng(0)
    av = rng.normal(size=(3, 1))
    bv = rng.normal(size=(4,))
    cv = rng.normal(size=())
    dv = rng.normal(size=(2, 1, 4))
    a, b, c, d = leaf(av), leaf(bv), leaf(cv), leaf(dv)
    out = ((a * b + c) * d).exp()            # shape (2, 3, 4)
    assert out.shape == (2, 3, 4)
    grads = out.sum().backward()
    # hand derivation: L = sum exp((a*b + c)*d)
    e = np.exp((av * bv + cv) * dv)
    np.testing.assert_allclose(a.grad(grads).numpy(), np.sum(e * dv * bv, axis=(0, 2))[:, None])
    np.testing.assert_allclose(b.grad(grads).numpy(), np.sum(e * dv * av, axis=(0, 1)))
    np.testing.assert_allclose(c.grad(grads).numpy(), np.sum(e * dv))
    np.testing.assert_allclose(d.grad(grads).numpy(),
                               np.sum(e * (av * bv + cv), axis=1, keepdims=True))
    assert a.grad(grads).shape == (3, 1) and c.grad(grads).shape == ()


def test_expand_and_reshape_gradients():
    xv = np.array([[1.0], [2.0]])
    x = leaf(xv)
    y = x.expand(2, 3).reshape(3, 2) * const(np.arange(6.0).reshape(3, 2))
    g = x.grad(y.sum().backward()).numpy()
    w = np.arange(6.0).reshape(2, 3)          # the weight each expanded element meets
    np.testing.assert_allclose(g, w.sum(axis=1, keepdims=True))


def test_a_tensor_used_twice_accumulates():
    xv = np.array([0.5, 1.5, -2.0])
    x = leaf(xv)
    g = x.grad((x * x + x).sum().backward()).numpy()
    np.testing.assert_allclose(g, 2 * xv + 1)
    g = x.grad((x * x * x).sum().backward()).numpy()
    np.testing.assert_allclose(g, 3 * xv ** 2)


def test_diamond_graph():
    xv = np.array([0.3, -0.7])
    x = leaf(xv)
    a = x * 2.0
    b = x.exp()
    c = (a * b) / (b + 1.0)                  # both branches meet twice
    g = x.grad(c.sum().backward()).numpy()
    e = np.exp(xv)
    # c = 2x e / (e + 1): dc/dx = 2e/(e+1) + 2x e/(e+1)^2
    np.testing.assert_allclose(g, 2 * e / (e + 1) + 2 * xv * e / (e + 1) ** 2)


def test_deep_chain_does_not_recurse():
    x = leaf([1.0])
    y = x
    for _ in range(5000):                    # deeper than Python's recursion limit
        y = y + 1.0
    g = x.grad(y.sum().backward())
    np.testing.assert_array_equal(g.numpy(), [1.0])


def test_sub_div_neg_log_mean_gradients():
    av = np.array([1.0, 2.0, 4.0])
    bv = np.array([0.5, 3.0, 1.5])
    a, b = leaf(av), leaf(bv)
    loss = ((a - b) / b).sum() + (-a).log().sum() * 0.0 + (a.log() * b).mean()
    grads = loss.backward()
    np.testing.assert_allclose(a.grad(grads).numpy(), 1 / bv + bv / av / 3)
    np.testing.assert_allclose(b.grad(grads).numpy(), -av / bv ** 2 + np.log(av) / 3)


def test_scalar_operands_and_reverse_operators():
    xv = np.array([1.0, 2.0])
    x = leaf(xv)
    loss = (2.0 - x) * (3.0 / x) + 1.0
    g = x.grad(loss.sum().backward()).numpy()
    # (2-x)*3/x = 6/x - 3 -> -6/x^2
    np.testing.assert_allclose(g, -6 / xv ** 2)


@pytest.mark.skipif(not hasattr(em, "matmul"), reason="matmul (helper E) not present")
def test_matmul_gradient():
    rng = np.random.default_rng(1)
    av, bv = rng.normal(size=(2, 3)), rng.normal(size=(3, 4))
    a, b = leaf(av), leaf(bv)
    grads = (a @ b).sum().backward()
    np.testing.assert_allclose(a.grad(grads).numpy(), np.ones((2, 4)) @ bv.T)
    np.testing.assert_allclose(b.grad(grads).numpy(), av.T @ np.ones((2, 4)))


def test_mixed_dtypes_give_gradients_in_each_leafs_dtype():
    a = leaf([1.0, 2.0], em.f32)
    b = leaf([3.0, 4.0], em.f64)
    h = leaf([1.0, 1.0], em.f16)
    out = a * b + h                          # f32 * f64 -> f64; + f16 -> f64
    assert out.dtype is em.f64
    grads = out.sum().backward()
    assert a.grad(grads).dtype is em.f32 and b.grad(grads).dtype is em.f64
    assert h.grad(grads).dtype is em.f16
    np.testing.assert_allclose(a.grad(grads).numpy(), [3.0, 4.0])
    np.testing.assert_allclose(b.grad(grads).numpy(), [1.0, 2.0])


def test_int_and_bool_ops_in_the_graph_do_not_break_backward():
    xv = np.array([-1.5, 0.5, 2.5])
    x = leaf(xv)
    mask = (x == x) * 1                      # bool -> i64 through a scalar; not float
    assert mask.dtype is em.i64 and not mask.is_require_grad()
    as_int = (x * 2.0).int()                 # a float -> int cast cuts the gradient
    assert as_int.dtype is em.i64 and not as_int.is_require_grad()
    out = x * mask + as_int.float() + x * (x == const(xv))
    grads = out.sum().backward()
    np.testing.assert_allclose(x.grad(grads).numpy(), [2.0, 2.0, 2.0])


def test_int_root_backward_is_a_clear_error():
    x = leaf([1.0, 2.0])
    with pytest.raises(AutodiffError, match="not a float dtype"):
        (x * 2.0).int().sum().backward()


def test_backward_of_a_leaf_and_of_non_scalar_roots():
    x = leaf([1.0, 2.0])
    np.testing.assert_array_equal(x.grad(x.backward()).numpy(), [1.0, 1.0])
    # a non-scalar root is seeded with ones
    np.testing.assert_array_equal(x.grad((x * 3.0).backward()).numpy(), [3.0, 3.0])


# -- errors ---------------------------------------------------------------------------------
def test_backward_on_an_untracked_tensor_raises():
    with pytest.raises(AutodiffError, match=r"shape \(2,\) is not tracked.*require_grad"):
        (const([1.0, 2.0]) * 2.0).backward()


def test_second_backward_through_a_freed_graph_raises():
    x = leaf([1.0, 2.0])
    y = (x * 2.0).exp()
    loss = y.sum()
    loss.backward()
    with pytest.raises(AutodiffError, match="already freed.*forward pass again"):
        loss.backward()
    # a new root over the freed part of the graph fails the same way
    with pytest.raises(AutodiffError, match="already freed.*exp"):
        (y * 3.0).sum().backward()
    # a fresh forward pass works
    np.testing.assert_allclose(x.grad((x * 2.0).sum().backward()).numpy(), [2.0, 2.0])


# -- graph lifetime -------------------------------------------------------------------------
def test_backward_releases_the_graph():
    x = leaf(np.ones(3))
    base = live_nodes()
    loss = ((x * 2.0).exp() + x).sum()
    assert live_nodes() == base + 4
    loss.backward()
    assert live_nodes() == base               # released although `loss` is alive


def test_dropping_a_graph_frees_it():
    x = leaf(np.ones(3))
    base = live_nodes()
    loss = ((x * 2.0).exp() + x).sum()
    assert live_nodes() > base
    del loss
    assert live_nodes() == base


def test_live_nodes_stay_flat_over_10000_training_steps():
    """Graphs are acyclic and released by backward, so reference counting alone frees them:
    the cycle collector is off during the loop, and nothing may accumulate."""
    rng = np.random.default_rng(0)
    xv, yv = rng.normal(size=(8, 3)), rng.normal(size=(8, 1))
    xs = em.tensor(xv, dtype=em.f32, device=AD)
    ys = em.tensor(yv, dtype=em.f32, device=AD)
    w = em.tensor(rng.normal(size=(3, 1)) * 0.1, dtype=em.f32, device=AD).require_grad()
    bias = em.zeros(1, dtype=em.f32, device=AD).require_grad()
    use_matmul = hasattr(em, "matmul")
    xcol = xs.reshape(8, 3, 1)

    def mse(w, bias):
        pred = xs @ w + bias if use_matmul else (xcol * w).sum(1) + bias
        err = pred - ys
        return (err * err).mean()

    first_loss = mse(w, bias).item()
    base = live_nodes()
    counts = []
    gc.disable()
    try:
        for step in range(10_000):
            grads = (mse(w, bias) + (w * w).sum().exp() * 1e-3).backward()
            w = (w.to_device(ND) - w.grad(grads) * 0.05).to_device(AD).require_grad()
            bias = (bias.to_device(ND) - bias.grad(grads) * 0.05).to_device(AD).require_grad()
            if step % 2500 == 0:
                counts.append(sum(1 for o in gc.get_objects() if type(o) is Node))
    finally:
        gc.enable()
    del grads
    assert counts == [counts[0]] * len(counts), counts   # flat: nothing survives a step
    assert live_nodes() == base
    assert mse(w, bias).item() < first_loss * 0.9       # and the model actually trained


def test_backward_in_threads_concurrently():
    errors = []

    def work(seed):
        try:
            r = np.random.default_rng(seed)
            v = r.normal(size=5)
            x = leaf(v)
            for _ in range(200):
                g = x.grad(((x * x).exp() * 0.5).sum().backward()).numpy()
                np.testing.assert_allclose(g, v * np.exp(v * v))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def test_a_rule_returning_a_bad_gradient_shape_is_named():
    from ember.ops.registry import Op
    from ember.ops import elementwise as E

    def bad_vjp(g, i, o):
        return (g.reshape(-1)[:1].expand(7), None)

    bad = Op("bad_add", "binary", 2, (), E.ADD.infer, E.ADD.numpy, bad_vjp, None, "same", 1, "")
    x = leaf(np.ones(3))
    from ember.tensor.dispatch import binary
    with pytest.raises(AutodiffError, match=r"derivative of bad_add.*\(7,\).*\(3,\)"):
        binary(bad, x, x).sum().backward()


def test_a_rule_returning_a_smaller_gradient_is_broadcast():
    from ember.ops.registry import Op
    from ember.ops import elementwise as E

    def scalar_vjp(g, i, o):
        return (g.sum(),)    # shape () for an input of shape (3,)

    op = Op("scalar_grad", "unary", 1, (), E.EXP.infer, E.EXP.numpy, scalar_vjp, None, None,
            1, "")
    x = leaf(np.ones(3))
    from ember.tensor.dispatch import unary
    g = x.grad(unary(op, x).sum().backward())
    np.testing.assert_array_equal(g.numpy(), [3.0, 3.0, 3.0])


def test_backward_computes_only_the_gradients_that_are_wanted(monkeypatch):
    """Rules declared with ``vjp_needs`` (matmul, conv) skip gradients of inputs that do not
    require grad: a first layer's input costs no backward matmul or conv."""
    import ember as em
    from ember.ops import OPS
    calls = {"matmul": 0, "conv_transpose2d": 0, "conv2d_weight_backward": 0, "mul": 0}
    for name in calls:
        op = OPS[name]
        orig = op.numpy

        def counting(*a, _orig=orig, _name=name, **k):
            calls[_name] += 1
            return _orig(*a, **k)
        monkeypatch.setattr(op, "numpy", counting)
    ad = em.device("cpu").autodiff()
    x = em.tensor(np.ones((4, 3)), device=ad)
    w = em.tensor(np.ones((3, 2)), device=ad).require_grad()
    grads = (x @ w).sum().backward()
    assert calls["matmul"] == 2, calls   # the forward and dL/dw, not dL/dx
    np.testing.assert_allclose(w.grad(grads).numpy(), np.full((3, 2), 4.0))
    img = em.tensor(np.ones((1, 1, 4, 4)), device=ad)
    k = em.tensor(np.ones((1, 1, 3, 3)), device=ad).require_grad()
    grads = em.conv2d(img, k).sum().backward()
    assert calls["conv_transpose2d"] == 0 and calls["conv2d_weight_backward"] == 1, calls
    np.testing.assert_allclose(k.grad(grads).numpy(), np.full((1, 1, 3, 3), 4.0))
    calls["mul"] = 0
    xs = em.tensor(np.full((4, 2), 2.0), device=ad)
    grads = (xs * w[:1]).sum().backward()
    assert calls["mul"] == 2, calls       # the forward and dL/dw, not dL/dx
    np.testing.assert_allclose(w.grad(grads).numpy(), np.array([[8.0, 8.0]] + [[0.0, 0.0]] * 2))


# -- what a node keeps ------------------------------------------------------------------------
def test_rules_say_what_they_read():
    """`Op.vjp_uses_out` / `vjp_uses_inputs`, read from each rule's code where not declared."""
    from ember.ops import OPS
    from ember.ops.registry import reads_param
    assert OPS["exp"].vjp_uses_out and not OPS["exp"].vjp_uses_inputs
    assert not OPS["add"].vjp_uses_out and not OPS["add"].vjp_uses_inputs
    assert OPS["mul"].vjp_uses_inputs and not OPS["mul"].vjp_uses_out
    assert OPS["attention"].vjp_uses_out and OPS["matmul"].vjp_uses_inputs

    def hands_on(g, i, o):
        return (helper(o),)

    def closes_over(g, i, o):
        return ((lambda: o)(),)

    def ignores(g, i, o):
        return (g,)

    def helper(x):
        return x
    assert reads_param(hands_on, 2) and reads_param(closes_over, 2)
    assert not reads_param(ignores, 2) and not reads_param(ignores, 1)
    assert reads_param(lambda g, i, o: (g * i[0],), 1)
    assert reads_param(lambda g, i, o: tuple([g * x for x in i]), 1)   # (a comprehension)
    assert reads_param(type("Rule", (), {"__call__": lambda self, g, i, o: (g,)})(), 2)
    assert not reads_param(None, 2)


def test_a_node_keeps_only_the_values_its_rule_reads():
    """A value no rule reads is freed with its last tensor while the graph lives (as PyTorch
    saves only what a derivative needs); one a rule reads stays until backward."""
    import weakref
    from ember.backend import Autodiff, NdArray
    dev = Autodiff(NdArray()).device(0)
    x = em.tensor(np.arange(1.0, 4.0), device=dev).require_grad()
    t = x * 2.0                      # mul keeps x (its rule reads the inputs), not t
    u = t + 1.0                      # add keeps neither t nor u
    ref_t = weakref.ref(t._prim.inner)
    del t
    gc.collect()
    assert ref_t() is None, "the product was kept though no rule reads it"
    e = u.exp()                      # exp's rule reads its output: e's value is kept
    ref_e = weakref.ref(e._prim.inner)
    loss = e.sum()
    del e
    gc.collect()
    assert ref_e() is not None
    g = x.grad(loss.backward())
    want = 2.0 * np.exp(np.arange(1.0, 4.0) * 2.0 + 1.0)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-12)
