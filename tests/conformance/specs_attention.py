"""Conformance cases of the ``attention`` primitive (ember/ops/attention.py) -- ``(softmax(q @
k^T * scale, causal mask) @ v, the weights)`` -- run directly and through
``nn.functional.scaled_dot_product_attention``, against float64 references written here
(einsum, an explicit causal mask, a softmax by hand). Gradient checks (finite differences of
the reference's first output) cover q, k and v, including queries that see no key; the
derivative itself runs as the primitive ``attention_backward`` there. That primitive is also
run directly, on weights from the forward and on arbitrary ones, against the textbook
gradients in float64."""
from __future__ import annotations

import numpy as np

from ember import nn
from tests.conformance.harness import Case
from tests.conformance.specs_nn import P


def ref_attention(q, k, v, scale, causal=False, offset=0):
    """``(out, weights)`` in float64; hidden keys (``j > i + offset``) get weight 0, and a
    query that sees no key spreads its weight evenly."""
    s = np.einsum("...id,...jd->...ij", q, k) * scale
    lq, lk = s.shape[-2:]
    if causal:
        visible = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + offset
        none = ~visible.any(-1, keepdims=True)
        s = np.where(none, 0.0, np.where(visible, s, -np.inf))
    if lk == 0:
        p = s
    else:
        e = np.exp(s - s.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
    return np.einsum("...ij,...jd->...id", p, v), p


def _att(scale, causal=False, offset=0):
    return (lambda q, k, v: P("attention", q, k, v, scale=scale, causal=causal,
                              offset=offset),
            lambda q, k, v: ref_attention(q, k, v, scale, causal, offset))


def _case(name, scale, causal, offset, shapes, **kw):
    fn, ref = _att(scale, causal, offset)
    return Case(name, "attention", fn, ref, shapes, **kw)


# (q, k, v) shapes: [B, H, Lq, D], [B, H, Lk, D], [B, H, Lk, Dv]
SQUARE = ((2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 3))
WIDE = ((2, 3, 3, 5), (2, 3, 6, 5), (2, 3, 6, 2))

CASES = [
    _case("attention_prim", 0.45, False, 0,
          [WIDE, ((3, 4, 5), (3, 6, 5), (3, 6, 2)), ((4, 3), (1, 3), (1, 5)),
           ((2, 0, 3), (2, 4, 3), (2, 4, 2)), ((2, 3, 3), (2, 0, 3), (2, 0, 2))]),
    _case("attention_prim_causal", 0.5, True, 0,
          [SQUARE, ((1, 7, 3), (1, 7, 3), (1, 7, 4))]),
    # the queries are the last positions (MultiHeadAttention's offset Lk - Lq)
    _case("attention_prim_causal_offset", 0.35, True, 3, [WIDE, ((4, 2), (6, 2), (6, 3))]),
    # queries 0 and 1 see no key: uniform weights, no gradient through the scores
    _case("attention_prim_causal_hidden_rows", 0.6, True, -2,
          [((2, 4, 3), (2, 5, 3), (2, 5, 2)), ((1, 2, 2), (1, 2, 2), (1, 2, 2))]),
    Case("attention_sdpa_causal", "attention",
         lambda q, k, v: nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
         lambda q, k, v: ref_attention(q, k, v, 1 / np.sqrt(q.shape[-1]), True, 0)[0],
         [SQUARE, ((3, 4), (6, 4), (6, 2))]),
    Case("attention_sdpa_scale", "attention",
         lambda q, k, v: nn.functional.scaled_dot_product_attention(q, k, v, scale=0.3,
                                                                    training=False),
         lambda q, k, v: ref_attention(q, k, v, 0.3)[0], [WIDE]),
]


def ref_attention_backward(g, q, k, v, p, scale, causal=False, offset=0):
    """``(dq, dk, dv)`` in float64 for weights ``p``: the gradients of ``out = p @ v`` with
    ``p = softmax(scores)``, ``scores = q k^T * scale``; a query that sees no key (``offset <
    0``) passes no gradient to its scores."""
    dv = np.einsum("...ij,...id->...jd", p, g)
    dp = np.einsum("...id,...jd->...ij", g, v)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    lq, lk = p.shape[-2:]
    if causal and offset < 0:
        hidden = np.arange(lk)[None, :] > np.arange(lq)[:, None] + offset
        ds = np.where(hidden, 0.0, ds)
    return (np.einsum("...ij,...jd->...id", ds, k), np.einsum("...ij,...id->...jd", ds, q),
            dv)


def _bwd(scale, causal=False, offset=0, from_forward=True):
    """The primitive on (g, q, k, v) with the forward's weights, or on (g, q, k, v, p)."""
    def fn(g, q, k, v, *p):
        if from_forward:
            p = (P("attention", q, k, v, scale=scale, causal=causal, offset=offset)[1],)
        return P("attention_backward", g, q, k, v, *p, scale=scale, causal=causal,
                 offset=offset)

    def ref(g, q, k, v, *p):
        if from_forward:
            p = (ref_attention(q, k, v, scale, causal, offset)[1],)
        return ref_attention_backward(g, q, k, v, p[0], scale, causal, offset)
    return fn, ref


def _bwd_case(name, scale, causal, offset, shapes, from_forward=True):
    fn, ref = _bwd(scale, causal, offset, from_forward)
    return Case(name, ("attention_backward",), fn, ref, shapes, grad=False)


# (g, q, k, v[, p]) shapes
CASES += [
    _bwd_case("attention_backward", 0.45, False, 0,
              [((2, 3, 3, 2), (2, 3, 3, 5), (2, 3, 6, 5), (2, 3, 6, 2)),
               ((3, 2), (3, 4), (5, 4), (5, 2)), ((2, 0, 3), (2, 0, 4), (2, 5, 4), (2, 5, 3)),
               ((2, 3, 3), (2, 3, 4), (2, 0, 4), (2, 0, 3))]),
    _bwd_case("attention_backward_causal", 0.5, True, 0,
              [((2, 2, 5, 3), (2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 3))]),
    _bwd_case("attention_backward_causal_offset", 0.35, True, 3,
              [((4, 3), (4, 2), (6, 2), (6, 3))]),
    _bwd_case("attention_backward_hidden_rows", 0.6, True, -2,
              [((2, 4, 2), (2, 4, 3), (2, 5, 3), (2, 5, 2))]),
    # arbitrary weights (not a softmax): the formula holds for any P
    _bwd_case("attention_backward_any_weights", 0.3, True, -1,
              [((2, 3, 2), (2, 3, 4), (2, 5, 4), (2, 5, 2), (2, 3, 5))],
              from_forward=False),
]


# -- heads=H: q, k, v as [..., L, H*D], split into heads inside the op ---------------------
def _split_ref(a, heads):
    s = a.shape
    return np.swapaxes(a.reshape(s[:-1] + (heads, s[-1] // heads)), -2, -3)


def _merge_ref(a):
    s = a.shape
    return np.swapaxes(a, -2, -3).reshape(s[:-3] + (s[-2], s[-3] * s[-1]))


def _heads_case(name, scale, causal, offset, heads, shapes):
    def fn(q, k, v):
        return P("attention", q, k, v, scale=scale, causal=causal, offset=offset,
                 heads=heads)

    def ref(q, k, v):
        out, p = ref_attention(*(_split_ref(a, heads) for a in (q, k, v)), scale, causal,
                               offset)
        return _merge_ref(out), p
    return Case(name, "attention", fn, ref, shapes)


def _heads_bwd_case(name, scale, causal, offset, heads, shapes):
    def fn(g, q, k, v):
        p = P("attention", q, k, v, scale=scale, causal=causal, offset=offset,
              heads=heads)[1]
        return P("attention_backward", g, q, k, v, p, scale=scale, causal=causal,
                 offset=offset, heads=heads)

    def ref(g, q, k, v):
        split = [_split_ref(a, heads) for a in (g, q, k, v)]
        p = ref_attention(*split[1:], scale, causal, offset)[1]
        return tuple(_merge_ref(d) for d in ref_attention_backward(*split, p, scale, causal,
                                                                   offset))
    return Case(name, "attention_backward", fn, ref, shapes, grad=False)


CASES += [
    # (q, k, v): [B, L, H*D]
    _heads_case("attention_heads", 0.4, False, 0, 3,
                [((2, 4, 6), (2, 5, 6), (2, 5, 9)), ((3, 6), (4, 6), (4, 3))]),
    _heads_case("attention_heads_causal", 0.5, True, 0, 2, [((2, 5, 4), (2, 5, 4), (2, 5, 6))]),
    _heads_case("attention_heads_hidden_rows", 0.6, True, -2, 2,
                [((1, 4, 4), (1, 5, 4), (1, 5, 2))]),
    _heads_bwd_case("attention_backward_heads", 0.45, True, 1, 3,
                    [((2, 4, 6), (2, 4, 9), (2, 6, 9), (2, 6, 6))]),
    _heads_bwd_case("attention_backward_heads_hidden_rows", 0.3, True, -1, 2,
                    [((3, 2), (3, 4), (4, 4), (4, 2))]),
]


# -- packed: q = k = v one [..., L, 3*H*D] tensor (a self-attention's fused projection) -----
def _unpack_ref(a):
    d = a.shape[-1] // 3
    return a[..., :d], a[..., d:2 * d], a[..., 2 * d:]


def _packed_case(name, scale, causal, heads, shapes):
    def fn(qkv):
        return P("attention", qkv, qkv, qkv, scale=scale, causal=causal, offset=0,
                 heads=heads, packed=True)

    def ref(qkv):
        out, p = ref_attention(*(_split_ref(a, heads) for a in _unpack_ref(qkv)), scale,
                               causal, 0)
        return _merge_ref(out), p
    return Case(name, "attention", fn, ref, shapes)


def _packed_bwd_case(name, scale, causal, heads, shapes):
    def fn(g, qkv):
        p = P("attention", qkv, qkv, qkv, scale=scale, causal=causal, offset=0, heads=heads,
              packed=True)[1]
        return P("attention_backward", g, qkv, qkv, qkv, p, scale=scale, causal=causal,
                 offset=0, heads=heads, packed=True)

    def ref(g, qkv):
        split = [_split_ref(a, heads) for a in (g,) + _unpack_ref(qkv)]
        p = ref_attention(*split[1:], scale, causal, 0)[1]
        return (np.concatenate([_merge_ref(d) for d in ref_attention_backward(
            *split, p, scale, causal, 0)], -1),)
    return Case(name, "attention_backward", fn, ref, shapes, grad=False)


CASES += [
    # (qkv,): [B, L, 3*H*D]; the gradient check differentiates through the packed tensor
    _packed_case("attention_packed", 0.4, False, 2, [((2, 4, 12),), ((5, 18),)]),
    _packed_case("attention_packed_causal", 0.5, True, 3, [((2, 5, 18),)]),
    _packed_bwd_case("attention_backward_packed", 0.45, True, 2,
                     [((2, 4, 4), (2, 4, 12))]),
]
