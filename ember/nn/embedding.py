"""`Embedding`: a lookup table of ``n_embedding`` vectors of size ``d_model``."""
from __future__ import annotations

import ember as em

from ._util import as_device, initializer_arg, make_config, positive_int
from .initializer import Initializer, Normal

__all__ = ["Embedding", "EmbeddingConfig"]

DEFAULT_INIT = Normal(0.0, 1.0)


class Embedding(em.Module):
    """Maps int indices of any shape to rows of ``weight`` ``[n_embedding, d_model]``:
    ``[*indices.shape, d_model]``. Initialized N(0, 1), as PyTorch and Burn."""

    def __init__(self, n_embedding: int, d_model: int, *, device=None,
                 initializer: Initializer | None = None):
        self.n_embedding = positive_int("Embedding", "n_embedding", n_embedding)
        self.d_model = positive_int("Embedding", "d_model", d_model)
        init = initializer_arg("Embedding", initializer, DEFAULT_INIT)
        self.weight = init.init((n_embedding, d_model), fan_in=n_embedding, fan_out=d_model,
                                device=as_device(device))

    def forward(self, indices):
        return em.embedding(self.weight, indices)


EmbeddingConfig = make_config(Embedding)
