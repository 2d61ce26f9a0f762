"""Shared helpers: a small module with three params, gradients that depend on the weights
(g = A * w + B, so errors compound over steps), and the same run in torch.optim."""
import numpy as np

import ember as em

CPU = em.device("cpu")
AD = CPU.autodiff()
SHAPES = {"a.weight": (3, 4), "a.bias": (4,), "b.kernel": (2, 3, 2)}
DT = {"f64": (em.f64, np.float64), "f32": (em.f32, np.float32)}


class Sub(em.Module):
    def __init__(self, w, b=None):
        self.weight = w
        self.bias = b


class Net(em.Module):
    """a.weight, a.bias, b.kernel (+ a buffer that never requires grad)."""

    def __init__(self, arrays, dtype=em.f64, device=AD):
        def p(name, **kw):
            return em.Param(em.tensor(arrays[name], dtype=dtype, device=device), **kw)
        self.a = Sub(p("a.weight"), p("a.bias"))
        self.b = Sub(p("b.kernel"))
        self.running = em.Param(em.ones(2, dtype=dtype, device=device), require_grad=False)

    def forward(self, x):
        return x @ self.a.weight + self.a.bias


def named(model):
    return {"a.weight": model.a.weight, "a.bias": model.a.bias, "b.kernel": model.b.weight}


def problem(seed=0, steps=6):
    rng = np.random.default_rng(seed)
    w0 = {k: rng.standard_normal(s) for k, s in SHAPES.items()}
    coefs = [{k: (rng.uniform(0.2, 1.5, s), rng.standard_normal(s)) for k, s in SHAPES.items()}
             for _ in range(steps)]
    lrs = [0.05 * (1 + 0.3 * np.sin(i)) for i in range(steps)]
    return w0, coefs, lrs


def grads_for(model, coef, np_dtype, skip=()):
    pairs = []
    for k, p in named(model).items():
        if k in skip:
            continue
        a, b = coef[k]
        g = (a * p.numpy().astype(np.float64) + b).astype(np_dtype)
        pairs.append((p, em.tensor(g, device=p.device.without_autodiff())))
    return em.GradientsParams.from_params(pairs)


def run_ember(opt, w0, coefs, lrs, dtype="f64", model=None):
    edt, ndt = DT[dtype]
    model = Net({k: v.astype(ndt) for k, v in w0.items()}, edt) if model is None else model
    for coef, lr in zip(coefs, lrs):
        model = opt.step(lr, model, grads_for(model, coef, ndt))
    return model


def run_torch(make, w0, coefs, lrs, dtype="f64"):
    import torch
    tdt = torch.float64 if dtype == "f64" else torch.float32
    _, ndt = DT[dtype]
    ps = {k: torch.tensor(v.astype(ndt), dtype=tdt, requires_grad=True) for k, v in w0.items()}
    opt = make(list(ps.values()))
    for coef, lr in zip(coefs, lrs):
        for k, p in ps.items():
            a, b = coef[k]
            p.grad = torch.tensor((a * p.detach().numpy().astype(np.float64) + b).astype(ndt))
        for grp in opt.param_groups:
            grp["lr"] = lr * grp.get("lr_mult", 1.0)
        opt.step()
    return {k: p.detach().numpy() for k, p in ps.items()}


def max_diff(model, ref):
    return max(float(np.max(np.abs(named(model)[k].numpy().astype(np.float64) - ref[k])))
               for k in ref)
