"""Items held in memory: a list of items, or rows of parallel arrays."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ..errors import ShapeError
from .dataset import Dataset

__all__ = ["InMemoryDataset"]


class InMemoryDataset(Dataset):
    """A dataset of items held in memory (Burn's ``InMemDataset``).

    ``InMemoryDataset(items)`` keeps a list of ``items``; ``InMemoryDataset.from_arrays(x, y)``
    holds arrays with the same first dimension and gives the tuple ``(x[i], y[i])`` for item
    ``i`` (a single array gives ``x[i]`` itself), without copying the arrays."""

    __slots__ = ("_items", "_arrays")

    def __init__(self, items: Iterable = ()):
        self._items = list(items)
        self._arrays = None

    @classmethod
    def from_arrays(cls, *arrays) -> "InMemoryDataset":
        if not arrays:
            raise ShapeError("InMemoryDataset.from_arrays: give at least one array")
        arrs = tuple(a if isinstance(a, np.ndarray) else np.asarray(a) for a in arrays)
        for k, a in enumerate(arrs):
            if a.ndim == 0:
                raise ShapeError(f"InMemoryDataset.from_arrays: array {k} is a scalar; each "
                                 f"array needs a first (item) dimension")
        lens = [a.shape[0] for a in arrs]
        if len(set(lens)) != 1:
            raise ShapeError(f"InMemoryDataset.from_arrays: arrays have different first "
                             f"dimensions {lens} (shapes {[a.shape for a in arrs]}); they "
                             f"must all hold the same number of items")
        ds = cls.__new__(cls)
        ds._items = None
        ds._arrays = arrs
        return ds

    @property
    def arrays(self) -> tuple[np.ndarray, ...] | None:
        """The arrays given to `from_arrays` (None for a list of items)."""
        return self._arrays

    def __len__(self) -> int:
        if self._arrays is not None:
            return self._arrays[0].shape[0]
        return len(self._items)

    def get(self, index: int):
        if not 0 <= index < len(self):
            return None
        if self._arrays is not None:
            if len(self._arrays) == 1:
                return self._arrays[0][index]
            return tuple(a[index] for a in self._arrays)
        return self._items[index]

    def items(self) -> Sequence:
        """Every item, as a list (rows of the arrays for `from_arrays`)."""
        if self._arrays is not None:
            return [self.get(i) for i in range(len(self))]
        return list(self._items)
