"""Multi-head attention with padding and attention masks, and a KV cache for incremental
decoding.

Mask conventions (Burn's and ``torch.nn.MultiheadAttention``'s): a bool mask is True where
attention is NOT allowed. ``mask_pad`` ``[batch, seq_k]`` marks padded keys; ``mask_attn``
``[seq_q, seq_k]`` or ``[batch, seq_q, seq_k]`` marks forbidden (query, key) pairs (a float
``mask_attn`` is added to the scores instead); ``causal=True`` forbids keys after the query.
Masked scores are set to the dtype's lowest finite value, so a fully masked row gives
uniform weights rather than NaN.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import ember as em
from ember.errors import ConfigError, ShapeError
from ember.ops.attention import ATTENTION, causal_hidden, lowest, misfit
from ember.tensor.dispatch import apply

from ._util import make_config, positive_int, probability
from .dropout import Dropout, dropout
from .linear import Linear

__all__ = ["MultiHeadAttention", "MultiHeadAttentionConfig", "MhaOutput", "MhaCache",
           "generate_autoregressive_mask", "generate_padding_mask",
           "scaled_dot_product_attention"]


class MhaOutput(NamedTuple):
    """``context`` ``[batch, seq_q, d_model]`` and the attention ``weights``
    ``[batch, n_heads, seq_q, seq_k]`` (before dropout: each row sums to 1; differentiable),
    or None when the call said ``need_weights=False``."""
    context: Any
    weights: Any


@dataclass(frozen=True)
class MhaCache:
    """The projected keys and values ``[batch, n_heads, seq, d_k]`` seen so far: a value,
    returned anew by each `MultiHeadAttention.forward_cache` call.

    ``MhaCache()`` (autoregressive self-attention) appends each call's keys and values;
    ``MhaCache(static=True)`` (cross-attention over a fixed memory) projects them on the
    first call and reuses them after."""
    key: Any = None
    value: Any = None
    static: bool = False

    @property
    def length(self) -> int:
        return 0 if self.key is None else self.key.shape[2]

    def __len__(self):
        return self.length


def generate_autoregressive_mask(seq_length: int, device=None, offset: int = 0):
    """``[seq_length, offset + seq_length]`` bool, True where key ``j`` comes after query
    ``i`` (at absolute position ``offset + i``): the causal mask."""
    from ._util import as_device
    device = as_device(device)
    n_k = offset + seq_length
    j = em.arange(n_k, device=device).reshape(1, n_k)
    i = (em.arange(seq_length, device=device) + offset).reshape(seq_length, 1)
    return j > i


def generate_padding_mask(lengths, max_length: int | None = None, device=None):
    """``[batch, max_length]`` bool, True at positions ``>= lengths[b]`` (padding)."""
    from ._util import as_device
    device = as_device(device)
    lengths = [int(n) for n in lengths]
    max_length = max(lengths) if max_length is None else int(max_length)
    pos = em.arange(max_length, device=device).reshape(1, max_length)
    return pos >= em.tensor(lengths, device=device).reshape(len(lengths), 1)


def _apply_masks(scores, mask_pad, mask_attn, causal, offset):
    """``scores`` [B, H, Lq, Lk] with the masks applied."""
    b, _, lq, lk = scores.shape
    fill = lowest(scores.dtype)
    if mask_pad is not None:
        if mask_pad.ndim != 2 or tuple(mask_pad.shape) != (b, lk):
            raise ShapeError(f"attention: mask_pad {tuple(mask_pad.shape)} must be "
                             f"[batch, seq_k] = ({b}, {lk})")
        scores = scores.mask_fill(mask_pad.reshape(b, 1, 1, lk), fill)
    if mask_attn is not None:
        s = tuple(mask_attn.shape)
        if s == (lq, lk):
            m = mask_attn.reshape(1, 1, lq, lk)
        elif s == (b, lq, lk):
            m = mask_attn.reshape(b, 1, lq, lk)
        elif s == (b, scores.shape[1], lq, lk):
            m = mask_attn
        else:
            raise ShapeError(f"attention: mask_attn {s} must be [seq_q, seq_k] = ({lq}, {lk}), "
                             f"[batch, seq_q, seq_k] or [batch, n_heads, seq_q, seq_k]")
        if m.dtype == em.bool:
            scores = scores.mask_fill(m, fill)
        else:
            scores = scores + m.cast(scores.dtype)
    if causal:
        scores = scores.mask_fill(causal_hidden(lq, lk, offset, scores.device), fill)
    return scores


def _fits_primitive(q, k, v, heads: int = 0, packed: bool = False) -> bool:
    """Whether ``q``, ``k``, ``v`` are what the ``attention`` primitive takes (its own
    rule, `ember.ops.attention.misfit`; ``heads``: unsplit ``[batch, seq, heads * d]``;
    ``packed``: one ``[batch, seq, 3 * heads * d]`` tensor as all three): then it computes
    what the composite does, as one op each way; else the composite runs (and raises where
    the inputs are wrong)."""
    return misfit(q, k, v, heads, packed) is None


def quiet_softmax(x, dim: int = -1):
    """Softmax with an extra zero logit (``exp(x) / (1 + sum(exp(x)))``): a head may attend
    to nothing."""
    m = x.max(dim, keepdim=True).detach().clamp(min=0.0)
    e = (x - m).exp()
    return e / (e.sum(dim, keepdim=True) + (-m).exp())


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 training: bool = True):
    """``softmax(q @ k^T * scale + mask) @ v`` over ``[..., L, E]`` inputs, with PyTorch's
    conventions: a bool ``attn_mask`` is True where attention IS allowed (a float one is
    added), ``is_causal`` masks keys after each query (top-left aligned), ``scale``
    defaults to ``1/sqrt(E)``; dropout on the weights when ``training``."""
    e = query.shape[-1]
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    if attn_mask is None and not (training and dropout_p > 0) and \
            _fits_primitive(query, key, value):
        return apply(ATTENTION, (query, key, value),
                     {"scale": scale, "causal": bool(is_causal), "offset": 0})[0]
    scores = (query @ key.transpose()) * scale
    fill = lowest(scores.dtype)
    lq, lk = scores.shape[-2], scores.shape[-1]
    if is_causal:
        scores = scores.mask_fill(causal_hidden(lq, lk, 0, scores.device), fill)
    if attn_mask is not None:
        if attn_mask.dtype == em.bool:
            scores = scores.mask_fill(~attn_mask, fill)
        else:
            scores = scores + attn_mask.cast(scores.dtype)
    weights = em.softmax(scores, -1)
    weights = dropout(weights, dropout_p, training and dropout_p > 0)
    return weights @ value


class MultiHeadAttention(em.Module):
    """Multi-head attention (Vaswani et al.) with ``n_heads`` heads of size
    ``d_model / n_heads``; ``query``, ``key``, ``value`` and ``output`` are `Linear` layers.

    ``mha(query, key=None, value=None, mask_pad=None, mask_attn=None, causal=False)``
    returns an `MhaOutput` ``(context, weights)``; ``key`` and ``value`` default to
    ``query`` (self-attention). Inputs are ``[batch, seq, d_model]``. With ``causal``,
    query ``i`` sees keys ``j <= i + seq_k - seq_q`` (the queries are the last positions).
    Dropout applies to the attention weights in training. ``quiet_softmax`` adds a zero
    logit to each row."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.1, bias: bool = True,
                 quiet_softmax: bool = False, *, device=None, initializer=None):
        self.d_model = positive_int("MultiHeadAttention", "d_model", d_model)
        self.n_heads = positive_int("MultiHeadAttention", "n_heads", n_heads)
        if d_model % n_heads:
            raise ConfigError(f"MultiHeadAttention: n_heads {n_heads} must divide d_model "
                              f"{d_model}")
        self.d_k = d_model // n_heads
        self.quiet_softmax = bool(quiet_softmax)
        kw = {"device": device, "initializer": initializer}
        self.query = Linear(d_model, d_model, bias, **kw)
        self.key = Linear(d_model, d_model, bias, **kw)
        self.value = Linear(d_model, d_model, bias, **kw)
        self.output = Linear(d_model, d_model, bias, **kw)
        self.dropout = Dropout(probability("MultiHeadAttention", "dropout", dropout))

    def extra_repr(self):
        return f"d_model={self.d_model}, n_heads={self.n_heads}"

    def _check_input(self, x, what):
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ShapeError(f"MultiHeadAttention: {what} must be [batch, seq, "
                             f"{self.d_model}], got {tuple(x.shape)}")

    def _project(self, x, linear, what):
        """``linear(x)``, ``[batch, seq, d_model]``."""
        self._check_input(x, what)
        return linear(x)

    def _split(self, x):
        """``[batch, seq, d_model]`` as the heads ``[batch, n_heads, seq, d_k]`` (a view)."""
        b, n, _ = x.shape
        return x.reshape(b, n, self.n_heads, self.d_k).swap_dims(1, 2)

    def _heads(self, x, linear, what):
        return self._split(self._project(x, linear, what))

    def _one_op(self, mask_pad, mask_attn, need_weights) -> bool:
        """Whether the attention may be the ``attention`` primitive: no masks but the
        causal one, no dropout on the weights, the weights not wanted."""
        drop = self.dropout
        return not need_weights and mask_pad is None and mask_attn is None and \
            not self.quiet_softmax and not (drop.training and drop.prob > 0.0)

    def _attend(self, q, k, v, mask_pad, mask_attn, causal, offset, need_weights):
        scale = 1.0 / math.sqrt(self.d_k)
        drop = self.dropout
        if self._one_op(mask_pad, mask_attn, need_weights) and _fits_primitive(q, k, v):
            # the common case (no masks but the causal one, no dropout on the weights, the
            # weights not wanted): the `attention` primitive, one op forward and one
            # derivative rule backward where the composite below takes about a dozen each
            # way; the same results. (Its weights output carries no gradient of its own --
            # only a multi-output op's first output does --, so it serves callers that do
            # not take the weights: transformer layers)
            ctx = apply(ATTENTION, (q, k, v), {"scale": scale, "causal": bool(causal),
                                               "offset": int(offset)})[0]
            weights = None
        else:
            scores = _apply_masks((q @ k.transpose()) * scale, mask_pad, mask_attn, causal,
                                  offset)
            weights = quiet_softmax(scores, -1) if self.quiet_softmax else \
                em.softmax(scores, -1)
            ctx = drop(weights) @ v
        b, _, lq, _ = ctx.shape
        ctx = ctx.swap_dims(1, 2).reshape(b, lq, self.d_model)
        return MhaOutput(self.output(ctx), weights if need_weights else None)

    def _packed(self, x):
        """Self-attention's q, k, v as one product, ``[batch, seq, 3 * d_model]`` (column
        blocks q, k, v), or None where the three projections do not pack (their biases not
        all present or all absent, mixed dtypes or devices)."""
        lins = (self.query, self.key, self.value)
        biases = [lin.bias for lin in lins]
        absent = sum(b is None for b in biases)
        if absent not in (0, 3):
            return None
        ws = [lin.weight for lin in lins]
        if len({(w.dtype, w.device) for w in ws}) != 1 or x.dtype != ws[0].dtype:
            return None
        self._check_input(x, "query")
        w = em.cat(ws, 1)
        b = None if absent else em.cat(biases, 0)
        return em.linear(x, w, b)

    def forward(self, query, key=None, value=None, mask_pad=None, mask_attn=None,
                causal: bool = False, need_weights: bool = True) -> MhaOutput:
        """The attention of ``query`` over ``key``/``value``; ``need_weights=False`` returns
        no weights (``MhaOutput.weights`` None) and lets the common case run as the one
        ``attention`` primitive (as PyTorch's ``need_weights=False`` allows its fused path);
        a self-attention's (``key`` and ``value`` None or ``query`` itself) then projects q,
        k and v by one product and passes the packed result to it."""
        if (key is None or key is query) and (value is None or value is query) and \
                self._one_op(mask_pad, mask_attn, need_weights):
            qkv = self._packed(query)
            if qkv is not None and _fits_primitive(qkv, qkv, qkv, self.n_heads, True):
                ctx = apply(ATTENTION, (qkv, qkv, qkv), {
                    "scale": 1.0 / math.sqrt(self.d_k), "causal": bool(causal), "offset": 0,
                    "heads": self.n_heads, "packed": True})[0]
                return MhaOutput(self.output(ctx), None)
        key = query if key is None else key
        value = key if value is None else value
        q = self._project(query, self.query, "query")
        k = self._project(key, self.key, "key")
        v = self._project(value, self.value, "value")
        if k.shape[1] != v.shape[1] or k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0]:
            raise ShapeError(f"MultiHeadAttention: query {tuple(query.shape)}, key "
                             f"{tuple(key.shape)} and value {tuple(value.shape)} must share "
                             f"the batch, and key and value the sequence length")
        offset = k.shape[1] - q.shape[1]
        if self._one_op(mask_pad, mask_attn, need_weights) and \
                _fits_primitive(q, k, v, self.n_heads):
            # the common case as one op each way, the heads split and merged inside it
            # (``heads``): the eight view ops that splitting q, k, v and merging the output
            # take each way stay out of the graph
            ctx = apply(ATTENTION, (q, k, v), {"scale": 1.0 / math.sqrt(self.d_k),
                                               "causal": bool(causal), "offset": int(offset),
                                               "heads": self.n_heads})[0]
            return MhaOutput(self.output(ctx), None)
        return self._attend(self._split(q), self._split(k), self._split(v), mask_pad,
                            mask_attn, causal, offset, need_weights)

    def forward_cache(self, query, cache: MhaCache | None = None, key=None, value=None,
                      mask_pad=None, mask_attn=None, causal: bool | None = None,
                      need_weights: bool = True):
        """Attention for the new positions in ``query`` given a `MhaCache` of earlier keys
        and values; returns ``(MhaOutput, new_cache)``.

        With an autoregressive cache (the default), the new keys and values (from ``key``
        and ``value``, defaulting to ``query``) are appended, and each new query sees the
        keys up to its own position (``causal`` defaults to True); feeding a sequence one
        chunk at a time gives the same outputs as one causal ``forward``. With
        ``MhaCache(static=True)`` the keys and values are projected from ``key``/``value``
        on the first call and reused. ``mask_pad``/``mask_attn`` cover all cached keys;
        ``need_weights`` as in `forward`."""
        cache = MhaCache() if cache is None else cache
        q = self._heads(query, self.query, "query")
        if cache.static:
            if cache.key is None:
                if key is None:
                    raise ShapeError("MultiHeadAttention.forward_cache: a static cache's "
                                     "first call needs the key (the memory)")
                value = key if value is None else value
                cache = MhaCache(self._heads(key, self.key, "key"),
                                 self._heads(value, self.value, "value"), True)
            out = self._attend(q, cache.key, cache.value, mask_pad, mask_attn, bool(causal),
                               cache.length - q.shape[2], need_weights)
            return out, cache
        key = query if key is None else key
        value = key if value is None else value
        k = self._heads(key, self.key, "key")
        v = self._heads(value, self.value, "value")
        if cache.key is not None:
            k = em.cat([cache.key, k], 2)
            v = em.cat([cache.value, v], 2)
        new = MhaCache(k, v, False)
        offset = cache.length
        out = self._attend(q, k, v, mask_pad, mask_attn, True if causal is None else causal,
                           offset, need_weights)
        return out, new


MultiHeadAttentionConfig = make_config(MultiHeadAttention)
