"""Transformer blocks: `PositionWiseFeedForward`, `TransformerEncoder`,
`TransformerDecoder` (n layers, post-norm by default or pre-norm with ``norm_first``),
with KV caches for incremental decoding.

A layer, post-norm (Vaswani et al.; PyTorch's and Burn's default)::

    x = norm_1(x + dropout(self_attention(x)))
    x = norm_2(x + dropout(feed_forward(x)))

and pre-norm (``norm_first=True``)::

    x = x + dropout(self_attention(norm_1(x)))
    x = x + dropout(feed_forward(norm_2(x)))

The decoder adds cross-attention over the encoder's output (``memory``) between the two.
There is no final norm after the last layer (add a `LayerNorm` for a pre-norm stack).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ember as em
from ember.errors import ConfigError

from ._util import make_config, positive_int, probability
from .attention import MhaCache, MultiHeadAttention
from .dropout import Dropout
from .linear import Linear
from .norm import LayerNorm

__all__ = ["PositionWiseFeedForward", "TransformerEncoder", "TransformerEncoderLayer",
           "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoderCache",
           "TransformerDecoderCache", "PositionWiseFeedForwardConfig",
           "TransformerEncoderConfig", "TransformerDecoderConfig"]

_ACTIVATIONS = {
    "gelu": em.gelu,
    "gelu_tanh": lambda x: em.gelu(x, "tanh"),
    "relu": em.relu,
    "silu": em.silu,
    "tanh": em.tanh,
    "sigmoid": em.sigmoid,
    "mish": em.mish,
}


def _activation(owner, act):
    if isinstance(act, str):
        if act not in _ACTIVATIONS:
            raise ConfigError(f"{owner}: activation must be one of {sorted(_ACTIVATIONS)} or "
                              f"a module, got {act!r}")
        return act
    if not callable(act):
        raise ConfigError(f"{owner}: activation must be a name or a callable module, got "
                          f"{type(act).__name__}")
    return act


class PositionWiseFeedForward(em.Module):
    """``linear_outer(dropout(activation(linear_inner(x))))``: ``d_model -> d_ff ->
    d_model``. ``activation``: "gelu" (default, as Burn), "relu", "silu", ... or a
    module."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1,
                 activation: Any = "gelu", *, device=None, initializer=None):
        self.activation = _activation("PositionWiseFeedForward", activation)
        kw = {"device": device, "initializer": initializer}
        self.linear_inner = Linear(d_model, d_ff, **kw)
        self.linear_outer = Linear(d_ff, d_model, **kw)
        self.dropout = Dropout(probability("PositionWiseFeedForward", "dropout", dropout))

    def forward(self, x):
        act = self.activation
        h = _ACTIVATIONS[act](self.linear_inner(x)) if isinstance(act, str) \
            else act(self.linear_inner(x))
        return self.linear_outer(self.dropout(h))


# -- encoder --------------------------------------------------------------------------------
class TransformerEncoderLayer(em.Module):
    """One encoder layer: self-attention and feed-forward, each with a residual and a
    LayerNorm (post-norm, or pre-norm with ``norm_first``)."""

    def __init__(self, d_model: int, d_ff: int, n_heads: int, dropout: float = 0.1,
                 norm_first: bool = False, activation: Any = "gelu",
                 layer_norm_eps: float = 1e-5, quiet_softmax: bool = False, *, device=None,
                 initializer=None):
        kw = {"device": device, "initializer": initializer}
        self.mha = MultiHeadAttention(d_model, n_heads, dropout,
                                      quiet_softmax=quiet_softmax, **kw)
        self.pwff = PositionWiseFeedForward(d_model, d_ff, dropout, activation, **kw)
        self.norm_1 = LayerNorm(d_model, layer_norm_eps, device=device)
        self.norm_2 = LayerNorm(d_model, layer_norm_eps, device=device)
        self.dropout = Dropout(dropout)
        self.norm_first = bool(norm_first)

    def _block(self, x, attend):
        """The layer around ``attend(h) -> (context, cache)``. The context is let go once
        added: on a fusing device the norm that follows computes the pending sum, and a
        context still referenced would have to be written to memory too."""
        if self.norm_first:
            a, cache = attend(self.norm_1(x))
            x = x + self.dropout(a)
            del a
            x = x + self.dropout(self.pwff(self.norm_2(x)))
        else:
            a, cache = attend(x)
            x = x + self.dropout(a)
            del a
            x = self.norm_1(x)
            x = self.norm_2(x + self.dropout(self.pwff(x)))
        return x, cache

    def forward(self, x, mask_pad=None, mask_attn=None, causal: bool = False):
        def attend(h):
            return self.mha(h, mask_pad=mask_pad, mask_attn=mask_attn, causal=causal,
                            need_weights=False)[0], None
        return self._block(x, attend)[0]

    def forward_cache(self, x, cache: MhaCache | None, mask_pad=None):
        def attend(h):
            out, c = self.mha.forward_cache(h, cache, mask_pad=mask_pad, need_weights=False)
            return out.context, c
        return self._block(x, attend)


