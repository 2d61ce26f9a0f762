"""Gradient clipping against torch.nn.utils.clip_grad_norm_/clip_grad_value_, and gradient
accumulation against NumPy float64 sums."""
import math

import numpy as np
import pytest

import ember as em
from ember import optim
from ember.errors import ConfigError

from ._util import CPU, Net, grads_for, named, problem

torch = pytest.importorskip("torch")


def _grads(seed, scale=1.0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    arrays = {f"p{i}": (rng.standard_normal(s) * scale).astype(dtype)
              for i, s in enumerate([(5, 7), (7,), (3, 2, 4), (1,)])}
    return arrays, em.GradientsParams({k: em.tensor(v) for k, v in arrays.items()})


def _torch_params(arrays):
    ps = []
    for v in arrays.values():
        p = torch.zeros(v.shape, dtype=torch.from_numpy(v).dtype, requires_grad=True)
        p.grad = torch.from_numpy(v.copy())
        ps.append(p)
    return ps


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm,scale", [(1.0, 1.0), (100.0, 1.0), (0.5, 1e-3)])
def test_clip_by_norm_matches_torch(norm_type, max_norm, scale):
    arrays, g = _grads(0, scale)
    clipped, total = optim.clip_grad_norm(g, max_norm, norm_type)
    ps = _torch_params(arrays)
    ttotal = torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type)
    np.testing.assert_allclose(float(total), float(ttotal), rtol=1e-6)
    for k, p in zip(arrays, ps):
        np.testing.assert_allclose(clipped.get(k).numpy(), p.grad.numpy(), rtol=1e-6,
                                   atol=1e-7)
    # the same through the ClipByNorm object; the input is unchanged (a new value)
    again = optim.ClipByNorm(max_norm, norm_type)(g)
    for k in arrays:
        np.testing.assert_array_equal(again.get(k).numpy(), clipped.get(k).numpy())
        np.testing.assert_array_equal(g.get(k).numpy(), arrays[k])


def test_grad_norm_f64_reference():
    arrays, g = _grads(1, dtype=np.float64)
    allv = np.concatenate([v.ravel() for v in arrays.values()])
    assert abs(float(optim.grad_norm(g)) - np.linalg.norm(allv)) < 1e-12
    assert float(optim.grad_norm(g, math.inf)) == np.abs(allv).max()
    assert abs(float(optim.grad_norm(g, 1)) - np.abs(allv).sum()) < 1e-12


@pytest.mark.parametrize("value", [0.1, 0.5, 10.0])
def test_clip_by_value_matches_torch(value):
    arrays, g = _grads(2)
    clipped = optim.ClipByValue(value)(g)
    ps = _torch_params(arrays)
    torch.nn.utils.clip_grad_value_(ps, value)
    for k, p in zip(arrays, ps):
        np.testing.assert_array_equal(clipped.get(k).numpy(), p.grad.numpy())


def test_clip_per_param_norm():
    arrays, g = _grads(3, dtype=np.float64)
    out = optim.ClipByNorm(0.7, per_param=True)(g)
    for k, v in arrays.items():
        n = np.linalg.norm(v)
        np.testing.assert_allclose(out.get(k).numpy(), v * min(1.0, 0.7 / (n + 1e-6)),
                                   rtol=1e-12)


def test_clip_errors_and_nonfinite():
    arrays, g = _grads(4)
    with pytest.raises(ConfigError, match="max_norm"):
        optim.ClipByNorm(-1.0)
    with pytest.raises(ConfigError, match="norm_type"):
        optim.ClipByNorm(1.0, norm_type=0)
    with pytest.raises(ConfigError, match="value"):
        optim.ClipByValue("x")
    bad = em.GradientsParams({"a": em.tensor([1.0, float("inf")])})
    with pytest.raises(ConfigError, match="inf"):
        optim.clip_grad_norm(bad, 1.0, error_if_nonfinite=True)
    empty, total = optim.clip_grad_norm(em.GradientsParams(), 1.0)
    assert len(empty) == 0 and total is None


def test_optimizer_grad_clipping_option():
    """Adam(grad_clipping=ClipByNorm(c)) == clip_grad_norm_ then torch Adam."""
    w0, coefs, lrs = problem(seed=5, steps=4)
    model = Net(w0)
    opt = optim.Adam(grad_clipping=optim.ClipByNorm(0.5))
    for coef, lr in zip(coefs, lrs):
        model = opt.step(lr, model, grads_for(model, coef, np.float64))
    ps = {k: torch.tensor(v, requires_grad=True) for k, v in w0.items()}
    topt = torch.optim.Adam(list(ps.values()))
    for coef, lr in zip(coefs, lrs):
        for k, p in ps.items():
            a, b = coef[k]
            p.grad = torch.tensor(a * p.detach().numpy() + b)
        torch.nn.utils.clip_grad_norm_(list(ps.values()), 0.5)
        topt.param_groups[0]["lr"] = lr
        topt.step()
    for k, p in ps.items():
        np.testing.assert_allclose(named(model)[k].numpy(), p.detach().numpy(), atol=1e-10)


def test_accumulator_mean_and_sum():
    parts = [_grads(10 + i, dtype=np.float64) for i in range(3)]
    acc = optim.GradientsAccumulator()
    for _, g in parts:
        acc.add(g)
    # a parameter present in one micro-batch only: it counts as zero in the others
    acc.add(em.GradientsParams({"extra": em.tensor([3.0, 6.0], dtype=em.f64)}))
    assert len(acc) == 4
    s, m = acc.sum(), acc.mean()
    for k in parts[0][0]:
        ref = sum(a[k] for a, _ in parts)
        np.testing.assert_allclose(s.get(k).numpy(), ref, rtol=1e-15)
        np.testing.assert_allclose(m.get(k).numpy(), ref / 4, rtol=1e-15)
    np.testing.assert_array_equal(m.get("extra").numpy(), [0.75, 1.5])
    taken = acc.take()
    assert len(acc) == 0 and len(taken) == 5 and len(acc.sum()) == 0


def test_accumulated_step_equals_big_batch():
    """Mean of per-micro-batch gradients of mean losses == the gradient of the big batch."""
    rng = np.random.default_rng(6)
    w0 = {"a.weight": rng.standard_normal((3, 4)), "a.bias": rng.standard_normal(4),
          "b.kernel": rng.standard_normal((2, 3, 2))}
    x, y = rng.standard_normal((12, 3)), rng.standard_normal((12, 4))
    ad = CPU.autodiff()

    def grads(model, xs, ys):
        loss = ((model(em.tensor(xs, dtype=em.f64, device=ad)) -
                 em.tensor(ys, dtype=em.f64, device=ad)) ** 2).mean()
        return em.GradientsParams.from_grads(loss.backward(), model)

    model = Net(w0)
    acc = optim.GradientsAccumulator()
    for i in range(3):
        acc.add(grads(model, x[4 * i:4 * i + 4], y[4 * i:4 * i + 4]))
    a = optim.SGD(0.1).step(None, model, acc.take())
    b = optim.SGD(0.1).step(None, model, grads(model, x, y))
    np.testing.assert_allclose(a.a.weight.numpy(), b.a.weight.numpy(), atol=1e-14)
    np.testing.assert_allclose(a.a.bias.numpy(), b.a.bias.numpy(), atol=1e-14)
