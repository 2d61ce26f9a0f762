"""Lstm and Gru against torch.nn.LSTM / GRU with the same weights."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.errors import ShapeError

from ._ref import close, et, load, randn, torch, tt

tnn = torch.nn


def _state_from(ref, layers, bidirectional):
    state = {}
    dirs = ("", "_reverse") if bidirectional else ("",)
    i = 0
    for layer in range(layers):
        for suffix in dirs:
            for kind in ("ih", "hh"):
                name = f"{kind}_l{layer}{suffix}"
                state[f"cells.{i}.weight_{kind}"] = getattr(ref, f"weight_{name}").T
                state[f"cells.{i}.bias_{kind}"] = getattr(ref, f"bias_{name}")
            i += 1
    return state


@pytest.mark.parametrize("bidirectional,layers,batch_first", [
    (False, 1, True), (True, 1, True), (True, 2, False), (False, 2, True)])
def test_lstm_matches_torch(bidirectional, layers, batch_first):
    ref = tnn.LSTM(3, 5, num_layers=layers, bidirectional=bidirectional,
                   batch_first=batch_first)
    m = nn.Lstm(3, 5, bidirectional=bidirectional, num_layers=layers,
                batch_first=batch_first)
    m = load(m, _state_from(ref, layers, bidirectional))
    x = randn(2, 4, 3) if batch_first else randn(4, 2, 3)
    out, (h, c) = m(et(x))
    rout, (rh, rc) = ref(tt(x))
    close(out, rout)
    close(h, rh)
    close(c, rc)
    # with initial states
    n = layers * (2 if bidirectional else 1)
    h0, c0 = randn(n, 2, 5), randn(n, 2, 5)
    out, state = m(et(x), nn.LstmState(et(h0), et(c0)))
    rout, (rh, rc) = ref(tt(x), (tt(h0), tt(c0)))
    close(out, rout)
    close(state.hidden, rh)
    close(state.cell, rc)


@pytest.mark.parametrize("bidirectional,layers", [(False, 1), (True, 2)])
def test_gru_matches_torch(bidirectional, layers):
    ref = tnn.GRU(3, 4, num_layers=layers, bidirectional=bidirectional, batch_first=True)
    m = load(nn.Gru(3, 4, bidirectional=bidirectional, num_layers=layers),
             _state_from(ref, layers, bidirectional))
    x = randn(2, 5, 3)
    out, h = m(et(x))
    rout, rh = ref(tt(x))
    close(out, rout)
    close(h, rh)
    h0 = randn(layers * (2 if bidirectional else 1), 2, 4)
    out, h = m(et(x), et(h0))
    rout, rh = ref(tt(x), tt(h0))
    close(out, rout)
    close(h, rh)


def test_rnn_shapes_init_and_errors():
    m = nn.Lstm(3, 4, bias=False)
    assert [p for p, _ in m.named_parameters()] == ["cells.0.weight_ih", "cells.0.weight_hh"]
    assert tuple(m.cells[0].weight_ih.shape) == (3, 16)
    assert np.abs(m.cells[0].weight_hh.numpy()).max() <= 0.5  # U(-1/sqrt(4), 1/sqrt(4))
    with pytest.raises(ShapeError, match="d_input"):
        m(em.zeros(2, 3, 5))
    with pytest.raises(ShapeError, match="initial hidden"):
        nn.Gru(3, 4)(em.zeros(2, 3, 3), em.zeros(2, 2, 4))
    cfg = nn.GruConfig(3, 4, bidirectional=True)
    assert len(cfg.init().cells) == 2