@dataclass(frozen=True)
class TransformerEncoderCache:
    """Per-layer `MhaCache` values of a `TransformerEncoder` decoding incrementally."""
    layers: tuple = ()

    @property
    def length(self) -> int:
        return self.layers[0].length if self.layers else 0


class TransformerEncoder(em.Module):
    """``n_layers`` encoder layers over ``[batch, seq, d_model]``.

    ``forward(x, mask_pad=None, mask_attn=None, causal=False)``; with ``causal=True`` it is
    a decoder-only (GPT-style) stack, and ``forward_cache(x_new, cache)`` runs it
    incrementally, returning ``(output_new, cache)``."""

    def __init__(self, d_model: int, d_ff: int, n_heads: int, n_layers: int,
                 dropout: float = 0.1, norm_first: bool = False, activation: Any = "gelu",
                 layer_norm_eps: float = 1e-5, quiet_softmax: bool = False, *, device=None,
                 initializer=None):
        positive_int("TransformerEncoder", "n_layers", n_layers)
        self.layers = [TransformerEncoderLayer(d_model, d_ff, n_heads, dropout, norm_first,
                                               activation, layer_norm_eps, quiet_softmax,
                                               device=device, initializer=initializer)
                       for _ in range(n_layers)]

    def forward(self, x, mask_pad=None, mask_attn=None, causal: bool = False):
        for layer in self.layers:
            x = layer(x, mask_pad, mask_attn, causal)
        return x

    def forward_cache(self, x, cache: TransformerEncoderCache | None = None, mask_pad=None):
        """Causal self-attention over the cached positions and the new ones in ``x``;
        returns ``(output for x, new cache)``."""
        caches = cache.layers if cache is not None and cache.layers else \
            (None,) * len(self.layers)
        new = []
        for layer, c in zip(self.layers, caches):
            x, c = layer.forward_cache(x, c, mask_pad)
            new.append(c)
        return x, TransformerEncoderCache(tuple(new))

    def new_cache(self) -> TransformerEncoderCache:
        return TransformerEncoderCache(tuple(MhaCache() for _ in self.layers))


