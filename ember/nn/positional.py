"""Position information: `PositionalEncoding` (sinusoids added to the input) and
`RotaryEncoding` (RoPE: rotating pairs of features by position-dependent angles)."""
from __future__ import annotations

import numpy as np

import ember as em
from ember.errors import ConfigError, ShapeError

from ._util import as_device, make_config, positive_int

__all__ = ["PositionalEncoding", "RotaryEncoding", "PositionalEncodingConfig",
           "RotaryEncodingConfig", "sinusoids"]


def sinusoids(length: int, d_model: int, max_timescale: float = 10_000.0) -> np.ndarray:
    """``[length, d_model]`` float64: ``sin(pos / max_timescale^(i / d_model))`` at even
    ``i``, ``cos(pos / max_timescale^((i - 1) / d_model))`` at odd ``i``."""
    pos = np.arange(length, dtype=np.float64)[:, None]
    i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]
    angle = pos / np.power(float(max_timescale), i / d_model)
    out = np.zeros((length, d_model), dtype=np.float64)
    out[:, 0::2] = np.sin(angle)
    out[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return out


class PositionalEncoding(em.Module):
    """Adds the sinusoidal position encoding of Vaswani et al. to ``[batch, seq, d_model]``
    (or ``[seq, d_model]``) inputs, for sequences up to ``max_sequence_size``. The table is
    a constant (not a param: it is not saved and gets no gradient)."""

    def __init__(self, d_model: int, max_sequence_size: int = 5_000,
                 max_timescale: float = 10_000.0, *, device=None):
        self.d_model = positive_int("PositionalEncoding", "d_model", d_model)
        self.max_sequence_size = positive_int("PositionalEncoding", "max_sequence_size",
                                              max_sequence_size)
        self.max_timescale = float(max_timescale)
        self.sinusoids = em.tensor(sinusoids(max_sequence_size, d_model, max_timescale),
                                   dtype=em.float32, device=as_device(device))

    def forward(self, x, start: int = 0):
        """``x`` plus the encodings of positions ``start .. start + seq - 1``."""
        n = x.shape[-2]
        if x.shape[-1] != self.d_model or start + n > self.max_sequence_size:
            raise ShapeError(f"PositionalEncoding: input {tuple(x.shape)} (from position "
                             f"{start}) must be [..., seq, {self.d_model}] with start + seq "
                             f"<= max_sequence_size {self.max_sequence_size}")
        table = self.sinusoids.narrow(0, start, n)
        return x + table.cast(x.dtype)

    def extra_repr(self):
        return f"d_model={self.d_model}, max_sequence_size={self.max_sequence_size}"


class RotaryEncoding(em.Module):
    """Rotary position embedding (Su et al., RoFormer; Burn's layout): the features of
    ``[..., seq, d_model]`` form pairs ``(x[2i], x[2i+1])``, each rotated by the angle
    ``pos * theta^(-2i / d_model)``. Apply it to queries and keys before attention;
    ``forward(x, start)`` offsets the positions (for KV-cached decoding)."""

    def __init__(self, d_model: int, max_sequence_length: int = 4_096,
                 theta: float = 10_000.0, *, device=None):
        self.d_model = positive_int("RotaryEncoding", "d_model", d_model)
        if d_model % 2:
            raise ConfigError(f"RotaryEncoding: d_model {d_model} must be even (features "
                              f"rotate in pairs)")
        self.max_sequence_length = positive_int("RotaryEncoding", "max_sequence_length",
                                                max_sequence_length)
        self.theta = float(theta)
        pos = np.arange(max_sequence_length, dtype=np.float64)[:, None]
        freq = np.power(self.theta, -np.arange(0, d_model, 2, dtype=np.float64) / d_model)
        angle = pos * freq[None, :]
        device = as_device(device)
        self.cos = em.tensor(np.cos(angle), dtype=em.float32, device=device)
        self.sin = em.tensor(np.sin(angle), dtype=em.float32, device=device)

    def forward(self, x, start: int = 0):
        n, d = x.shape[-2], x.shape[-1]
        if d != self.d_model or start + n > self.max_sequence_length:
            raise ShapeError(f"RotaryEncoding: input {tuple(x.shape)} (from position {start}) "
                             f"must be [..., seq, {self.d_model}] with start + seq <= "
                             f"max_sequence_length {self.max_sequence_length}")
        shape = tuple(x.shape)
        pairs = x.reshape(shape[:-1] + (d // 2, 2))
        x0 = pairs.select(-1, 0)
        x1 = pairs.select(-1, 1)
        c = self.cos.narrow(0, start, n).cast(x.dtype)
        s = self.sin.narrow(0, start, n).cast(x.dtype)
        out = em.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1)
        return out.reshape(shape)

    def extra_repr(self):
        return f"d_model={self.d_model}, max_sequence_length={self.max_sequence_length}"


PositionalEncodingConfig = make_config(PositionalEncoding)
RotaryEncodingConfig = make_config(RotaryEncoding)
