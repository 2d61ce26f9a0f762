"""Every optimizer and option against torch.optim: the same initial weights, gradients that
depend on the weights, a learning rate changing per step; float64 to 1e-10, float32 to
~1e-6."""
import numpy as np
import pytest

import ember as em
from ember import optim
from ember.errors import ConfigError

from ._util import AD, CPU, Net, grads_for, max_diff, named, problem, run_ember, run_torch

torch = pytest.importorskip("torch")

CASES = [
    # (ember factory, torch factory)
    ("sgd", lambda: optim.SGD(), lambda p: torch.optim.SGD(p, lr=0.1)),
    ("sgd-wd", lambda: optim.SGD(weight_decay=0.1),
     lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=0.1)),
    ("sgd-momentum", lambda: optim.SGD(momentum=0.9),
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    ("sgd-dampening", lambda: optim.SGD(momentum=0.8, dampening=0.3, weight_decay=0.05),
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.8, dampening=0.3, weight_decay=0.05)),
    ("sgd-nesterov", lambda: optim.SGD(momentum=0.9, nesterov=True, weight_decay=0.1),
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)),
    ("adam", lambda: optim.Adam(), lambda p: torch.optim.Adam(p)),
    ("adam-betas-eps", lambda: optim.Adam(betas=(0.8, 0.95), eps=1e-3),
     lambda p: torch.optim.Adam(p, betas=(0.8, 0.95), eps=1e-3)),
    ("adam-l2", lambda: optim.Adam(weight_decay=0.1),
     lambda p: torch.optim.Adam(p, weight_decay=0.1)),
    ("adam-amsgrad", lambda: optim.Adam(amsgrad=True, weight_decay=0.05),
     lambda p: torch.optim.Adam(p, amsgrad=True, weight_decay=0.05)),
    ("adam-decoupled", lambda: optim.Adam(weight_decay=0.1, decoupled_weight_decay=True),
     lambda p: torch.optim.Adam(p, weight_decay=0.1, decoupled_weight_decay=True)),
    ("adamw", lambda: optim.AdamW(), lambda p: torch.optim.AdamW(p)),
    ("adamw-wd-amsgrad", lambda: optim.AdamW(weight_decay=0.2, amsgrad=True, betas=(0.5, 0.9)),
     lambda p: torch.optim.AdamW(p, weight_decay=0.2, amsgrad=True, betas=(0.5, 0.9))),
    ("rmsprop", lambda: optim.RmsProp(), lambda p: torch.optim.RMSprop(p)),
    ("rmsprop-alpha-eps", lambda: optim.RmsProp(alpha=0.9, eps=1e-3),
     lambda p: torch.optim.RMSprop(p, alpha=0.9, eps=1e-3)),
    ("rmsprop-centered", lambda: optim.RmsProp(centered=True),
     lambda p: torch.optim.RMSprop(p, centered=True)),
    ("rmsprop-momentum-wd", lambda: optim.RmsProp(momentum=0.7, weight_decay=0.1),
     lambda p: torch.optim.RMSprop(p, momentum=0.7, weight_decay=0.1)),
    ("rmsprop-all", lambda: optim.RmsProp(alpha=0.95, centered=True, momentum=0.5,
                                          weight_decay=0.05, eps=1e-6),
     lambda p: torch.optim.RMSprop(p, alpha=0.95, centered=True, momentum=0.5,
                                   weight_decay=0.05, eps=1e-6)),
    ("adagrad", lambda: optim.AdaGrad(), lambda p: torch.optim.Adagrad(p)),
    ("adagrad-all", lambda: optim.AdaGrad(lr_decay=0.1, weight_decay=0.1,
                                          initial_accumulator_value=0.5, eps=1e-6),
     lambda p: torch.optim.Adagrad(p, lr_decay=0.1, weight_decay=0.1,
                                   initial_accumulator_value=0.5, eps=1e-6)),
]


