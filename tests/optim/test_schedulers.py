"""Learning-rate schedulers against torch.optim.lr_scheduler (where one is equivalent) and
closed forms; `step()`/`lr` semantics; state save and load."""
import math

import pytest

from ember import optim
from ember.errors import ConfigError, RecordError

torch = pytest.importorskip("torch")


def _torch_lrs(make, n, base=0.1):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base)
    sched = make(opt)
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def _ours(s, n):
    return [s.step() for _ in range(n)]


L = torch.optim.lr_scheduler


@pytest.mark.parametrize("ours,theirs,n", [
    (lambda: optim.LinearLr(0.1 * 0.25, 0.1, 10),
     lambda o: L.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=10), 15),
    (lambda: optim.LinearLr(0.1, 0.1 * 0.05, 7),
     lambda o: L.LinearLR(o, start_factor=1.0, end_factor=0.05, total_iters=7), 12),
    (lambda: optim.ExponentialLr(0.1, 0.9), lambda o: L.ExponentialLR(o, 0.9), 20),
    (lambda: optim.StepLr(0.1, 3, 0.5), lambda o: L.StepLR(o, 3, 0.5), 20),
    (lambda: optim.MultiStepLr(0.1, [2, 5, 9], 0.3),
     lambda o: L.MultiStepLR(o, [2, 5, 9], 0.3), 15),
    (lambda: optim.CosineAnnealingLr(0.1, 12, 0.01),
     lambda o: L.CosineAnnealingLR(o, T_max=12, eta_min=0.01), 13),
    (lambda: optim.CosineAnnealingLr(0.1, 10, warmup_iters=4, warmup_start_lr=0.1 * 0.1),
     lambda o: L.SequentialLR(o, [L.LinearLR(o, start_factor=0.1, total_iters=4),
                                  L.CosineAnnealingLR(o, T_max=10)], milestones=[4]), 15),
    (lambda: optim.SequentialLr([optim.LinearLr(0.1 * 0.5, 0.1, 3),
                                 optim.ExponentialLr(0.1, 0.8)]),
     lambda o: L.SequentialLR(o, [L.LinearLR(o, start_factor=0.5, total_iters=3),
                                  L.ExponentialLR(o, 0.8)], milestones=[3]), 12),
    (lambda: optim.NoamLr(2.0, warmup_steps=5, model_size=64),
     lambda o: L.LambdaLR(o, lambda t: 2.0 * 64 ** -0.5 * min((t + 1) ** -0.5,
                                                             (t + 1) * 5 ** -1.5) / 0.1), 20),
    (lambda: optim.ConstantLr(0.1), lambda o: L.ConstantLR(o, factor=1.0), 5),
])
def test_matches_torch(ours, theirs, n):
    a = _ours(ours(), n)
    b = _torch_lrs(theirs, n)
    for x, y in zip(a, b):
        assert abs(x - y) <= 1e-9 * max(abs(y), 1e-3), (a, b)


def test_closed_forms_and_lr_property():
    s = optim.CosineAnnealingLr(1.0, 4, 0.0, warmup_iters=2)
    assert s.lr == 0.0  # before any step: what the first step returns
    got = _ours(s, 9)
    want = [0.0, 0.5, 1.0, (1 + math.cos(math.pi / 4)) / 2, 0.5,
            (1 + math.cos(3 * math.pi / 4)) / 2, 0.0, 0.0, 0.0]
    assert all(abs(x - y) < 1e-15 for x, y in zip(got, want))
    assert s.lr == got[-1] and s.iteration == 9
    noam = optim.NoamLr(warmup_steps=4, model_size=16)
    vals = _ours(noam, 8)
    assert max(vals) == vals[3]  # the peak is at the end of warm-up (s = 4)
    assert abs(vals[3] - 16 ** -0.5 * 4 ** -0.5) < 1e-15
    lam = optim.LambdaLr(lambda t: 1.0 / (t + 1))
    assert _ours(lam, 3) == [1.0, 0.5, 1.0 / 3]
    # SequentialLr milestones inferred from the lengths
    seq = optim.SequentialLr([optim.LinearLr(0.0, 1.0, 2),
                              optim.CosineAnnealingLr(1.0, 2, warmup_iters=1),
                              optim.ConstantLr(0.3)])
    assert seq.milestones == [2, 5]
    assert _ours(seq, 7)[:2] == [0.0, 0.5] and seq.lr == 0.3


def test_errors():
    with pytest.raises(ConfigError, match="gamma"):
        optim.ExponentialLr(0.1, 0.0)
    with pytest.raises(ConfigError, match="num_iters"):
        optim.CosineAnnealingLr(0.1, 0)
    with pytest.raises(ConfigError, match="milestone"):
        optim.SequentialLr([optim.ConstantLr(1.0), optim.ConstantLr(2.0)], [3, 4])
    with pytest.raises(ConfigError, match="no length"):
        optim.SequentialLr([optim.ExponentialLr(1.0, 0.5), optim.ConstantLr(2.0)])
    with pytest.raises(ConfigError, match="increasing"):
        optim.MultiStepLr(0.1, [5, 2])


def test_state_save_load_resume(tmp_path):
    make = lambda: optim.SequentialLr([optim.LinearLr(0.0, 1e-3, 5),  # noqa: E731
                                       optim.CosineAnnealingLr(1e-3, 20)])
    full = _ours(make(), 20)
    s = make()
    first = _ours(s, 8)
    s.save(tmp_path / "sched.json")
    fresh = make().load(tmp_path / "sched.json")
    assert fresh.iteration == 8 and fresh.lr == first[-1]
    assert first + _ours(fresh, 12) == full
    d = s.state_dict()
    assert make().load_state_dict(d).iteration == 8
    with pytest.raises(RecordError, match="SequentialLr"):
        optim.ConstantLr(1.0).load_state_dict(d)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(RecordError, match="bad.json"):
        make().load(tmp_path / "bad.json")


def test_configs(tmp_path):
    cfgs = [optim.ConstantLrConfig(0.1), optim.LinearLrConfig(0.0, 1.0, 10),
            optim.ExponentialLrConfig(1.0, 0.9), optim.StepLrConfig(1.0, 5),
            optim.CosineAnnealingLrConfig(1.0, 100, warmup_iters=10),
            optim.NoamLrConfig(warmup_steps=100)]
    for cfg in cfgs:
        cfg.save(tmp_path / "c.json")
        again = type(cfg).load(tmp_path / "c.json")
        assert again == cfg
        a, b = cfg.init(), again.init()
        assert _ours(a, 12) == _ours(b, 12)
