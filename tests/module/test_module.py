"""Module, Param and GradientsParams: discovery, paths, value semantics, devices, freezing,
state dicts, copies and threads. References are NumPy float64 computations."""
import copy
import pickle
import re
import threading

import numpy as np
import pytest

import ember as em
from ember.errors import ConfigError, RecordError

CPU = em.device("cpu")
AD = CPU.autodiff()


def _param(shape, device=CPU, seed=0, **kw):
    rng = np.random.default_rng(seed)
    return em.Param(em.tensor(rng.standard_normal(shape).astype(np.float32), device=device),
                    **kw)


class Linear(em.Module):
    def __init__(self, d_in, d_out, *, device=CPU, seed=0):
        self.weight = _param((d_in, d_out), device, seed)
        self.bias = _param((d_out,), device, seed + 100)
        self.d_in, self.d_out = d_in, d_out

    def forward(self, x):
        return x @ self.weight + self.bias

    def extra_repr(self):
        return f"in={self.d_in}, out={self.d_out}"


class Block(em.Module):
    def __init__(self, d, device=CPU, seed=0):
        self.q = Linear(d, d, device=device, seed=seed)
        self.norm_scale = _param((d,), device, seed + 7, require_grad=False)  # a buffer

    def forward(self, x):
        return self.q(x).relu() * self.norm_scale


class Net(em.Module):
    def __init__(self, device=CPU):
        super().__init__()
        self.embed = Linear(3, 4, device=device, seed=1)
        self.blocks = [Block(4, device, seed=10), Block(4, device, seed=20)]
        self.pair = (Linear(4, 2, device=device, seed=30), None)
        self.heads = {"cls": Linear(2, 2, device=device, seed=40), "none": None}
        self.nothing = None
        self.name = "net"
        self.sizes = [3, 4, 2]
        self.pos = em.tensor(np.arange(4, dtype=np.float32), device=device)  # a constant

    def forward(self, x):
        x = self.embed(x) + self.pos
        for b in self.blocks:
            x = b(x)
        x = self.pair[0](x)
        return self.heads["cls"](x)


NET_PATHS = [
    "embed.weight", "embed.bias",
    "blocks.0.q.weight", "blocks.0.q.bias", "blocks.0.norm_scale",
    "blocks.1.q.weight", "blocks.1.q.bias", "blocks.1.norm_scale",
    "pair.0.weight", "pair.0.bias",
    "heads.cls.weight", "heads.cls.bias",
]


def _np(t):
    return np.asarray(t.numpy(), dtype=np.float64)


def _ref_forward(net, x):
    """Net.forward in NumPy float64 from the params' values."""
    s = {k: _np(v) for k, v in net.state_dict().items()}
    x = x @ s["embed.weight"] + s["embed.bias"] + np.arange(4)
    for i in range(2):
        x = np.maximum(x @ s[f"blocks.{i}.q.weight"] + s[f"blocks.{i}.q.bias"], 0)
        x = x * s[f"blocks.{i}.norm_scale"]
    x = x @ s["pair.0.weight"] + s["pair.0.bias"]
    return x @ s["heads.cls.weight"] + s["heads.cls.bias"]


# -- Param ----------------------------------------------------------------------------------
def test_param_is_a_tensor_with_stable_id():
    p = _param((2, 3))
    assert isinstance(p, em.Tensor) and isinstance(p, em.Param)
    assert isinstance(p.id, str) and len(p.id) >= 8
    assert p.require_grad_flag is True
    q = _param((2, 3))
    assert p.id != q.id
    out = p * 2 + p
    assert type(out) is em.Tensor
    np.testing.assert_allclose(_np(out), 3 * _np(p), rtol=1e-6)
    x = em.ones((4, 2))
    assert type(x @ p) is em.Tensor
    np.testing.assert_allclose(_np(x @ p), np.ones((4, 2)) @ _np(p), rtol=1e-5)
    assert type(p.tensor) is em.Tensor
    # same id and flag through with_tensor
    r = p.with_tensor(em.zeros((2, 3)))
    assert r.id == p.id and r.require_grad_flag and float(r.sum()) == 0.0
    b = em.Param(em.ones((2,)), id="buf", require_grad=False)
    assert b.id == "buf" and not b.require_grad_flag
    assert b.with_tensor(em.zeros((2,))).require_grad_flag is False
    # from plain data
    assert em.Param([1.0, 2.0]).shape == (2,)


