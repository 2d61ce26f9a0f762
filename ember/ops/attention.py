"""Scaled dot-product attention as one primitive.

``attention(q, k, v, scale, causal, offset, heads)`` over ``q [..., Lq, D]``, ``k [..., Lk,
D]``, ``v [..., Lk, Dv]`` (the same leading dims, one float dtype) gives ``(out [..., Lq, Dv],
weights [..., Lq, Lk])``. With ``heads`` H > 0 the inputs come unsplit, ``[..., L, H*D]`` as
a linear layer makes them, and ``out`` merged, ``[..., Lq, H*Dv]`` (weights ``[..., H, Lq,
Lk]``): the op splits and merges the heads itself, where MultiHeadAttention's reshape and
permute of each of q, k, v and of the output were eight view ops each way in the graph.

``weights = softmax(q @ k^T * scale)`` along the keys, with, when ``causal``, key ``j``
hidden from query ``i`` where ``j > i + offset`` (its score takes the compute dtype's lowest
finite value before the softmax, so a query that sees no key gets uniform weights, not NaN),
and ``out = weights @ v``. The composite that
`ember.nn.MultiHeadAttention` spelled as about a dozen ops forward (two matmuls, the scale,
the causal mask built by creation ops, mask_fill, softmax) and as many backward is one op
each way -- on a host-bound training step each op costs more in dispatch than in arithmetic.

f16/bf16 are computed in f32 and rounded once (both outputs), f64 in f64. Only ``out`` is
differentiable (the registry's rule for several outputs). Its derivative is the primitive
``attention_backward(g, q, k, v, weights)`` giving ``(dq, dk, dv)``: ``dV = P^T dO``, ``dP =
dO V^T``, ``dS = softmax_backward(dP, P) * scale``, ``dQ = dS K``, ``dK = dS^T Q`` (a hidden
score has ``P = 0``, hence ``dS = 0``; rows that see no key, ``offset < 0`` only, are masked
explicitly as the composite's mask_fill did). Its ``decompose`` is those Tensor ops, the
transposes as matmul's flags, so under Fusion the backward pass fuses like any other; a
backend that runs it as one op of its own (the Cuda backend: four cuBLAS products around
one generated kernel) saves the dispatch of six ops a layer. Where only some of q, k, v
need a gradient the Tensor ops run instead, skipping the rest.

With ``packed`` (and ``heads``), q, k and v are one tensor ``[..., L, 3*H*D]`` -- a self-
attention's three projections computed as one product -- passed as all three inputs; the op
takes its column blocks ``[0, H*D)``, ``[H*D, 2*H*D)``, ``[2*H*D, 3*H*D)`` as q, k and v, and
the derivative gives that tensor one gradient ``[..., L, 3*H*D]`` (``attention_backward``
with ``packed``: one output).

``decompose`` of ``attention`` is the composite, which Fusion records and fuses for large
tensors unless the backend below runs the op as kernels of its own (``Backend.fused_ops``:
the Cuda backend, ember/backend/cuda/attention.py).
"""
from __future__ import annotations

import numpy as np

from ..errors import AutodiffError, DTypeError, ShapeError
from ._api import api, run_op
from .linalg import matmul_t
from .nn import (SOFTMAX_BACKWARD, _ct, _quiet_sm, _sm_down, _sm_up, _softmax_bwd_numpy,
                 _softmax_numpy)
from .registry import declare
from .rules import require_kind

_OP = "attention"


def lowest(dtype) -> float:
    """The lowest finite value of a float ``dtype`` (a NumPy dtype, or an ember DType): a
    hidden key's score -- in the compute dtype here, in the scores' own dtype where
    `ember.nn` masks them."""
    d = getattr(dtype, "np", dtype)
    try:
        return float(np.finfo(d).min)
    except ValueError:                 # bfloat16: NumPy's finfo does not know it
        import ml_dtypes
        return float(ml_dtypes.finfo(d).min)


def _check_attrs(scale, causal, offset):
    if not isinstance(scale, float):
        raise DTypeError(f"{_OP}: scale must be a float, got {type(scale).__name__} "
                         f"{scale!r}")
    if not isinstance(causal, bool):
        raise DTypeError(f"{_OP}: causal must be a bool, got {type(causal).__name__} "
                         f"{causal!r}")
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise DTypeError(f"{_OP}: offset must be an int (query i sees keys j <= i + offset), "
                         f"got {type(offset).__name__} {offset!r}")


