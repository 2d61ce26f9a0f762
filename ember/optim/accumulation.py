"""Gradient accumulation: add the GradientsParams of several micro-batches, then step with
their mean (or sum) — one optimizer step for a batch too big for memory."""
from __future__ import annotations

from .clipping import _new_grads

__all__ = ["GradientsAccumulator"]


class GradientsAccumulator:
    """``acc.add(grads)`` N times, then ``acc.mean()`` (each gradient's sum divided by N, the
    number of ``add`` calls: a parameter missing from some micro-batches counts as zero there)
    or ``acc.sum()``. ``acc.take()`` returns the mean and starts over. Gradients on another
    device than the first seen for that parameter are moved to it."""

    __slots__ = ("_sum", "_count")

    def __init__(self):
        self._sum: dict = {}
        self._count = 0

    def add(self, grads) -> "GradientsAccumulator":
        acc = self._sum
        for pid, g in grads.items():
            s = acc.get(pid)
            if s is None:
                acc[pid] = g
            else:
                acc[pid] = s + (g if g.device is s.device else g.to_device(s.device))
        self._count += 1
        return self

    accumulate = add

    def __len__(self) -> int:
        """The number of GradientsParams added."""
        return self._count

    @property
    def count(self) -> int:
        return self._count

    def sum(self):
        return _new_grads(None, dict(self._sum))

    def mean(self):
        n = self._count
        if n <= 1:
            return _new_grads(None, dict(self._sum))
        d = float(n)
        return _new_grads(None, {pid: s / d for pid, s in self._sum.items()})

    def take(self, mean: bool = True):
        """The mean (or sum) of what was added, and reset."""
        out = self.mean() if mean else self.sum()
        self.reset()
        return out

    grads = take  # Burn's name

    def reset(self) -> None:
        self._sum = {}
        self._count = 0

    def __repr__(self):
        return f"GradientsAccumulator({self._count} added, {len(self._sum)} params)"