def test_param_on_autodiff_is_a_leaf_and_grad_works():
    w = em.Param(em.tensor([[1.0, 2.0], [3.0, 4.0]], device=AD))
    assert w.is_require_grad() and w.leaf_id() is not None
    buf = em.Param(em.ones((2,), device=AD), require_grad=False)
    assert not buf.is_require_grad()
    x = em.tensor([[1.0, -1.0]], device=AD)
    grads = ((x @ w) * buf).sum().backward()
    # d/dW sum(x @ W) = x^T @ ones
    np.testing.assert_allclose(_np(w.grad(grads)), np.array([[1.0, 1.0], [-1.0, -1.0]]))
    assert w.grad(grads).device is CPU  # on the inner device
    # a tracked non-leaf result becomes a fresh leaf
    w2 = w.with_tensor(w * 2)
    assert w2.is_require_grad() and w2.leaf_id() != w.leaf_id() and w2.id == w.id


def test_param_pickle_and_copy_keep_id():
    p = _param((3,), require_grad=False)
    q = pickle.loads(pickle.dumps(p))
    assert type(q) is em.Param and q.id == p.id and q.require_grad_flag is False
    np.testing.assert_array_equal(_np(q), _np(p))
    c = copy.copy(p)
    assert c is not p and c.id == p.id
    a = em.Param(em.ones((2,), device=AD))
    d = copy.deepcopy(a)
    assert d.id == a.id and d.is_require_grad() and d.leaf_id() != a.leaf_id()


# -- discovery ------------------------------------------------------------------------------
def test_named_parameters_paths_and_order():
    net = Net()
    assert [p for p, _ in net.named_parameters()] == NET_PATHS
    assert len(net.parameters()) == len(NET_PATHS)
    assert all(isinstance(p, em.Param) for p in net.parameters())
    assert list(net.state_dict()) == NET_PATHS
    mods = [p for p, _ in net.named_modules()]
    assert mods == ["", "embed", "blocks.0", "blocks.0.q", "blocks.1", "blocks.1.q",
                    "pair.0", "heads.cls"]
    assert [p for p, _ in net.named_children()] == ["embed", "blocks.0", "blocks.1",
                                                    "pair.0", "heads.cls"]
    seen = []
    net.visit(lambda path, p: seen.append((path, p.shape)))
    assert [s[0] for s in seen] == NET_PATHS


def test_num_params_hand_count():
    net = Net()
    hand = (3 * 4 + 4) + 2 * (4 * 4 + 4 + 4) + (4 * 2 + 2) + (2 * 2 + 2)
    assert net.num_params() == hand == 80
    assert net.num_params(trainable_only=True) == hand - 2 * 4


def test_shared_param_listed_once_and_stays_shared():
    class Tied(em.Module):
        def __init__(self):
            self.a = Linear(2, 2)
            self.b = Linear(2, 2)
            self.b.weight = self.a.weight

    m = Tied()
    assert [p for p, _ in m.named_parameters()] == ["a.weight", "a.bias", "b.bias"]
    calls = []
    m2 = m.map(lambda path, p: (calls.append(path), p * 2)[1])
    assert calls == ["a.weight", "a.bias", "b.bias"]
    assert m2.a.weight is m2.b.weight


def test_forward_and_call():
    net = Net()
    x = np.random.default_rng(5).standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(_np(net(em.tensor(x))), _ref_forward(net, x.astype(np.float64)),
                               rtol=1e-4, atol=1e-5)

    class NoForward(em.Module):
        pass

    with pytest.raises(NotImplementedError, match="NoForward"):
        NoForward()(1)


