"""Gradients through layers (params and input) against torch autograd."""
from __future__ import annotations

import numpy as np

import ember as em
from ember import nn

from ._ref import AD, close, randn, torch, tt
from .test_rnn import _state_from

tnn = torch.nn


def _check(m, ref, mapping, x, forward=None, tforward=None, atol=1e-5):
    """Compares d(sum(out * r))/d(param) for every param, and for the input."""
    m = load(m, mapping).to_device(AD)
    forward = forward or (lambda mod, inp: mod(inp))
    tforward = tforward or (lambda mod, inp: mod(inp))
    xe = em.tensor(x, device=AD).require_grad()
    out = forward(m, xe)
    r = randn(*out.shape)
    grads = (out * em.tensor(r, device=AD)).sum().backward()
    xt = tt(x, grad=True)
    tout = tforward(ref, xt)
    (tout * tt(r)).sum().backward()
    close(out, tout, atol=atol)
    close(xe.grad(grads), xt.grad, atol=atol)
    ours = dict(m.named_parameters())
    for path, want in mapping.items():
        g = ours[path].grad(grads)
        assert g is not None, path
        close(g, want.grad if not _is_transposed(want) else want.grad_t(), atol=atol)
    return grads


def _is_transposed(v):
    return hasattr(v, "grad_t")


class _T:
    """A torch param seen transposed (ember's [in, out] Linear layout)."""

    def __init__(self, p):
        self.p = p

    def detach(self):
        return self.p.detach().T

    def grad_t(self):
        return self.p.grad.T


def _linear_map(prefix, lin):
    return {f"{prefix}weight": _T(lin.weight), f"{prefix}bias": lin.bias}


def load(m, mapping):
    """``m`` with params from torch params (or `_T` views of them)."""
    return m.load_state_dict({k: np.ascontiguousarray(v.detach().numpy())
                              for k, v in mapping.items()})


def test_linear_grads():
    ref = tnn.Linear(4, 3)
    _check(nn.Linear(4, 3), ref, _linear_map("", ref), randn(2, 5, 4))


def test_conv2d_grads():
    ref = tnn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    _check(nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), ref,
           {"weight": ref.weight, "bias": ref.bias}, randn(2, 4, 7, 6))


def test_layer_norm_grads():
    ref = tnn.LayerNorm(6)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(6))
        ref.bias.copy_(torch.randn(6))
    _check(nn.LayerNorm(6), ref, {"weight": ref.weight, "bias": ref.bias}, randn(3, 2, 6))


def test_mha_grads_with_mask():
    d, h = 8, 2
    ref = tnn.MultiheadAttention(d, h, batch_first=True)
    mapping = {}
    w, b = ref.in_proj_weight, ref.in_proj_bias

    class _Slice(_T):
        def __init__(self, p, i, bias=False):
            self.p, self.i, self.bias = p, i, bias

        def detach(self):
            v = self.p.detach()[self.i * d:(self.i + 1) * d]
            return v if self.bias else v.T

        def grad_t(self):
            g = self.p.grad[self.i * d:(self.i + 1) * d]
            return g if self.bias else g.T

    for i, name in enumerate(("query", "key", "value")):
        mapping[f"{name}.weight"] = _Slice(w, i)
        mapping[f"{name}.bias"] = _Slice(b, i, bias=True)
    mapping.update(_linear_map("output.", ref.out_proj))
    causal = np.triu(np.ones((5, 5), bool), 1)
    _check(nn.MultiHeadAttention(d, h, dropout=0.0), ref, mapping, randn(2, 5, d),
           forward=lambda m, x: m(x, causal=True).context,
           tforward=lambda m, x: m(x, x, x, attn_mask=torch.from_numpy(causal))[0])


def test_lstm_grads():
    ref = tnn.LSTM(3, 4, batch_first=True, bidirectional=True)
    state = _state_from(ref, 1, True)
    mapping = {k: (_T(getattr(ref, _torch_name(k))) if "weight" in k else v)
               for k, v in state.items()}
    _check(nn.Lstm(3, 4, bidirectional=True), ref, mapping, randn(2, 4, 3),
           forward=lambda m, x: m(x)[0], tforward=lambda m, x: m(x)[0])


def _torch_name(path):
    # cells.<i>.weight_ih -> weight_ih_l0[_reverse] (one layer, two directions)
    _, i, name = path.split(".")
    return f"{name}_l0" + ("_reverse" if i == "1" else "")
