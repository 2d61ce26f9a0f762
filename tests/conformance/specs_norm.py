"""Conformance cases of the layer-norm primitive (ember/ops/nn.py ``layer_norm``): run
directly (every weight/bias combination, one and two normalized dims, edge shapes) and
through the Tensor API, against a float64 NumPy reference written here. The first shape of
each case also runs in the harness's other layouts (a transposed input is the swap_dims case
the fused CUDA kernel stages through shared memory); gradient checks by finite differences
cover x, weight and bias. Inputs with a large common offset check that the variance is
computed about the mean (two passes), not as E[x^2] - E[x]^2."""
from __future__ import annotations

import numpy as np

import ember as em
from tests.conformance.harness import Case, Input
from tests.conformance.specs_nn import P

EPS = 1e-5


def ref_ln(x, w=None, b=None, ndim=1, eps=EPS):
    axes = tuple(range(x.ndim - ndim, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def _prim(ndim, has_w, has_b, eps=EPS):
    def fn(x, *wb):
        return P("layer_norm", x, *wb, ndim=ndim, eps=eps, has_weight=has_w, has_bias=has_b)
    return fn


def _ref(ndim, has_w, has_b, eps=EPS):
    def ref(x, *wb):
        w = wb[0] if has_w else None
        b = wb[-1] if has_b else None
        return ref_ln(x, w, b, ndim, eps)
    return ref


#: values offset by 1000 with a spread of about 1: a one-pass variance loses all its digits
#: (in f32 the mean itself is only good to ~1e-4 here, whatever the method)
OFFSET = Input(lambda rng, s: 1000.0 + rng.normal(size=s))

CASES = [
    Case("layer_norm_prim_wb", "layer_norm", _prim(1, True, True), _ref(1, True, True),
         [((3, 5), (5,), (5,)), ((2, 3, 4), (4,), (4,)), ((0, 4), (4,), (4,)),
          ((1, 1), (1,), (1,)), ((4, 33), (33,), (33,))]),
    Case("layer_norm_prim_w", "layer_norm", _prim(1, True, False), _ref(1, True, False),
         [((4, 3), (3,)), ((2, 2, 5), (5,))]),
    Case("layer_norm_prim_b", "layer_norm", _prim(1, False, True), _ref(1, False, True),
         [((4, 3), (3,)), ((3, 1, 6), (6,))]),
    Case("layer_norm_prim_plain", "layer_norm", _prim(1, False, False), _ref(1, False, False),
         [((3, 4, 5),), ((6,),), ((2, 0, 3),)]),
    Case("layer_norm_prim_2dims", "layer_norm", _prim(2, True, True), _ref(2, True, True),
         [((2, 3, 4), (3, 4), (3, 4)), ((3, 2), (3, 2), (3, 2))]),
    Case("layer_norm_prim_eps", "layer_norm", _prim(1, False, False, 0.5),
         _ref(1, False, False, 0.5), [((5, 3),)]),
    # the swap_dims case, spelled out: the normalized dim strided, a leading dim contiguous
    Case("layer_norm_api_swapped", "layer_norm",
         lambda x, w, b: em.layer_norm(x.swap_dims(1, 2), 6, w, b),
         lambda x, w, b: ref_ln(np.swapaxes(x, 1, 2), w, b),
         [((2, 6, 9), (6,), (6,)), ((1, 6, 40), (6,), (6,))]),
    Case("layer_norm_api_permuted_2dims", "layer_norm",
         lambda x: em.layer_norm(x.permute((2, 0, 1)), (3, 4)),
         lambda x: ref_ln(np.transpose(x, (2, 0, 1)), ndim=2), [((3, 4, 5),)]),
    Case("layer_norm_offset", "layer_norm", _prim(1, True, True), _ref(1, True, True),
         [((4, 64), (64,), (64,))], inputs=(OFFSET, Input(), Input()),
         dtypes=("f64", "f32"), grad=False, layouts=False,
         tol={"f32": (2e-3, 2e-3)}),    # (x - mean in f32 keeps ~1e-4 of a spread of 1)
]


# -- layer_norm_backward: the gradients as one primitive ------------------------------------
def ref_lnb(g, x, w=None, ndim=1, eps=EPS, has_bias=True):
    """(dx, [dweight], [dbias]) in float64, from the textbook formula."""
    k = x.ndim - ndim
    axes, lead = tuple(range(k, x.ndim)), tuple(range(k))
    mu = x.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=axes, keepdims=True) + eps)
    xhat = (x - mu) * rstd
    gw = g if w is None else g * w
    dx = rstd * (gw - gw.mean(axis=axes, keepdims=True)
                 - xhat * (gw * xhat).mean(axis=axes, keepdims=True))
    out = [dx]
    if w is not None:
        out.append((g * xhat).sum(axis=lead))
    if has_bias:
        out.append(g.sum(axis=lead))
    return tuple(out)


def _bwd(ndim, has_w, has_b, eps=EPS):
    def fn(g, x, *w):
        return P("layer_norm_backward", g, x, *w, ndim=ndim, eps=eps, has_weight=has_w,
                 has_bias=has_b)
    return fn


def _bwd_ref(ndim, has_w, has_b, eps=EPS):
    def ref(g, x, *w):
        return ref_lnb(g, x, w[0] if has_w else None, ndim, eps, has_b)
    return ref


CASES += [
    Case("layer_norm_backward_wb", "layer_norm_backward", _bwd(1, True, True),
         _bwd_ref(1, True, True),
         [((3, 5), (3, 5), (5,)), ((2, 3, 4), (2, 3, 4), (4,)), ((0, 4), (0, 4), (4,)),
          ((1, 1), (1, 1), (1,)), ((4, 33), (4, 33), (33,)), ((6,), (6,), (6,))]),
    Case("layer_norm_backward_w", "layer_norm_backward", _bwd(1, True, False),
         _bwd_ref(1, True, False), [((4, 3), (4, 3), (3,)), ((2, 2, 5), (2, 2, 5), (5,))]),
    Case("layer_norm_backward_b", "layer_norm_backward", _bwd(1, False, True),
         _bwd_ref(1, False, True), [((4, 3), (4, 3)), ((3, 1, 6), (3, 1, 6))]),
    Case("layer_norm_backward_plain", "layer_norm_backward", _bwd(1, False, False),
         _bwd_ref(1, False, False), [((3, 4, 5), (3, 4, 5)), ((2, 0, 3), (2, 0, 3))]),
    Case("layer_norm_backward_2dims", "layer_norm_backward", _bwd(2, True, True),
         _bwd_ref(2, True, True),
         [((2, 3, 4), (2, 3, 4), (3, 4)), ((3, 2), (3, 2), (3, 2))]),
    Case("layer_norm_backward_eps", "layer_norm_backward", _bwd(1, True, False, 0.5),
         _bwd_ref(1, True, False, 0.5), [((5, 3), (5, 3), (3,))]),
    # a row wider than a warp's registers hold on Cuda (the block-per-row kernel there)
    Case("layer_norm_backward_long_rows", "layer_norm_backward", _bwd(1, True, True),
         _bwd_ref(1, True, True), [((3, 1100), (3, 1100), (1100,))], grad=False),
    Case("layer_norm_backward_offset", "layer_norm_backward", _bwd(1, True, True),
         _bwd_ref(1, True, True), [((4, 64), (4, 64), (64,))],
         inputs=(Input(), OFFSET, Input()), dtypes=("f64", "f32"), grad=False,
         layouts=False, tol={"f32": (2e-3, 2e-3)}),
]