# -- map and value semantics ---------------------------------------------------------------
def test_map_returns_new_module_original_unchanged():
    net = Net()
    before = {k: _np(v).copy() for k, v in net.state_dict().items()}
    ids = {k: p.id for k, p in net.named_parameters()}
    new = net.map(lambda path, p: p * 0 if path.endswith("bias") else p)
    assert new is not net and type(new) is Net
    assert new.blocks is not net.blocks and new.heads is not net.heads
    assert isinstance(new.pair, tuple) and new.pair[1] is None
    assert new.heads["none"] is None and new.name == "net" and new.sizes == [3, 4, 2]
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(_np(v), before[k])
    for k, p in new.named_parameters():
        assert isinstance(p, em.Param) and p.id == ids[k]
        if k.endswith("bias"):
            assert float(np.abs(_np(p)).sum()) == 0.0
        else:
            np.testing.assert_array_equal(_np(p), before[k])
    assert [k for k, _ in new.named_parameters()] == NET_PATHS
    with pytest.raises(TypeError, match="embed.weight"):
        net.map(lambda path, p: 3)
    # even params returned unchanged are distinct objects: item assignment on the new
    # module's param does not reach the original
    same = net.map(lambda path, p: p)
    assert same.embed.weight is not net.embed.weight
    same.embed.weight[0] = em.zeros((4,))
    np.testing.assert_array_equal(_np(net.embed.weight), before["embed.weight"])
    ev = net.eval()
    assert ev.embed.weight is not net.embed.weight and ev.embed.weight.id == net.embed.weight.id


def test_deepcopy_then_map_one_copy():
    net = Net()
    twin = copy.deepcopy(net)
    assert [p.id for p in twin.parameters()] == [p.id for p in net.parameters()]
    mapped = twin.map(lambda path, p: p + 1)
    for (k, a), (_, b), (_, c) in zip(net.named_parameters(), twin.named_parameters(),
                                      mapped.named_parameters()):
        np.testing.assert_array_equal(_np(a), _np(b))
        np.testing.assert_allclose(_np(c), _np(a) + 1, rtol=1e-6)
    # pickling a whole module works too
    back = pickle.loads(pickle.dumps(net))
    assert [p.id for p in back.parameters()] == [p.id for p in net.parameters()]


# -- devices, grads, valid, train/eval ------------------------------------------------------
def test_to_device_fork_and_gradients():
    net = Net()
    ad = net.to_device(AD)
    assert net.devices() == [CPU] and ad.devices() == [AD]
    assert net.fork(AD).devices() == [AD]
    assert ad.pos.device is AD  # plain Tensor attributes move too
    for path, p in ad.named_parameters():
        assert p.is_require_grad() == ("norm_scale" not in path)
    x = np.random.default_rng(3).standard_normal((6, 3))
    loss = ad(em.tensor(x.astype(np.float32), device=AD)).sum()
    grads = em.GradientsParams.from_grads(loss.backward(), ad)
    assert len(grads) == len(NET_PATHS) - 2  # buffers get no gradient
    # the last layer's gradients against NumPy: dL/dW = h^T @ ones, dL/db = n
    s = {k: _np(v) for k, v in net.state_dict().items()}
    h = x @ s["embed.weight"] + s["embed.bias"] + np.arange(4)
    for i in range(2):
        h = np.maximum(h @ s[f"blocks.{i}.q.weight"] + s[f"blocks.{i}.q.bias"], 0)
        h = h * s[f"blocks.{i}.norm_scale"]
    h = h @ s["pair.0.weight"] + s["pair.0.bias"]
    head_w = ad.heads["cls"].weight
    g = grads.get(head_w)
    assert g.device is CPU and g is grads[head_w.id]
    np.testing.assert_allclose(_np(g), h.T @ np.ones((6, 2)), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_np(grads.get(ad.heads["cls"].bias)), [6.0, 6.0], rtol=1e-6)
    assert head_w.id in grads and grads.remove(head_w.id) is not None
    assert head_w.id not in grads and len(grads) == len(NET_PATHS) - 3
    assert list(grads.keys()) == [k for k, _ in grads.items()]


