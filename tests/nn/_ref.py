"""Shared helpers for the nn tests: torch as the reference, weights copied between the
two (ember's Linear weights are [in, out], torch's [out, in])."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em

torch = pytest.importorskip("torch", reason="torch is the reference for the nn tests")
torch.set_num_threads(1)

CPU = em.device("cpu")
AD = CPU.autodiff()
RNG = np.random.default_rng(1234)


def randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def tt(x, grad=False):
    """An ember tensor or a NumPy array as a torch tensor."""
    a = x.numpy() if isinstance(x, em.Tensor) else x
    t = torch.from_numpy(np.array(a, copy=True))
    return t.requires_grad_(True) if grad else t


def et(x, device=CPU):
    """A torch tensor or a NumPy array as an ember tensor."""
    a = x.detach().numpy() if isinstance(x, torch.Tensor) else x
    return em.tensor(np.array(a, copy=True), device=device)


def npy(x):
    if isinstance(x, torch.Tensor):
        return x.detach().numpy()
    if isinstance(x, em.Tensor):
        return x.numpy()
    return np.asarray(x)


def close(a, b, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(npy(a), npy(b), rtol=rtol, atol=atol)


def load(module, mapping: dict):
    """``module`` with its params set from ``{path: torch tensor | array}`` (strict)."""
    return module.load_state_dict({k: np.ascontiguousarray(npy(v)) for k, v in
                                   mapping.items()})


def linear_from(prefix, lin):
    """The state of an ember Linear at ``prefix`` from a torch Linear."""
    out = {f"{prefix}weight": lin.weight.T}
    if lin.bias is not None:
        out[f"{prefix}bias"] = lin.bias
    return out


def mha_from(prefix, mha):
    """The state of an ember MultiHeadAttention from a torch MultiheadAttention."""
    d = mha.embed_dim
    w, b = mha.in_proj_weight, mha.in_proj_bias
    out = {}
    for i, name in enumerate(("query", "key", "value")):
        out[f"{prefix}{name}.weight"] = w[i * d:(i + 1) * d].T
        out[f"{prefix}{name}.bias"] = b[i * d:(i + 1) * d]
    out.update(linear_from(f"{prefix}output.", mha.out_proj))
    return out


def norm_from(prefix, norm):
    return {f"{prefix}weight": norm.weight, f"{prefix}bias": norm.bias}