# -- decoder --------------------------------------------------------------------------------
class TransformerDecoderLayer(em.Module):
    """One decoder layer: self-attention, cross-attention over ``memory`` and feed-forward,
    each with a residual and a LayerNorm."""

    def __init__(self, d_model: int, d_ff: int, n_heads: int, dropout: float = 0.1,
                 norm_first: bool = False, activation: Any = "gelu",
                 layer_norm_eps: float = 1e-5, quiet_softmax: bool = False, *, device=None,
                 initializer=None):
        kw = {"device": device, "initializer": initializer}
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout,
                                            quiet_softmax=quiet_softmax, **kw)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout,
                                             quiet_softmax=quiet_softmax, **kw)
        self.pwff = PositionWiseFeedForward(d_model, d_ff, dropout, activation, **kw)
        self.norm_1 = LayerNorm(d_model, layer_norm_eps, device=device)
        self.norm_2 = LayerNorm(d_model, layer_norm_eps, device=device)
        self.norm_3 = LayerNorm(d_model, layer_norm_eps, device=device)
        self.dropout = Dropout(dropout)
        self.norm_first = bool(norm_first)

    def _block(self, x, self_attend, cross_attend):
        if self.norm_first:
            a, c1 = self_attend(self.norm_1(x))
            x = x + self.dropout(a)
            a, c2 = cross_attend(self.norm_2(x))
            x = x + self.dropout(a)
            x = x + self.dropout(self.pwff(self.norm_3(x)))
        else:
            a, c1 = self_attend(x)
            x = self.norm_1(x + self.dropout(a))
            a, c2 = cross_attend(x)
            x = self.norm_2(x + self.dropout(a))
            x = self.norm_3(x + self.dropout(self.pwff(x)))
        return x, c1, c2

    def forward(self, target, memory, target_mask_pad=None, memory_mask_pad=None,
                target_mask_attn=None, memory_mask_attn=None, causal: bool = False):
        def self_attend(h):
            return self.self_attn(h, mask_pad=target_mask_pad, mask_attn=target_mask_attn,
                                  causal=causal, need_weights=False).context, None

        def cross_attend(h):
            return self.cross_attn(h, memory, memory, mask_pad=memory_mask_pad,
                                   mask_attn=memory_mask_attn, need_weights=False).context, None
        return self._block(target, self_attend, cross_attend)[0]

    def forward_cache(self, target, memory, self_cache, cross_cache, target_mask_pad=None,
                      memory_mask_pad=None):
        def self_attend(h):
            out, c = self.self_attn.forward_cache(h, self_cache, mask_pad=target_mask_pad,
                                                  need_weights=False)
            return out.context, c

        def cross_attend(h):
            out, c = self.cross_attn.forward_cache(h, cross_cache, memory, memory,
                                                   mask_pad=memory_mask_pad, need_weights=False)
            return out.context, c
        return self._block(target, self_attend, cross_attend)


@dataclass(frozen=True)
class TransformerDecoderCache:
    """Per-layer ``(self-attention cache, cross-attention cache)`` of a
    `TransformerDecoder` decoding incrementally."""
    layers: tuple = ()

    @property
    def length(self) -> int:
        return self.layers[0][0].length if self.layers else 0


class TransformerDecoder(em.Module):
    """``n_layers`` decoder layers: ``forward(target, memory, target_mask_pad=None,
    memory_mask_pad=None, target_mask_attn=None, memory_mask_attn=None, causal=False)``
    (pass ``causal=True`` or a ``target_mask_attn`` for autoregressive training).

    ``forward_cache(target_new, memory, cache)`` decodes incrementally: causal
    self-attention over all targets so far (cached), cross-attention over ``memory``
    (projected once); returns ``(output for target_new, new cache)``."""

    def __init__(self, d_model: int, d_ff: int, n_heads: int, n_layers: int,
                 dropout: float = 0.1, norm_first: bool = False, activation: Any = "gelu",
                 layer_norm_eps: float = 1e-5, quiet_softmax: bool = False, *, device=None,
                 initializer=None):
        positive_int("TransformerDecoder", "n_layers", n_layers)
        self.layers = [TransformerDecoderLayer(d_model, d_ff, n_heads, dropout, norm_first,
                                               activation, layer_norm_eps, quiet_softmax,
                                               device=device, initializer=initializer)
                       for _ in range(n_layers)]

    def forward(self, target, memory, target_mask_pad=None, memory_mask_pad=None,
                target_mask_attn=None, memory_mask_attn=None, causal: bool = False):
        x = target
        for layer in self.layers:
            x = layer(x, memory, target_mask_pad, memory_mask_pad, target_mask_attn,
                      memory_mask_attn, causal)
        return x

    def new_cache(self) -> TransformerDecoderCache:
        return TransformerDecoderCache(tuple((MhaCache(), MhaCache(static=True))
                                             for _ in self.layers))

    def forward_cache(self, target, memory, cache: TransformerDecoderCache | None = None,
                      target_mask_pad=None, memory_mask_pad=None):
        cache = self.new_cache() if cache is None or not cache.layers else cache
        x = target
        new = []
        for layer, (c1, c2) in zip(self.layers, cache.layers):
            x, c1, c2 = layer.forward_cache(x, memory, c1, c2, target_mask_pad,
                                            memory_mask_pad)
            new.append((c1, c2))
        return x, TransformerDecoderCache(tuple(new))


PositionWiseFeedForwardConfig = make_config(PositionWiseFeedForward)
TransformerEncoderConfig = make_config(TransformerEncoder)
TransformerDecoderConfig = make_config(TransformerDecoder)
