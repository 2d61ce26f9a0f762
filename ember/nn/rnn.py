"""Recurrent layers: `Lstm` and `Gru` (stacked, optionally bidirectional), with PyTorch's
gate equations and gate order (LSTM: input, forget, cell, output; GRU: reset, update,
new, with the reset applied after the hidden projection).

Each layer and direction is a cell module with ``weight_ih`` ``[d_in, G * d_hidden]``,
``weight_hh`` ``[d_hidden, G * d_hidden]`` (ember's ``[in, out]`` convention: PyTorch's
``weight_ih_l0`` transposed) and biases ``bias_ih``, ``bias_hh``. Cells are listed in
``cells`` as layer 0 forward, layer 0 reverse, layer 1 forward, ...
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import ember as em
from ember.errors import ShapeError

from ._util import as_device, initializer_arg, make_config, positive_int, probability
from .dropout import dropout as _dropout
from .initializer import Uniform

__all__ = ["Lstm", "Gru", "LstmState", "RnnCell", "LstmConfig", "GruConfig"]


class LstmState(NamedTuple):
    """Final (or initial) states, each ``[num_layers * num_directions, batch, d_hidden]``."""
    hidden: Any
    cell: Any


class RnnCell(em.Module):
    """The params of one layer and direction: ``gates * d_hidden`` outputs."""

    def __init__(self, d_input: int, d_hidden: int, gates: int, bias: bool = True, *,
                 device=None, initializer=None):
        k = 1.0 / math.sqrt(d_hidden)
        init = initializer_arg("RnnCell", initializer, Uniform(-k, k))
        device = as_device(device)
        g = gates * d_hidden
        self.weight_ih = init.init((d_input, g), fan_in=d_input, fan_out=g, device=device)
        self.weight_hh = init.init((d_hidden, g), fan_in=d_hidden, fan_out=g, device=device)
        b_init = init.for_bias()
        self.bias_ih = b_init.init((g,), fan_in=d_input, fan_out=g, device=device) \
            if bias else None
        self.bias_hh = b_init.init((g,), fan_in=d_hidden, fan_out=g, device=device) \
            if bias else None


class _Rnn(em.Module):
    _gates = 4
    _name = "Lstm"

    def __init__(self, d_input: int, d_hidden: int, bias: bool = True,
                 batch_first: bool = True, bidirectional: bool = False, num_layers: int = 1,
                 dropout: float = 0.0, *, device=None, initializer=None):
        name = self._name
        self.d_input = positive_int(name, "d_input", d_input)
        self.d_hidden = positive_int(name, "d_hidden", d_hidden)
        self.num_layers = positive_int(name, "num_layers", num_layers)
        self.batch_first = bool(batch_first)
        self.bidirectional = bool(bidirectional)
        self.dropout = probability(name, "dropout", dropout)
        dirs = 2 if bidirectional else 1
        self.cells = [RnnCell(d_input if layer == 0 else d_hidden * dirs, d_hidden,
                              self._gates, bias, device=device, initializer=initializer)
                      for layer in range(num_layers) for _ in range(dirs)]

    def extra_repr(self):
        return (f"d_input={self.d_input}, d_hidden={self.d_hidden}, num_layers="
                f"{self.num_layers}, bidirectional={self.bidirectional}, batch_first="
                f"{self.batch_first}")

    def _check(self, x):
        if x.ndim != 3 or x.shape[-1] != self.d_input:
            layout = "[batch, seq, d_input]" if self.batch_first else "[seq, batch, d_input]"
            raise ShapeError(f"{self._name}: input must be {layout} with d_input = "
                             f"{self.d_input}, got {tuple(x.shape)}")
        return x if self.batch_first else x.swap_dims(0, 1)

    def _state(self, s, what, b, x):
        n = self.num_layers * (2 if self.bidirectional else 1)
        if s is None:
            return [None] * n
        if tuple(s.shape) != (n, b, self.d_hidden):
            raise ShapeError(f"{self._name}: initial {what} must be [num_layers * "
                             f"num_directions, batch, d_hidden] = {(n, b, self.d_hidden)}, "
                             f"got {tuple(s.shape)}")
        return [s.select(0, i) for i in range(n)]

    def _layers(self, x, states):
        """Runs every layer; ``states[i]`` is the initial state of cell i (or None).
        Returns the last layer's output [B, T, D*H] and each cell's final state."""
        dirs = 2 if self.bidirectional else 1
        finals = []
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                i = layer * dirs + d
                out, final = self._run(self.cells[i], x, states[i], reverse=d == 1)
                outs.append(out)
                finals.append(final)
            x = outs[0] if dirs == 1 else em.cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = _dropout(x, self.dropout)
        return (x if self.batch_first else x.swap_dims(0, 1)), finals

    def _run(self, cell, x, state, reverse):  # pragma: no cover
        raise NotImplementedError


class Lstm(_Rnn):
    """Long short-term memory over ``[batch, seq, d_input]`` (``batch_first``, the
    default, as Burn) or ``[seq, batch, d_input]``.

    ``forward(x, state=None)`` returns ``(output, LstmState(hidden, cell))``: ``output``
    ``[batch, seq, num_directions * d_hidden]`` (the last layer's hidden states; forward
    then reverse direction concatenated), the final states ``[num_layers *
    num_directions, batch, d_hidden]``. ``state`` gives initial states of that shape
    (zeros by default). Params start uniform in ``±1/sqrt(d_hidden)`` (PyTorch)."""
    _gates = 4
    _name = "Lstm"

    def forward(self, x, state: LstmState | None = None):
        x = self._check(x)
        b = x.shape[0]
        hs = self._state(None if state is None else state[0], "hidden", b, x)
        cs = self._state(None if state is None else state[1], "cell", b, x)
        out, finals = self._layers(x, list(zip(hs, cs)))
        return out, LstmState(em.stack([h for h, _ in finals], 0),
                              em.stack([c for _, c in finals], 0))

    def _run(self, cell, x, state, reverse):
        b, t, _ = x.shape
        h_dim = self.d_hidden
        h, c = state
        if h is None:
            h = em.zeros(b, h_dim, dtype=x.dtype, device=x.device)
        if c is None:
            c = em.zeros(b, h_dim, dtype=x.dtype, device=x.device)
        xw = em.linear(x, cell.weight_ih, cell.bias_ih)
        out = [None] * t
        for step in (range(t - 1, -1, -1) if reverse else range(t)):
            g = xw.select(1, step) + em.linear(h, cell.weight_hh, cell.bias_hh)
            i, f, gg, o = g.chunk(4, -1)
            c = f.sigmoid() * c + i.sigmoid() * gg.tanh()
            h = o.sigmoid() * c.tanh()
            out[step] = h
        return em.stack(out, 1), (h, c)


class Gru(_Rnn):
    """Gated recurrent unit over ``[batch, seq, d_input]`` (``batch_first``) or
    ``[seq, batch, d_input]``: ``forward(x, hidden=None)`` returns ``(output, hidden)``
    with the shapes of `Lstm`'s output and final hidden state."""
    _gates = 3
    _name = "Gru"

    def forward(self, x, hidden=None):
        x = self._check(x)
        hs = self._state(hidden, "hidden", x.shape[0], x)
        out, finals = self._layers(x, hs)
        return out, em.stack(finals, 0)

    def _run(self, cell, x, h, reverse):
        b, t, _ = x.shape
        if h is None:
            h = em.zeros(b, self.d_hidden, dtype=x.dtype, device=x.device)
        xw = em.linear(x, cell.weight_ih, cell.bias_ih)
        out = [None] * t
        for step in (range(t - 1, -1, -1) if reverse else range(t)):
            xr, xz, xn = xw.select(1, step).chunk(3, -1)
            hr, hz, hn = em.linear(h, cell.weight_hh, cell.bias_hh).chunk(3, -1)
            r = (xr + hr).sigmoid()
            z = (xz + hz).sigmoid()
            n = (xn + r * hn).tanh()
            h = n + z * (h - n)
            out[step] = h
        return em.stack(out, 1), h


LstmConfig = make_config(Lstm)
GruConfig = make_config(Gru)