@pytest.mark.parametrize("name,make,make_torch", CASES, ids=[c[0] for c in CASES])
def test_matches_torch_f64(name, make, make_torch):
    w0, coefs, lrs = problem(seed=1, steps=7)
    model = run_ember(make(), w0, coefs, lrs, "f64")
    ref = run_torch(make_torch, w0, coefs, lrs, "f64")
    assert max_diff(model, ref) < 1e-10
    # the weights really moved (the comparison is not vacuous)
    assert max(np.abs(ref[k] - w0[k]).max() for k in ref) > 1e-3


@pytest.mark.parametrize("name,make,make_torch", CASES, ids=[c[0] for c in CASES])
def test_matches_torch_f32(name, make, make_torch):
    w0, coefs, lrs = problem(seed=2, steps=5)
    model = run_ember(make(), w0, coefs, lrs, "f32")
    assert named(model)["a.weight"].dtype is em.f32
    ref = run_torch(make_torch, w0, coefs, lrs, "f32")
    assert max_diff(model, ref) < 2e-6


def test_state_matches_torch_moments():
    w0, coefs, lrs = problem(seed=3, steps=4)
    opt = optim.Adam(amsgrad=True)
    model = run_ember(opt, w0, coefs, lrs)
    tps = [torch.tensor(w0[k], requires_grad=True) for k in w0]
    topt = torch.optim.Adam(tps, amsgrad=True)
    for coef, lr in zip(coefs, lrs):
        for k, p in zip(w0, tps):
            a, b = coef[k]
            p.grad = torch.tensor(a * p.detach().numpy() + b)
        topt.param_groups[0]["lr"] = lr
        topt.step()
    for k, tp in zip(w0, tps):
        st = opt.state_of(named(model)[k])
        tst = topt.state[tp]
        assert st["step"] == int(tst["step"]) == 4
        for f in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            np.testing.assert_allclose(st[f].numpy(), tst[f].numpy(), rtol=1e-12, atol=1e-14)


