"""The per-call shortcuts of the training hot path behave exactly like the code they skip:
the normalized-argument cache of conv and pool calls (ember/tensor/nn_ops.py), the swap_dims
permutation cache, the cached helpers of the conv and max-pool derivatives, the path-free
``Module.parameters`` walk, ``Module.map`` keeping plain tuples, ``Param.with_tensor``
without the constructor call and the optimizer reading GradientsParams by id."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn, optim
from ember.errors import DTypeError, IndexError_, ShapeError
from ember.ops import nn as N
from ember.tensor import nn_ops

DEV = em.device("cpu", fusion=False)
AD = DEV.autodiff()
RNG = np.random.default_rng(0)


def T(*shape, device=DEV):
    return em.tensor(RNG.normal(size=shape).astype(np.float32), device=device)


def raises_twice(exc, match, fn):
    """``fn`` raises ``exc`` on every call (a failed normalization is never cached)."""
    for _ in range(2):
        with pytest.raises(exc, match=match):
            fn()


# -- conv / pool argument cache -------------------------------------------------------------
def test_bad_conv_arguments_raise_on_every_call_even_after_good_ones():
    x, w = T(2, 3, 6, 6), T(4, 3, 3, 3)
    em.conv2d(x, w, stride=1, padding=1)                   # a good call first (cached)
    raises_twice(ShapeError, r"stride \(0, 0\) must be >= 1", lambda: em.conv2d(x, w, stride=0))
    # True == 1 and hashes like it: the cache must not take it for the cached 1
    raises_twice(DTypeError, r"stride must be an int .* got \(1, True\)",
                 lambda: em.conv2d(x, w, stride=(1, True)))
    raises_twice(DTypeError, "got True", lambda: em.conv2d(x, w, stride=True))
    raises_twice(DTypeError, "got 1.0", lambda: em.conv2d(x, w, stride=1.0))
    raises_twice(ShapeError, "needs stride 1", lambda: em.conv2d(x, w, padding="same",
                                                                 stride=2))
    raises_twice(ShapeError, "groups must be a positive int",
                 lambda: em.conv2d(x, w, groups=1.0))
    assert em.conv2d(x, w, stride=1, padding=1).shape == (2, 4, 6, 6)


def test_bad_pool_and_conv_transpose_arguments_raise_on_every_call():
    x = T(2, 3, 6, 6)
    em.max_pool2d(x, 2)
    em.avg_pool2d(x, 2)
    raises_twice(ShapeError, r"kernel_size \(0, 0\)", lambda: em.max_pool2d(x, 0))
    raises_twice(DTypeError, "got True", lambda: em.avg_pool2d(x, True))
    raises_twice(ShapeError, "at most half the kernel", lambda: em.max_pool2d(x, 2, padding=2))
    wt = T(3, 2, 3, 3)
    em.conv_transpose2d(x, wt, stride=2, output_padding=1)
    raises_twice(ShapeError, "output_padding", lambda: em.conv_transpose2d(
        x, wt, stride=1, output_padding=1))


def test_list_arguments_are_read_anew_on_every_call():
    x, w = T(1, 2, 9, 9), T(2, 2, 3, 3)
    stride = [1, 1]
    assert em.conv2d(x, w, stride=stride).shape == (1, 2, 7, 7)
    stride[:] = [2, 2]                                      # mutated in place: not cached
    assert em.conv2d(x, w, stride=stride).shape == (1, 2, 4, 4)
    k = [3, 3]
    assert em.max_pool2d(x, k).shape == (1, 2, 3, 3)
    k[:] = [2, 2]
    assert em.max_pool2d(x, k).shape == (1, 2, 4, 4)


def test_same_padding_follows_the_weight():
    x = T(1, 2, 8, 8)
    same = "same"
    for k in (3, 5, 1, 3):
        assert em.conv2d(x, T(4, 2, k, k), padding=same).shape == (1, 4, 8, 8)


def test_cached_attrs_hold_only_immutable_values_and_stay_bounded():
    x, w = T(1, 2, 9, 9), T(2, 2, 3, 3)
    for mod in (nn.Conv2d(2, 2, 3, stride=2, padding=(1, 1), device=DEV),
                nn.MaxPool2d((2, 3), stride=2), nn.AvgPool2d(2)):
        ref = mod(x)
        np.testing.assert_array_equal(mod(x).numpy(), ref.numpy())   # the cached path
    em.conv_transpose2d(x, T(2, 3, 3, 3), stride=2)
    assert nn_ops._ATTRS
    for args, attrs in nn_ops._ATTRS.values():
        for v in attrs.values():
            assert type(v) in (int, bool, tuple), v
            if type(v) is tuple:
                assert all(type(i) is int for i in v), v
    # arguments built anew on every call: the cache is cleared, never grows without bound
    for i in range(nn_ops._ATTRS_MAX + 50):
        em.conv2d(x, w, stride=(1, 1 + i % 2) + ())
        assert len(nn_ops._ATTRS) <= nn_ops._ATTRS_MAX


def test_cached_conv_and_pool_match_fresh_normalization():
    x, w, b = T(2, 3, 7, 7), T(4, 3, 3, 3), T(4)
    for kw in ({}, {"stride": 2}, {"stride": (2, 1), "padding": (1, 0)},
               {"dilation": 2, "padding": "same"}, {"padding": "valid"}):
        first = em.conv2d(x, w, b, **kw).numpy()
        again = em.conv2d(x, w, b, **kw).numpy()
        fresh = em.conv2d(x, w, b, **{k: (list(v) if isinstance(v, tuple) else v)
                                      for k, v in kw.items()}).numpy()
        np.testing.assert_array_equal(first, again)
        np.testing.assert_array_equal(first, fresh)
    for kw in ({}, {"stride": 1}, {"padding": 1}, {"ceil_mode": True}):
        np.testing.assert_array_equal(em.max_pool2d(x, 3, **kw).numpy(),
                                      em.max_pool2d(x, [3, 3], **kw).numpy())


# -- shape ops ------------------------------------------------------------------------------
def test_swap_dims_cache_keeps_the_checks():
    x = T(2, 3, 4)
    assert x.swap_dims(1, 0).shape == (3, 2, 4)
    assert x.swap_dims(1, 0).shape == (3, 2, 4)
    with pytest.raises(DTypeError, match="got bool True"):
        x.swap_dims(True, 0)                               # True == 1: not the cached entry
    with pytest.raises(DTypeError, match="got float 1.0"):
        x.swap_dims(1.0, 0)
    with pytest.raises(IndexError_, match="out of range"):
        x.swap_dims(0, 3)
    assert x.swap_dims(-1, 2) is x
    assert T(5, 6).swap_dims(1, 0).shape == (6, 5)        # the same dims, another rank


def test_reshape_minus_one():
    x = T(2, 3, 4)
    assert x.reshape(-1).shape == (24,)
    assert x.reshape(4, -1, 2).shape == (4, 3, 2)
    assert x.reshape(2, 3, -1) is x
    with pytest.raises(ShapeError, match="at most one dim can be -1"):
        x.reshape(-1, 2, -1)
    with pytest.raises(ShapeError, match=r"cannot reshape \(2, 3, 4\) \(24 elements\) to "
                                         r"\(5, -1\)"):
        x.reshape(5, -1)
    with pytest.raises(ShapeError, match="negative size"):
        x.reshape(-1, -2)


# -- derivative helpers ---------------------------------------------------------------------
def test_vjp_helpers_take_lists_as_well_as_tuples():
    assert N._disjoint_windows([2, 2], [2, 2], [1, 1]) is True
    assert N._disjoint_windows((3, 3), (2, 2), (1, 1)) is False
    assert N._grad_output_padding([5], [2], [3], [2], [0], [1]) == (0,)
    assert N._grad_output_padding((6,), (2,), (3,), (2,), (0,), (1,)) == (1,)


# -- modules and params ---------------------------------------------------------------------
class _Block(em.Module):
    def __init__(self, device):
        self.lin = nn.Linear(3, 4, device=device)
        self.sizes = (3, 4)
        self.pair = (nn.Linear(4, 4, device=device), 7)
        self.table = {"a": [nn.Linear(4, 2, device=device)], "b": ("x", 1),
                      None: (nn.Linear(2, 2, device=device),)}   # a None key is a path part
        self.shared = self.lin.weight


class _Net(em.Module):
    def __init__(self, device):
        self.block = _Block(device)
        self.again = self.block                    # a shared sub-module
        self.head = nn.Linear(2, 1, device=device)
        self.scale = 2.0


def test_parameters_are_named_parameters_without_paths():
    net = _Net(AD)
    named = net.named_parameters()
    assert [p for _, p in named] == net.parameters()
    assert [id(p) for _, p in named] == [id(p) for p in net.parameters()]
    assert [path for path, _ in named] == [
        "block.lin.weight", "block.lin.bias", "block.pair.0.weight", "block.pair.0.bias",
        "block.table.a.0.weight", "block.table.a.0.bias", "block.table.None.0.weight",
        "block.table.None.0.bias", "head.weight", "head.bias"]


def test_parameters_follows_a_subclass_named_parameters():
    class Only(em.Module):
        def __init__(self):
            self.a = nn.Linear(2, 2, device=DEV)
            self.b = nn.Linear(2, 2, device=DEV)

        def named_parameters(self):
            return [("a.weight", self.a.weight)]

    m = Only()
    assert m.parameters() == [m.a.weight]


def test_map_paths_and_plain_tuples():
    net = _Net(AD)
    seen = []
    new = net.map(lambda path, p: seen.append(path) or p)
    assert seen == [path for path, _ in net.named_parameters()]
    assert new.block.sizes is net.block.sizes            # a plain tuple is kept as it is
    assert new.block.table["b"] is net.block.table["b"]
    assert new.block.pair is not net.block.pair          # a tuple holding a module is rebuilt
    assert new.block.pair[1] == 7
    assert new.again is new.block                        # sharing survives
    assert new.block.shared is new.block.lin.weight


def test_with_tensor_keeps_id_flag_and_leaf():
    p = em.Param(T(3, device=AD))
    q = p.with_tensor(T(3, device=AD) * 2.0)
    assert type(q) is em.Param and q.id == p.id and q.require_grad_flag
    assert q.is_require_grad() and q.leaf_id() is not None and q.leaf_id() != p.leaf_id()
    b = em.Param(T(3, device=AD), require_grad=False)
    c = b.with_tensor(T(3, device=AD))
    assert c.id == b.id and not c.require_grad_flag and not c.is_require_grad()
    d = em.Param(T(3)).with_tensor(np.ones(3, np.float32))    # values, not a Tensor
    assert isinstance(d, em.Param) and d.numpy().tolist() == [1.0, 1.0, 1.0]


def test_with_tensor_of_a_subclass_with_its_own_constructor():
    calls = []

    class Tagged(em.Param):
        __slots__ = ()

        def __init__(self, tensor=None, *, id=None, require_grad=True):  # noqa: A002
            calls.append(id)

    p = Tagged(T(2, device=AD), id="abc")
    q = p.with_tensor(T(2, device=AD))
    assert type(q) is Tagged and q.id == "abc" and calls == ["abc", "abc"]


def test_optimizer_uses_a_gradients_params_subclass_get():
    class Halved(em.GradientsParams):
        __slots__ = ()

        def get(self, param_or_id, default=None):
            g = super().get(param_or_id, default)
            return None if g is None else g * 0.5

    AD.seed(0)
    m = nn.Linear(3, 2, device=AD)
    x = T(4, 3, device=AD)
    grads = em.GradientsParams.from_grads((m(x) ** 2).sum().backward(), m)
    half = Halved.from_params(list(grads.items()))
    a = optim.Sgd(lr=0.1).step(0.1, m, grads)
    b = optim.Sgd(lr=0.1).step(0.1, m, half)
    w0, wa, wb = m.weight.numpy(), a.weight.numpy(), b.weight.numpy()
    np.testing.assert_allclose(w0 - wb, (w0 - wa) * 0.5, rtol=1e-5, atol=1e-7)


# -- the loss fast path ---------------------------------------------------------------------
def test_cross_entropy_shapes_and_errors():
    ce = nn.functional.cross_entropy
    t4 = em.tensor(np.array([0, 2, 1, 2]), device=AD)
    logits = T(4, 3, device=AD).require_grad()
    loss = ce(logits, t4)
    g = logits.grad(loss.backward())
    assert g.shape == (4, 3)
    with pytest.raises(ShapeError, match=r"target \(5,\) must have shape \(4,\)"):
        ce(T(4, 3), em.tensor(np.zeros(5, np.int64), device=DEV))
    with pytest.raises(ShapeError, match=r"cannot reshape \(4, 0\)"):
        ce(T(4, 0), em.tensor(np.zeros(4, np.int64), device=DEV))
    # [N, C, d] and [C] inputs still take the reshapes
    x3, t3 = T(2, 3, 5), em.tensor(RNG.integers(0, 3, size=(2, 5)), device=DEV)
    ref = ce(x3.movedim(1, -1).reshape(-1, 3), t3.reshape(-1)).item()
    assert ce(x3, t3).item() == pytest.approx(ref, rel=1e-6)
    assert ce(T(3), em.tensor(np.array(1), device=DEV)).shape == ()