def test_no_grad_module():
    ad = Net().to_device(AD)
    ng = ad.no_grad()
    assert all(not p.require_grad_flag and not p.is_require_grad() for p in ng.parameters())
    assert all(p.is_require_grad() for k, p in ad.named_parameters() if "norm" not in k)
    x = em.ones((2, 3), device=AD).require_grad()
    g = em.GradientsParams.from_grads(ng(x).sum().backward(), ng)
    assert len(g) == 0


def test_valid_and_train_eval_flags():
    net = Net()
    assert net.training is True and all(m.training for m in net.modules())
    ev = net.eval()
    assert all(m.training is False for m in ev.modules())
    assert net.training is True and all(m.training for m in net.modules())
    tr = ev.train()
    assert all(m.training is True for m in tr.modules())
    ad = net.to_device(AD)
    v = ad.valid()
    assert v.devices() == [CPU] and v.pos.device is CPU
    assert all(not p.is_require_grad() for p in v.parameters())
    assert all(m.training is False for m in v.modules())
    assert ad.training is True and ad.devices() == [AD]
    # flags survive, so moving back to autodiff tracks the same params again
    back = v.to_device(AD)
    assert [p.is_require_grad() for p in back.parameters()] == \
        [p.is_require_grad() for p in ad.parameters()]
    out = v(em.ones((2, 3)))
    assert out.device is CPU and out.shape == (2, 2)


# -- freezing -------------------------------------------------------------------------------
def _sgd(model, grads, lr):
    return model.map(lambda path, p: p.with_tensor((p.tensor - lr * grads.get(p).to_device(
        p.device)).detach()) if p in grads else p)


def test_freeze_glob_and_regex_no_gradient_no_update():
    net = Net().to_device(AD)
    frozen = net.freeze("blocks.*")
    assert [k for k, p in frozen.named_parameters() if not p.require_grad_flag] == \
        [k for k in NET_PATHS if k.startswith("blocks.")]
    assert all(p.require_grad_flag for k, p in net.named_parameters()
               if "norm" not in k)  # original unchanged
    x = em.tensor(np.random.default_rng(2).standard_normal((16, 3)).astype(np.float32),
                  device=AD)
    grads = em.GradientsParams.from_grads(frozen(x).sum().backward(), frozen)
    assert all(np.abs(_np(g)).max() > 0 for _, g in grads.items())
    got = {k for k, p in frozen.named_parameters() if p in grads}
    assert got == {"embed.weight", "embed.bias", "pair.0.weight", "pair.0.bias",
                   "heads.cls.weight", "heads.cls.bias"}
    stepped = _sgd(frozen, grads, 0.1)
    for (k, a), (_, b) in zip(frozen.named_parameters(), stepped.named_parameters()):
        same = np.array_equal(_np(a), _np(b))
        assert same == k.startswith("blocks."), k
        assert a.id == b.id
    # regex: all biases
    rf = net.freeze(re.compile(r"\.bias$"))
    assert [k for k, p in rf.named_parameters() if not p.require_grad_flag] == \
        [k for k in NET_PATHS if k.endswith("bias") or "norm" in k]
    un = rf.unfreeze("*")
    assert all(p.require_grad_flag for p in un.parameters())
    assert all(p.is_require_grad() for p in un.parameters())
    with pytest.raises(ConfigError, match="encoder") as e:
        net.freeze("encoder.*")
    assert "embed.weight" in str(e.value)