def _check_heads(op, heads):
    if type(heads) is not int or heads < 0:
        raise DTypeError(f"{op}: heads must be an int >= 0 (0: q, k, v are already split into "
                         f"heads), got {type(heads).__name__} {heads!r}")


def _check_packed(op, packed, heads):
    if type(packed) is not bool:
        raise DTypeError(f"{op}: packed must be a bool, got {type(packed).__name__} "
                         f"{packed!r}")
    if packed and not heads:
        raise ShapeError(f"{op}: packed q, k, v ([..., L, 3 * H * D]) need heads > 0")


def unpack_np(a, xp=np) -> tuple:
    """An array ``[..., L, 3*H*D]`` as its three column blocks q, k, v (views)."""
    d = a.shape[-1] // 3
    return a[..., :d], a[..., d:2 * d], a[..., 2 * d:]


def _unpack(t) -> tuple:
    """A Tensor ``[..., L, 3*H*D]`` as its three column blocks q, k, v (views)."""
    d = t._shape[-1] // 3
    return t[..., :d], t[..., d:2 * d], t[..., 2 * d:]


def split_shape(shape: tuple, heads: int) -> tuple | None:
    """``[..., L, H*D]`` as ``[..., H, L, D]`` for ``heads`` H, or None where it does not
    split so."""
    if len(shape) < 2 or shape[-1] % heads:
        return None
    return shape[:-2] + (heads, shape[-2], shape[-1] // heads)


def misfit(q, k, v, heads: int = 0, packed: bool = False):
    """Why Tensors ``q``, ``k``, ``v`` are not what `attention` takes (with ``heads``: each
    ``[..., L, H*D]``, split into H heads; with ``packed`` too: one tensor ``[..., L,
    3*H*D]`` passed three times), as the error to raise, or None (`ember.nn` asks before
    choosing the primitive over the composite)."""
    if packed:
        if not (q is k and k is v):
            return ShapeError(f"{_OP}: packed q, k, v are one tensor [..., L, 3 * H * D] "
                              f"passed as all three inputs; got three different tensors")
        s = q._shape
        if len(s) < 2 or s[-1] % (3 * heads):
            return ShapeError(f"{_OP}: packed q, k, v with heads={heads} must be [..., L, 3 "
                              f"* {heads} * D] (at least 2 dims), got {s}")
        q = k = v = _Meta(s[:-1] + (s[-1] // 3,), q._dtype)
    for t, what in ((q, "query"), (k, "key"), (v, "value")):
        if t._dtype.kind != "float":
            try:
                require_kind(_OP, t._dtype, "float", f"the {what}")
            except DTypeError as e:
                return e
    (sq, dq), (sk, dk), (sv, dv) = ((t._shape, t._dtype) for t in (q, k, v))
    if not dq is dk is dv:
        return DTypeError(f"{_OP}: query {dq.short}, key {dk.short} and value {dv.short} "
                          f"must have one float dtype; cast them first")
    if heads:
        split = [split_shape(x, heads) for x in (sq, sk, sv)]
        if None in split:
            return ShapeError(f"{_OP}: with heads={heads}, query {sq}, key {sk} and value "
                              f"{sv} must be [..., L, {heads} * D] (at least 2 dims, the last "
                              f"a multiple of {heads})")
        sq, sk, sv = split
    if not (len(sq) == len(sk) == len(sv) >= 2) or not sq[:-2] == sk[:-2] == sv[:-2]:
        return ShapeError(f"{_OP}: query {sq}, key {sk} and value {sv} must be [..., Lq, D], "
                          f"[..., Lk, D] and [..., Lk, Dv] with the same leading dims (at "
                          f"least 2 dims each; no broadcasting)")
    if sq[-1] != sk[-1] or sk[-2] != sv[-2]:
        return ShapeError(f"{_OP}: query {sq} and key {sk} must share the last dim D, and "
                          f"key and value {sv} the key count Lk (dim -2)")
    return None


class _Meta:
    """A shape and dtype standing in for a Tensor in `misfit` (a packed tensor's blocks)."""
    __slots__ = ("_shape", "_dtype")

    def __init__(self, shape, dtype):
        self._shape, self._dtype = shape, dtype


def _infer(q, k, v, scale, causal, offset, heads=0, packed=False):
    _check_attrs(scale, causal, offset)
    _check_heads(_OP, heads)
    _check_packed(_OP, packed, heads)
    for t, what in ((q, "query"), (k, "key"), (v, "value")):
        if not hasattr(t, "_shape"):
            raise DTypeError(f"{_OP}: expects a Tensor as the {what}, got "
                             f"{type(t).__name__}")
    err = misfit(q, k, v, heads, packed)
    if err is not None:
        raise err
    sq, sk, sv = q._shape, k._shape, v._shape
    if packed:
        sq = sk = sv = sq[:-1] + (sq[-1] // 3,)
    dq = q._dtype
    lead = sq[:-2]
    if heads:           # out merged [..., Lq, H*Dv]; weights [..., H, Lq, Lk]
        return [(lead + (sq[-2], sv[-1]), dq), (lead + (heads, sq[-2], sk[-2]), dq)]
    return [(lead + (sq[-2], sv[-1]), dq), (lead + (sq[-2], sk[-2]), dq)]


def causal_mask(lq, lk, offset, xp=np):
    """``[lq, lk]`` bool, True where key ``j`` is hidden from query ``i`` (``j > i +
    offset``)."""
    return xp.arange(lk).reshape(1, lk) > (xp.arange(lq) + offset).reshape(lq, 1)


def split_np(a, heads, xp=np):
    """An array ``[..., L, H*D]`` as the view ``[..., H, L, D]``."""
    s = a.shape
    return xp.swapaxes(a.reshape(s[:-1] + (heads, s[-1] // heads)), -2, -3)


def merge_np(a, xp=np):
    """An array ``[..., H, L, D]`` as ``[..., L, H*D]`` (a copy)."""
    s = a.shape
    return xp.swapaxes(a, -2, -3).reshape(s[:-3] + (s[-2], s[-3] * s[-1]))


def _split(t, heads):
    """A Tensor ``[..., L, H*D]`` as the view ``[..., H, L, D]``."""
    s = t._shape
    return t.reshape(s[:-1] + (heads, s[-1] // heads)).swap_dims(-2, -3)


def _merge(t):
    """A Tensor ``[..., H, L, D]`` as ``[..., L, H*D]``."""
    s = t._shape
    return t.swap_dims(-2, -3).reshape(s[:-3] + (s[-2], s[-3] * s[-1]))


def _numpy(q, k, v, *, scale, causal, offset, heads=0, packed=False, xp=np):
    if packed:
        q, k, v = unpack_np(q, xp)
    if heads:
        out, p = _numpy_split(*(split_np(a, heads, xp) for a in (q, k, v)), scale=scale,
                              causal=causal, offset=offset, xp=xp)
        return merge_np(out, xp), p
    return _numpy_split(q, k, v, scale=scale, causal=causal, offset=offset, xp=xp)


@_quiet_sm
def _numpy_split(q, k, v, *, scale, causal, offset, xp=np):
    src = q.dtype
    ct = _ct(q)
    qc, kc, vc = (a.astype(ct, copy=False) for a in (q, k, v))
    s = xp.matmul(qc, xp.swapaxes(kc, -1, -2))
    xp.multiply(s, ct(scale), out=s)
    if causal:
        s = xp.where(causal_mask(s.shape[-2], s.shape[-1], offset, xp), ct(lowest(ct)), s)
    p = _softmax_numpy(s, dim=s.ndim - 1, xp=xp)
    out = xp.matmul(p, vc)
    return out.astype(src, copy=False), p.astype(src, copy=False)


def causal_hidden(lq, lk, offset, device):
    """`causal_mask` as an ember bool Tensor on ``device``, made by creation ops (the
    composite's, and MultiHeadAttention's where it runs the composite)."""
    j = api.arange(lk, device=device).reshape(1, lk)
    i = (api.arange(lq, device=device) + offset).reshape(lq, 1)
    return j > i


def _decompose(q, k, v, *, scale, causal, offset, heads=0, packed=False):
    """The composite MultiHeadAttention computed (in f32 for f16/bf16)."""
    if packed:
        q, k, v = _unpack(q)
    if heads:
        out, p = _decompose(*(_split(t, heads) for t in (q, k, v)), scale=scale,
                            causal=causal, offset=offset)
        return _merge(out), p
    src = q._dtype
    qf, kf, vf = _sm_up(q), _sm_up(k), _sm_up(v)
    s = (qf @ kf.swap_dims(-1, -2)) * scale
    if causal:
        lq, lk = s._shape[-2], s._shape[-1]
        s = s.mask_fill(causal_hidden(lq, lk, offset, s.device), lowest(s._dtype.np))
    p = api.softmax(s, -1)
    return _sm_down(p @ vf, src), _sm_down(p, src)


def _vjp(g, inputs, out, scale, causal, offset, needs, heads=0, packed=False):
    q, k, v = inputs
    if packed:          # one tensor, three times: its one gradient goes to the first
        (dqkv,) = run_op(ATTENTION_BACKWARD, (g, q, q, q, out[1]), scale=scale,
                         causal=causal, offset=offset, heads=heads, packed=True)
        return (dqkv, None, None)
    if all(needs):
        return tuple(run_op(ATTENTION_BACKWARD, (g, q, k, v, out[1]), scale=scale,
                            causal=causal, offset=offset, heads=heads))
    if heads:
        grads = _grads(*(_split(t, heads) for t in (g, q, k, v)), out[1], scale, causal,
                       offset, needs)
        return tuple(None if d is None else _merge(d) for d in grads)
    return _grads(g, q, k, v, out[1], scale, causal, offset, needs)


def _grads(g, q, k, v, weights, scale, causal, offset, needs=(True, True, True)):
    """``(dq, dk, dv)`` as Tensor ops (None where ``needs`` says no): the derivative's
    formula, `attention_backward`'s decomposition."""
    src = q._dtype
    p = _sm_up(weights)
    gf = _sm_up(g)
    dq = dk = dv = None
    if needs[2]:
        dv = _sm_down(matmul_t(p, gf, ta=True), src)
    if needs[0] or needs[1]:
        dp = matmul_t(gf, _sm_up(v), tb=True)
        ds = run_op(SOFTMAX_BACKWARD, (dp, p), dim=len(p._shape) - 1) * scale
        lq, lk = p._shape[-2], p._shape[-1]
        if causal and offset < 0 and lq and lk:
            # queries i < -offset see no key: uniform weights that no score moves
            ds = ds.mask_fill(causal_hidden(lq, lk, offset, ds.device), 0.0)
        if needs[0]:
            dq = _sm_down(ds @ _sm_up(k), src)
        if needs[1]:
            dk = _sm_down(matmul_t(ds, _sm_up(q), ta=True), src)
    return (dq, dk, dv)


ATTENTION = declare(
    "attention", "other", nin=3, attrs=("scale", "causal", "offset", "heads", "packed"),
    infer=_infer,
    numpy=_numpy, vjp=_vjp, vjp_needs=True, nout=2, decompose=_decompose,
    doc="(softmax(q @ k^T * scale, causal: keys j > i + offset hidden) @ v, the weights) "
        "over [..., Lq, D], [..., Lk, D], [..., Lk, Dv] (with heads H > 0: [..., L, H*D] "
        "split into heads, the output merged; with packed, q = k = v one [..., L, 3*H*D] "
        "tensor of the three; f16/bf16 computed in f32); only the first output is "
        "differentiable")

# -- attention_backward: the derivative as one primitive -------------------------------------
_BWD = "attention_backward"


def _bwd_infer(g, q, k, v, weights, scale, causal, offset, heads=0, packed=False):
    _check_attrs(scale, causal, offset)
    _check_heads(_BWD, heads)
    _check_packed(_BWD, packed, heads)
    for t, what in ((g, "output gradient"), (q, "query"), (k, "key"), (v, "value"),
                    (weights, "weights")):
        if not hasattr(t, "_shape"):
            raise DTypeError(f"{_BWD}: expects a Tensor as the {what}, got "
                             f"{type(t).__name__}")
    err = misfit(q, k, v, heads, packed)
    if err is not None:
        raise type(err)(str(err).replace(_OP + ":", _BWD + ":", 1))
    sq, sk, sv, d = q._shape, k._shape, v._shape, q._dtype
    if packed:
        sq = sk = sv = sq[:-1] + (sq[-1] // 3,)
    lead = sq[:-2]
    want = {"output gradient": (g, lead + (sq[-2], sv[-1])),
            "weights": (weights, lead + ((heads,) if heads else ()) + (sq[-2], sk[-2]))}
    for what, (t, shape) in want.items():
        if t._dtype is not d:
            raise DTypeError(f"{_BWD}: the {what} is {t._dtype.short}, the query {d.short}; "
                             f"all five inputs share one float dtype")
        if t._shape != shape:
            raise ShapeError(f"{_BWD}: the {what} has shape {t._shape}; with query {sq}, "
                             f"key {sk} and value {sv} it must be {shape}")
    if packed:
        return [(q._shape, d)]
    return [(sq, d), (sk, d), (sv, d)]


def _bwd_numpy(g, q, k, v, weights, *, scale, causal, offset, heads=0, packed=False,
               xp=np):
    if packed:
        grads = _bwd_numpy(g, *unpack_np(q, xp), weights, scale=scale, causal=causal,
                           offset=offset, heads=heads, xp=xp)
        return (xp.concatenate(grads, axis=-1),)
    if heads:
        grads = _bwd_numpy_split(*(split_np(a, heads, xp) for a in (g, q, k, v)), weights,
                                 scale=scale, causal=causal, offset=offset, xp=xp)
        return tuple(merge_np(a, xp) for a in grads)
    return _bwd_numpy_split(g, q, k, v, weights, scale=scale, causal=causal, offset=offset,
                            xp=xp)


@_quiet_sm
def _bwd_numpy_split(g, q, k, v, weights, *, scale, causal, offset, xp=np):
    src = q.dtype
    ct = _ct(q)
    gc, qc, kc, vc, pc = (a.astype(ct, copy=False) for a in (g, q, k, v, weights))
    dv = xp.matmul(xp.swapaxes(pc, -1, -2), gc)
    dp = xp.matmul(gc, xp.swapaxes(vc, -1, -2))
    ds = xp.multiply(_softmax_bwd_numpy(dp, pc, dim=dp.ndim - 1, xp=xp), ct(scale))
    lq, lk = ds.shape[-2], ds.shape[-1]
    if causal and offset < 0 and lq and lk:
        ds = xp.where(causal_mask(lq, lk, offset, xp), ct(0), ds)
    dq = xp.matmul(ds, kc)
    dk = xp.matmul(xp.swapaxes(ds, -1, -2), qc)
    return tuple(a.astype(src, copy=False) for a in (dq, dk, dv))


def _bwd_decompose(g, q, k, v, weights, *, scale, causal, offset, heads=0, packed=False):
    if packed:
        grads = _bwd_decompose(g, *_unpack(q), weights, scale=scale, causal=causal,
                               offset=offset, heads=heads)
        return (api.cat(list(grads), -1),)
    if heads:
        grads = _grads(*(_split(t, heads) for t in (g, q, k, v)), weights, scale, causal,
                       offset)
        return tuple(_merge(d) for d in grads)
    return _grads(g, q, k, v, weights, scale, causal, offset)


def _bwd_vjp(g, inputs, out, **attrs):
    raise AutodiffError(f"{_BWD} has no derivative: attention is differentiated once (this "
                        f"op is its derivative); second derivatives of attention are not "
                        f"supported")


ATTENTION_BACKWARD = declare(
    _BWD, "other", nin=5, attrs=("scale", "causal", "offset", "heads", "packed"),
    infer=_bwd_infer,
    numpy=_bwd_numpy, vjp=_bwd_vjp, nout=3, decompose=_bwd_decompose,
    doc="attention's gradients (dq, dk, dv) from the output's gradient g and the weights "
        "P: dV = P^T g, dS = softmax_backward(g V^T, P) * scale (hidden rows of a "
        "negative causal offset zeroed), dQ = dS K, dK = dS^T Q (f16/bf16 computed in "
        "f32); with packed, one gradient [..., L, 3*H*D] of q = k = v packed")

__all__ = ["ATTENTION", "ATTENTION_BACKWARD", "causal_hidden", "causal_mask", "lowest",
           "merge_np", "misfit", "split_np", "split_shape", "unpack_np"]
