"""`Dropout`: zeroes elements with probability ``prob`` in training and scales the rest by
``1 / (1 - prob)``; the identity in evaluation (``module.eval()`` / ``module.valid()``)."""
from __future__ import annotations

import ember as em

from ._util import make_config, probability

__all__ = ["Dropout", "DropoutConfig", "dropout"]


def dropout(x, prob: float = 0.5, training: bool = True):
    """``x`` with elements zeroed with probability ``prob`` (drawn from the device's seeded
    stream, so ``em.seed(n)`` makes it reproducible) and the rest scaled by
    ``1 / (1 - prob)``; ``x`` itself when not ``training`` or ``prob == 0``."""
    prob = probability("dropout", "prob", prob)
    if not training or prob == 0.0:
        return x
    keep = em.random(tuple(x.shape), em.Bernoulli(1.0 - prob), dtype=em.bool,
                     device=x.device)
    return em.where(keep, x * (1.0 / (1.0 - prob)), 0.0)


class Dropout(em.Module):
    """Randomly zeroes elements with probability ``prob`` while ``self.training`` (the
    default for a new module); the identity after ``.eval()`` or ``.valid()``."""

    def __init__(self, prob: float = 0.5, *, device=None):
        self.prob = probability("Dropout", "prob", prob)

    def forward(self, x):
        return dropout(x, self.prob, self.training)


DropoutConfig = make_config(Dropout)