# -- state dicts ----------------------------------------------------------------------------
def test_state_dict_round_trip_and_errors():
    a, b = Net(), Net()
    b = b.map(lambda path, p: p * 0)
    c = b.load_state_dict(a.state_dict())
    for (k, x), (_, y), (_, z) in zip(a.named_parameters(), c.named_parameters(),
                                      b.named_parameters()):
        np.testing.assert_array_equal(_np(x), _np(y))
        assert y.id == z.id  # ids are the module's own
    # numpy values and another dtype are cast to the param's dtype
    sd = {k: _np(v) for k, v in a.state_dict().items()}
    d = b.load_state_dict(sd)
    assert all(p.dtype == em.float32 for p in d.parameters())
    np.testing.assert_allclose(_np(d.embed.weight), sd["embed.weight"], rtol=1e-6)
    # autodiff module: loaded params are leaves again
    ad = b.to_device(AD).load_state_dict(a.state_dict())
    assert ad.embed.weight.is_require_grad() and ad.embed.weight.device is AD
    # all problems in one RecordError
    bad = dict(a.state_dict())
    del bad["embed.bias"]
    bad["extra.weight"] = em.ones((1,))
    bad["heads.cls.weight"] = em.ones((3, 3))
    with pytest.raises(RecordError) as e:
        b.load_state_dict(bad)
    msg = str(e.value)
    assert "embed.bias" in msg and "extra.weight" in msg and "heads.cls.weight" in msg
    assert "[3, 3]" in msg and "[2, 2]" in msg
    # non-strict skips missing/unexpected but never loads a wrong shape
    del bad["heads.cls.weight"]
    part = b.load_state_dict(bad, strict=False)
    assert float(np.abs(_np(part.embed.bias)).sum()) == 0.0
    np.testing.assert_array_equal(_np(part.embed.weight), _np(a.embed.weight))


def test_repr_tree():
    class Mlp(em.Module):
        def __init__(self):
            self.fc1 = Linear(4, 8)
            self.layers = [Linear(8, 8)]
            self.scale = em.Param(em.ones((1,)), require_grad=False)

    r = repr(Mlp())
    assert r == ("Mlp(\n"
                 "  (fc1): Linear(in=4, out=8)\n"
                 "  (layers): [\n"
                 "    (0): Linear(in=8, out=8)\n"
                 "  ]\n"
                 "  (scale): Param(shape=[1], dtype=f32, require_grad=False)\n"
                 ")")

    class Leaf(em.Module):
        def __init__(self):
            self.w = em.Param(em.ones((2, 3)))
            self.p = 0.5

    assert repr(Leaf()) == "Leaf(w=[2, 3], p=0.5)"


# -- threads --------------------------------------------------------------------------------
def test_train_step_in_another_thread():
    net = Net()
    x = np.random.default_rng(9).standard_normal((4, 3)).astype(np.float32)
    result = {}

    def worker(module):
        dev = em.device("cpu").autodiff()
        m = module.to_device(dev)
        loss = (m(em.tensor(x, device=dev)) ** 2).mean()
        result["grads"] = em.GradientsParams.from_grads(loss.backward(), m)
        result["model"] = _sgd(m, result["grads"], 0.05)

    t = threading.Thread(target=worker, args=(net,))
    t.start()
    t.join()
    # the same step in this thread gives the same gradients
    m = net.to_device(AD)
    grads = em.GradientsParams.from_grads((m(em.tensor(x, device=AD)) ** 2).mean().backward(),
                                          m)
    assert set(grads.keys()) == set(result["grads"].keys()) and len(grads) == 10
    for k, g in grads.items():
        np.testing.assert_allclose(_np(result["grads"].get(k)), _np(g), rtol=1e-6)
    stepped = result["model"]
    for p, q in zip(net.parameters(), stepped.parameters()):
        assert p.id == q.id
    changed = [not np.array_equal(_np(p), _np(q)) for p, q in
               zip(net.parameters(), stepped.parameters())]
    assert sum(changed) == 10


def test_threads_share_a_module_safely():
    net = Net()
    x = em.ones((2, 3))
    ref = _np(net(x))
    outs = []

    def worker(i):
        m = net.map(lambda path, p: p * 1.0).eval().to_device(em.device("cpu").autodiff())
        outs.append(_np(m.valid()(x)))

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(outs) == 4
    for o in outs:
        np.testing.assert_allclose(o, ref, rtol=1e-6)


# -- records (helper R's ember.record) --------------------------------------------------------
def test_save_and_load_record_delegate(tmp_path):
    rec = pytest.importorskip("ember.record")
    if not hasattr(rec, "save_module"):
        pytest.skip("ember.record.save_module not available yet")
    net = Net()
    path = tmp_path / "net.safetensors"
    net.save(path)
    other = Net().map(lambda path, p: p * 0)
    back = other.load_record(path)
    for (k, a), (_, b) in zip(net.named_parameters(), back.named_parameters()):
        np.testing.assert_array_equal(_np(a), _np(b))
