"""Optimizer state: state_dict/load_state_dict, save/load (atomic, one record file), and
exact resume: 2N steps == N steps, save model + optimizer + scheduler, load into fresh
objects, N more steps."""
import os

import numpy as np
import pytest

import ember as em
from ember import optim
from ember.errors import RecordError

from ._util import AD, CPU, Net, grads_for, named, problem

OPTS = [
    lambda: optim.SGD(momentum=0.9, nesterov=True, weight_decay=0.01),
    lambda: optim.Adam(amsgrad=True, weight_decay=0.01),
    lambda: optim.AdamW(groups=[optim.ParamGroup("*.bias", weight_decay=0.0, lr_mult=0.5)]),
    lambda: optim.RmsProp(centered=True, momentum=0.5),
    lambda: optim.AdaGrad(lr_decay=0.01, initial_accumulator_value=0.1),
]


def _sched():
    return optim.SequentialLr([optim.LinearLr(1e-3, 5e-2, 3),
                               optim.CosineAnnealingLr(5e-2, 10, 1e-3)])


@pytest.mark.parametrize("fmt", ["safetensors", "msgpack"])
@pytest.mark.parametrize("make", OPTS)
def test_resume_is_exact(make, fmt, tmp_path):
    n = 4
    w0, coefs, _ = problem(seed=20, steps=2 * n)
    ref_model, ref_opt, ref_sched = Net(w0), make(), _sched()
    for coef in coefs:
        ref_model = ref_opt.step(ref_sched.step(), ref_model, grads_for(ref_model, coef,
                                                                         np.float64))
    model, opt, sched = Net(w0), make(), _sched()
    for coef in coefs[:n]:
        model = opt.step(sched.step(), model, grads_for(model, coef, np.float64))
    model.save(tmp_path / "model.st")
    opt.save(tmp_path / "opt.st", format=fmt)
    sched.save(tmp_path / "sched.json")
    del model, opt, sched
    # fresh objects: new random initial weights and param ids, restored from the files
    model = Net(problem(seed=99)[0]).load_record(tmp_path / "model.st")
    opt = make().load(tmp_path / "opt.st")
    sched = _sched().load(tmp_path / "sched.json")
    for coef in coefs[n:]:
        model = opt.step(sched.step(), model, grads_for(model, coef, np.float64))
    for k, p in named(ref_model).items():
        np.testing.assert_array_equal(named(model)[k].numpy(), p.numpy())
    assert sched.lr == ref_sched.lr
    for k in named(ref_model):
        a, b = opt.state_of(named(model)[k]), ref_opt.state_of(named(ref_model)[k])
        assert a.keys() == b.keys() and a["step"] == b["step"] == 2 * n


def test_state_dict_round_trip_in_memory():
    w0, coefs, _ = problem(seed=21, steps=6)
    a, b = Net(w0), Net(w0)
    oa, ob = optim.Adam(), optim.Adam()
    for coef in coefs[:3]:
        a = oa.step(0.01, a, grads_for(a, coef, np.float64))
    sd = oa.state_dict()
    assert sd["optimizer"] == "Adam" and set(sd["state"]) == {p.id for p in named(a).values()}
    entry = sd["state"][a.a.weight.id]
    assert entry["step"] == 3 and set(entry) == {"step", "exp_avg", "exp_avg_sq"}
    ob.load_state_dict(sd)
    b = a  # same weights and ids
    for coef in coefs[3:]:
        a = oa.step(0.01, a, grads_for(a, coef, np.float64))
        b = ob.step(0.01, b, grads_for(b, coef, np.float64))
    for k in named(a):
        np.testing.assert_array_equal(named(a)[k].numpy(), named(b)[k].numpy())


def test_file_is_safetensors_and_atomic(tmp_path, monkeypatch):
    st = pytest.importorskip("safetensors.numpy")
    w0, coefs, _ = problem(seed=22, steps=2)
    model, opt = Net(w0), optim.SGD(momentum=0.9)
    model = opt.step(0.1, model, grads_for(model, coefs[0], np.float64))
    path = tmp_path / "opt.safetensors"
    opt.save(path)
    arrays = st.load_file(str(path))
    assert set(arrays) == {f"{p.id}.momentum_buffer" for p in named(model).values()}
    before = path.read_bytes()
    # a write that fails half-way leaves the old file and no temporary behind
    model = opt.step(0.1, model, grads_for(model, coefs[1], np.float64))

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        opt.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["opt.safetensors"]


def test_load_errors(tmp_path):
    w0, coefs, _ = problem(seed=23, steps=1)
    model, opt = Net(w0), optim.Adam()
    model = opt.step(0.1, model, grads_for(model, coefs[0], np.float64))
    with pytest.raises(RecordError, match="Adam"):
        optim.SGD().load_state_dict(opt.state_dict())
    with pytest.raises(RecordError, match="unknown state"):
        optim.Adam().load_state_dict({"state": {"x": {"step": 1, "moment": em.ones(2)}}})
    # a state whose shapes do not fit the parameter it is keyed to
    sd = opt.state_dict()
    pid = model.a.weight.id
    sd["state"][pid] = {"step": 1, "exp_avg": em.zeros(2, dtype=em.f64),
                        "exp_avg_sq": em.zeros(2, dtype=em.f64)}
    bad = optim.Adam().load_state_dict(sd)
    with pytest.raises(RecordError, match=f"{pid}.*shape"):
        bad.step(0.1, model, grads_for(model, coefs[0], np.float64))
    with pytest.raises(RecordError, match="nothing.st"):
        optim.Adam().load(tmp_path / "nothing.st")
    model.save(tmp_path / "model.st")  # a record, but not an optimizer's
    with pytest.raises(RecordError, match="no optimizer state"):
        optim.Adam().load(tmp_path / "model.st")


def test_state_follows_devices():
    """State on another device than its parameter's inner device (here: tensors on the
    autodiff device) moves next to the parameter at its next step."""
    w0, coefs, _ = problem(seed=24, steps=3)
    model, opt = Net(w0), optim.Adam()
    model = opt.step(0.1, model, grads_for(model, coefs[0], np.float64))
    sd = opt.state_dict()
    moved = {pid: {k: (v.to_device(AD) if k != "step" else v) for k, v in e.items()}
             for pid, e in sd["state"].items()}
    other = optim.Adam().load_state_dict({"state": moved})
    assert other.state_of(model.a.weight)["exp_avg"].device is AD
    g = grads_for(model, coefs[1], np.float64)
    a, b = opt.step(0.1, model, g), other.step(0.1, model, g)
    np.testing.assert_array_equal(a.a.weight.numpy(), b.a.weight.numpy())
    assert other.state_of(model.a.weight)["exp_avg"].device is CPU
    other.to_device(AD)  # to_device puts state on the inner device
    assert other.state_of(model.a.weight)["exp_avg"].device is CPU
    opt.reset()
    assert len(opt) == 0