def test_real_backward_adamw_matches_torch():
    """Gradients from ember's autodiff through GradientsParams.from_grads, vs torch."""
    rng = np.random.default_rng(4)
    w0 = {"a.weight": rng.standard_normal((3, 4)), "a.bias": rng.standard_normal(4),
          "b.kernel": rng.standard_normal((2, 3, 2))}
    x = rng.standard_normal((8, 3))
    y = rng.standard_normal((8, 4))
    model = Net(w0)
    opt = optim.AdamW(1e-2, weight_decay=0.1)
    xe, ye = em.tensor(x, dtype=em.f64, device=AD), em.tensor(y, dtype=em.f64, device=AD)
    for _ in range(5):
        loss = ((model(xe) - ye) ** 2).mean()
        grads = em.GradientsParams.from_grads(loss.backward(), model)
        assert len(grads) == 2  # b.kernel is unused: no gradient, so it is left alone
        model = opt.step(None, model, grads)
    tw = torch.tensor(w0["a.weight"], requires_grad=True)
    tb = torch.tensor(w0["a.bias"], requires_grad=True)
    topt = torch.optim.AdamW([tw, tb], lr=1e-2, weight_decay=0.1)
    for _ in range(5):
        topt.zero_grad()
        loss = ((torch.tensor(x) @ tw + tb - torch.tensor(y)) ** 2).mean()
        loss.backward()
        topt.step()
    np.testing.assert_allclose(model.a.weight.numpy(), tw.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(model.a.bias.numpy(), tb.detach().numpy(), atol=1e-12)
    np.testing.assert_array_equal(model.b.weight.numpy(), w0["b.kernel"])


@pytest.mark.parametrize("make", [lambda: optim.SGD(momentum=0.9), lambda: optim.Adam(),
                                  lambda: optim.RmsProp(centered=True), lambda: optim.AdaGrad()])
def test_functional_step_semantics(make):
    w0, coefs, lrs = problem(seed=5, steps=2)
    model = Net(w0).freeze("b.*")
    opt = make()
    before = {k: p.numpy().copy() for k, p in named(model).items()}
    new = opt.step(0.1, model, grads_for(model, coefs[0], np.float64, skip=("a.bias",)))
    # the original module is unchanged; the new one keeps ids, flags and devices
    for k, p in named(model).items():
        np.testing.assert_array_equal(p.numpy(), before[k])
    for (k, p), q in zip(named(model).items(), named(new).values()):
        assert q.id == p.id and q.require_grad_flag == p.require_grad_flag
        assert q.device is AD
        assert q.is_require_grad() == p.require_grad_flag
    assert not np.array_equal(new.a.weight.numpy(), before["a.weight"])
    # no gradient: untouched; frozen (even with a gradient given): untouched
    np.testing.assert_array_equal(new.a.bias.numpy(), before["a.bias"])
    np.testing.assert_array_equal(new.b.weight.numpy(), before["b.kernel"])
    assert new.running.id == model.running.id and not new.running.require_grad_flag
    assert len(opt) <= 1 and opt.state_of(model.b.weight) is None
    # the new module trains on: its params are fresh leaves
    loss = (new(em.ones(2, 3, dtype=em.f64, device=AD)) ** 2).sum()
    g = em.GradientsParams.from_grads(loss.backward(), new)
    assert g.get(new.a.weight) is not None


def test_state_is_keyed_by_param_id():
    """One optimizer over two modules: each param's moments stay its own, the same as two
    optimizers."""
    w0, coefs, lrs = problem(seed=6, steps=4)
    w1, coefs1, _ = problem(seed=7, steps=4)
    shared = optim.Adam()
    m0, m1 = Net(w0), Net(w1)
    for c0, c1, lr in zip(coefs, coefs1, lrs):
        m0 = shared.step(lr, m0, grads_for(m0, c0, np.float64))
        m1 = shared.step(lr, m1, grads_for(m1, c1, np.float64))
    r0 = run_ember(optim.Adam(), w0, coefs, lrs)
    r1 = run_ember(optim.Adam(), w1, coefs1, lrs)
    for a, b in ((m0, r0), (m1, r1)):
        for k in named(a):
            np.testing.assert_array_equal(named(a)[k].numpy(), named(b)[k].numpy())
    assert len(shared) == 6


def test_non_autodiff_module_and_dtype_kept():
    w0, coefs, lrs = problem(seed=8, steps=3)
    model = Net({k: v.astype(np.float32) for k, v in w0.items()}, em.f32, device=CPU)
    # f64 gradients for f32 params: the result keeps the params' dtype
    pairs = [(p, em.tensor(np.ones(p.shape), dtype=em.f64)) for p in named(model).values()]
    new = optim.Adam().step(0.1, model, em.GradientsParams.from_params(pairs))
    for p in named(new).values():
        assert p.dtype is em.f32 and p.device is CPU
    # Adam's first step moves each weight by lr against the gradient's sign
    np.testing.assert_allclose(new.a.weight.numpy(), model.a.weight.numpy() - 0.1, atol=1e-6)


def test_lr_default_and_errors():
    w0, coefs, _ = problem(seed=9, steps=1)
    model = Net(w0)
    g = grads_for(model, coefs[0], np.float64)
    a = optim.SGD(0.1).step(None, model, g)
    b = optim.SGD().step(0.1, model, g)
    np.testing.assert_array_equal(a.a.weight.numpy(), b.a.weight.numpy())
    with pytest.raises(ConfigError, match="no learning rate"):
        optim.SGD().step(None, model, g)
    with pytest.raises(ConfigError, match="learning rate"):
        optim.SGD().step(-1.0, model, g)
    loss = (model(em.ones(2, 3, dtype=em.f64, device=AD)) ** 2).sum()
    with pytest.raises(TypeError, match="GradientsParams.from_grads"):
        optim.SGD(0.1).step(None, model, loss.backward())
    with pytest.raises(ConfigError, match="nesterov"):
        optim.SGD(nesterov=True)
    with pytest.raises(ConfigError, match="beta1"):
        optim.Adam(betas=(1.0, 0.9))
    with pytest.raises(ConfigError, match="unknown hyperparameter.*momentum"):
        optim.Adam(momentum=0.9)
    with pytest.raises(ConfigError, match="weight_decay"):
        optim.AdamW(weight_decay=-1)
    with pytest.raises(ConfigError, match="alpha"):
        optim.RmsProp(alpha=1.5)


def test_configs_build_and_round_trip(tmp_path):
    cases = [(optim.SgdConfig(lr=0.1, momentum=0.9, nesterov=True), optim.SGD),
             (optim.AdamConfig(betas=(0.8, 0.9), amsgrad=True, grad_clip_norm=1.0), optim.Adam),
             (optim.AdamWConfig(weight_decay=0.1), optim.AdamW),
             (optim.RmsPropConfig(centered=True, grad_clip_value=0.5), optim.RmsProp),
             (optim.AdaGradConfig(lr_decay=0.01), optim.AdaGrad)]
    for cfg, cls in cases:
        opt = cfg.init()
        assert type(opt) is cls
        path = tmp_path / f"{cls.__name__}.json"
        cfg.save(path)
        again = type(cfg).load(path)
        assert again == cfg
        opt2 = again.init()
        assert opt2.hyperparameters == opt.hyperparameters and opt2.lr == opt.lr
        assert repr(opt2.grad_clipping) == repr(opt.grad_clipping)
        assert opt.config() == cfg
    assert optim.SgdConfig(momentum=0.9).init().hyperparameters["momentum"] == 0.9
    with pytest.raises(ConfigError):
        optim.SgdConfig(grad_clip_norm=1.0, grad_clip_value=1.0).init()


def _count_ops(device, fn):
    """How many ops ``fn`` runs on ``device`` (its execute hook, temporarily wrapped)."""
    n = [0]
    orig = device._execute

    def counting(*a, **k):
        n[0] += 1
        return orig(*a, **k)
    device._execute = counting
    try:
        fn()
    finally:
        device._execute = orig
    return n[0]


@pytest.mark.parametrize("make,first,later", [
    (lambda: optim.SGD(), 2, 2),                       # w - g*lr
    (lambda: optim.SGD(weight_decay=0.1), 3, 3),       # w*(1-lr*wd) - g*lr
    (lambda: optim.SGD(momentum=0.9), 2, 4),           # b = g on the first step
    (lambda: optim.SGD(momentum=0.9, nesterov=True), 4, 6),
    (lambda: optim.Adam(), 8, 12),                     # bias corrections folded into scalars
    (lambda: optim.Adam(amsgrad=True), 8, 13),
    (lambda: optim.AdamW(), 9, 13),
    (lambda: optim.RmsProp(), 7, 9),
    (lambda: optim.RmsProp(centered=True, momentum=0.9), 9, 15),
    (lambda: optim.AdaGrad(), 6, 7),
])
def test_step_is_cheap(make, first, later):
    """Tensor passes per parameter on the inner device (first step: state from zeros needs
    fewer). Guards against extra passes creeping in."""
    w0, coefs, _ = problem(seed=10, steps=2)
    model = Net(w0)
    opt = make()
    g = grads_for(model, coefs[0], np.float64)
    box = {}
    n1 = _count_ops(CPU, lambda: box.setdefault("m", opt.step(0.1, model, g)))
    g2 = grads_for(box["m"], coefs[1], np.float64)
    n2 = _count_ops(CPU, lambda: opt.step(0.1, box["m"], g2))
    assert n1 <= 3 * first and n2 <= 3 * later, (n1, n2)
