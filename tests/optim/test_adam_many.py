"""Adam's updates as one ``adam_update_many`` op (ember/ops/optim.py, ember/optim/adam.py)
where the backend lists it in ``fused_ops``: the same parameters and state, bit for bit, as
one ``adam_update`` per parameter; param groups, frozen params and AMSGrad still right; the
op refuses a bad input count. Stacks here are NdArray backends that claim the op (the Cuda
backend does on a GPU; tests/backend_cuda/test_adam_direct.py runs it there)."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn, optim
from ember.backend import Autodiff, Fusion, NdArray
from ember.errors import ShapeError
from ember.ops import OPS
from ember.optim import adam as adam_mod
from ember.tensor.dispatch import apply


class Many(NdArray):
    """An NdArray that runs adam_update_many as one op of its own (as Cuda does)."""
    fused_ops = frozenset({"adam_update", "adam_update_many"})
    calls: list = []

    def execute(self, op, prims, attrs, meta, device):
        if op.name.startswith("adam_update"):
            Many.calls.append((op.name, len(prims)))
        return super().execute(op, prims, attrs, meta, device)


class One(NdArray):
    fused_ops = frozenset({"adam_update"})


def _device(backend, fused: bool):
    inner = Fusion(backend, "c", 0) if fused else backend
    return Autodiff(inner).device(0)


class Net(em.Module):
    def __init__(self, device):
        self.a = nn.Linear(6, 5, device=device)
        self.b = nn.Linear(5, 3, device=device)
        self.scale = em.Param(em.ones(3, device=device))


def _train(dev, make_opt, steps=4, freeze_bias=False):
    dev.seed(0)
    net = Net(dev)
    if freeze_bias:
        net = net.map(lambda path, p: p.with_require_grad(False) if path == "b.bias" else p)
    rng = np.random.default_rng(0)
    x = em.tensor(rng.normal(size=(8, 6)).astype(np.float32), device=dev)
    opt = make_opt()
    for _ in range(steps):
        loss = ((net.b(net.a(x).relu()) * net.scale) ** 2).mean()
        grads = em.GradientsParams.from_grads(loss.backward(), net)
        net = opt.step(None, net, grads)
    return {p: t.numpy() for p, t in net.named_parameters()}, opt


OPTIMIZERS = {
    "adamw": lambda: optim.AdamW(lr=0.01),
    "adam_l2": lambda: optim.Adam(lr=0.02, weight_decay=0.01),
    "groups": lambda: optim.AdamW(lr=0.01, groups=[optim.ParamGroup("b.*", lr_mult=0.1)]),
    "amsgrad": lambda: optim.Adam(lr=0.01, amsgrad=True),
}


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(adam_mod, "_MANY", {})
    Many.calls = []


@pytest.mark.parametrize("fused", [False, True], ids=["ndarray", "fusion"])
@pytest.mark.parametrize("which", list(OPTIMIZERS))
def test_many_is_one_update_per_param_bit_for_bit(which, fused):
    got, _ = _train(_device(Many(), fused), OPTIMIZERS[which], freeze_bias=which == "groups")
    want, _ = _train(_device(One(), fused), OPTIMIZERS[which], freeze_bias=which == "groups")
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    many = [n for n, _ in Many.calls if n == "adam_update_many"]
    if which == "amsgrad":
        assert not Many.calls                            # the formula: no fused op at all
    else:
        # one call a step (two with a group of its own lr), every trainable param in them
        assert len(many) == 4 * (2 if which == "groups" else 1), Many.calls
        assert not [n for n, _ in Many.calls if n == "adam_update"]
        per_step = sum(k for n, k in Many.calls[:2 if which == "groups" else 1]) // 4
        assert per_step == (4 if which == "groups" else 5)


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("EMBER_ADAM_MANY", "0")
    _train(_device(Many(), False), OPTIMIZERS["adamw"], steps=2)
    assert Many.calls and {n for n, _ in Many.calls} == {"adam_update"}


def test_state_continues_across_save_and_load(tmp_path):
    """The batched op's state is saved and loaded like any step's: two steps, save, a new
    optimizer loads the file, two more steps -- the bits of four uninterrupted steps."""
    dev = _device(Many(), True)
    got, opt = _train(dev, OPTIMIZERS["adamw"], steps=2)
    rec = opt.state_dict() if hasattr(opt, "state_dict") else None
    assert rec is None or rec                                # (saved like any step's state)
    st = opt._state
    assert st and all(r[0] == 2 and r[2] is not None and r[3] is not None for r in st.values())

    want, _ = _train(_device(Many(), True), OPTIMIZERS["adamw"], steps=4)
    dev.seed(0)
    net = Net(dev)
    x = em.tensor(np.random.default_rng(0).normal(size=(8, 6)).astype(np.float32), device=dev)

    def steps(net, opt, n):
        for _ in range(n):
            loss = ((net.b(net.a(x).relu()) * net.scale) ** 2).mean()
            net = opt.step(None, net, em.GradientsParams.from_grads(loss.backward(), net))
        return net
    first = OPTIMIZERS["adamw"]()
    net = steps(net, first, 2)
    first.save(tmp_path / "opt.safetensors")
    second = OPTIMIZERS["adamw"]().load(tmp_path / "opt.safetensors")
    Many.calls = []
    net = steps(net, second, 2)
    assert [n for n, _ in Many.calls if n.startswith("adam")] == ["adam_update_many"] * 2
    for k, t in net.named_parameters():
        np.testing.assert_array_equal(t.numpy(), want[k], err_msg=k)


def test_op_refuses_a_bad_input_count_and_matches_adam_update():
    w, g, m, v = (em.tensor(np.full((2, 3), x, np.float32)) for x in (1.0, 0.5, 0.1, 0.2))
    attrs = {"beta1": 0.9, "beta2": 0.999, "k1": 0.1, "k2": 0.001, "step": 0.01, "eps": 1e-8,
             "decay": 1.0, "l2": 0.0, "first": False}
    with pytest.raises(ShapeError, match="adam_update_many: expects the k weights"):
        apply(OPS["adam_update_many"], (w, g, m), attrs)
    one = apply(OPS["adam_update"], (w, g, m, v), attrs)
    many = apply(OPS["adam_update_many"], (w, w, g, g, m, m, v, v), attrs)
    assert len(many) == 6
    for a, b in zip(one + one, many):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
