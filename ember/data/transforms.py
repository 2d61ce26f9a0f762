"""Datasets built from datasets: lazy views that read their source on demand (Burn's
``MapperDataset``, ``PartialDataset``, ``ShuffledDataset``, ``SamplerDataset``,
``WindowsDataset``, ``ComposedDataset``)."""
from __future__ import annotations

import bisect
import operator
import secrets
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import DTypeError, IndexError as EmberIndexError, ShapeError
from .dataset import Dataset, as_dataset

__all__ = ["MapDataset", "PartialDataset", "SelectionDataset", "ShuffledDataset",
           "SamplerDataset", "WindowsDataset", "ComposedDataset"]


def _int(op: str, name: str, v) -> int:
    try:
        return operator.index(v)
    except TypeError:
        raise DTypeError(f"{op}: {name} must be an int, got {type(v).__name__} {v!r}") \
            from None


class MapDataset(Dataset):
    """Items ``fn(item)`` of ``dataset``, computed each time an item is read (in the loader's
    worker threads, so ``fn`` runs in parallel)."""

    __slots__ = ("dataset", "fn")

    def __init__(self, dataset, fn: Callable[[Any], Any]):
        if not callable(fn):
            raise DTypeError(f"MapDataset: fn must be callable, got {type(fn).__name__}")
        self.dataset = as_dataset(dataset)
        self.fn = fn

    def __len__(self) -> int:
        return len(self.dataset)

    def get(self, index: int):
        if not 0 <= index < len(self.dataset):
            return None
        return self.fn(self.dataset.get(index))

    def __repr__(self) -> str:
        return f"MapDataset({self.dataset!r}, fn={getattr(self.fn, '__name__', self.fn)})"


class SelectionDataset(Dataset):
    """The items of ``dataset`` at ``indices``, in that order (repeats allowed)."""

    __slots__ = ("dataset", "indices")

    def __init__(self, dataset, indices: Iterable[int]):
        self.dataset = as_dataset(dataset)
        idx = np.asarray(list(indices) if not isinstance(indices, (np.ndarray, range))
                         else indices)
        if idx.size == 0:
            idx = np.zeros(0, dtype=np.int64)
        if idx.ndim != 1 or idx.dtype.kind not in "iu":
            raise DTypeError(f"{type(self).__name__}: indices must be a 1-d sequence of ints, "
                             f"got {idx.dtype} of shape {idx.shape}")
        n = len(self.dataset)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            bad = int(idx[(idx < 0) | (idx >= n)][0])
            raise EmberIndexError(f"{type(self).__name__}: index {bad} out of range for a "
                                  f"dataset of {n} items")
        self.indices = idx.astype(np.int64)

    def __len__(self) -> int:
        return len(self.indices)

    def get(self, index: int):
        if not 0 <= index < len(self.indices):
            return None
        return self.dataset.get(int(self.indices[index]))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dataset!r}, len={len(self)})"


class PartialDataset(Dataset):
    """Items ``start .. end - 1`` of ``dataset`` (``0 <= start <= end <= len``)."""

    __slots__ = ("dataset", "start", "end")

    def __init__(self, dataset, start: int, end: int):
        self.dataset = as_dataset(dataset)
        start = _int("PartialDataset", "start", start)
        end = _int("PartialDataset", "end", end)
        n = len(self.dataset)
        if not 0 <= start <= end <= n:
            raise EmberIndexError(f"PartialDataset: range {start}..{end} does not fit a "
                                  f"dataset of {n} items; need 0 <= start <= end <= {n}")
        self.start, self.end = start, end

    @classmethod
    def split(cls, dataset, parts: int) -> list["PartialDataset"]:
        """``dataset`` cut into ``parts`` consecutive pieces whose lengths differ by at most
        one (the first pieces are the longer ones)."""
        parts = _int("PartialDataset.split", "parts", parts)
        if parts < 1:
            raise ShapeError(f"PartialDataset.split: parts must be >= 1, got {parts}")
        dataset = as_dataset(dataset)
        n = len(dataset)
        size, extra = divmod(n, parts)
        out, start = [], 0
        for k in range(parts):
            end = start + size + (1 if k < extra else 0)
            out.append(cls(dataset, start, end))
            start = end
        return out

    def __len__(self) -> int:
        return self.end - self.start

    def get(self, index: int):
        if not 0 <= index < self.end - self.start:
            return None
        return self.dataset.get(self.start + index)

    def __repr__(self) -> str:
        return f"PartialDataset({self.dataset!r}, {self.start}, {self.end})"


class ShuffledDataset(SelectionDataset):
    """A seeded permutation of ``dataset``: the same seed gives the same order in every run
    (NumPy's PCG64 generator)."""

    __slots__ = ("seed",)

    def __init__(self, dataset, seed: int):
        dataset = as_dataset(dataset)
        self.seed = _int("ShuffledDataset", "seed", seed)
        super().__init__(dataset, np.random.default_rng(self.seed).permutation(len(dataset)))


class SamplerDataset(SelectionDataset):
    """``size`` items drawn from ``dataset``: with replacement (independent uniform draws),
    or without (whole seeded permutations of the dataset, one after another, so every item
    appears once before any appears twice). The draws are fixed when the dataset is made;
    ``seed=None`` draws a fresh seed."""

    __slots__ = ("seed", "replacement")

    def __init__(self, dataset, size: int, *, replacement: bool = True,
                 seed: int | None = None):
        dataset = as_dataset(dataset)
        size = _int("SamplerDataset", "size", size)
        n = len(dataset)
        if size < 0:
            raise ShapeError(f"SamplerDataset: size must be >= 0, got {size}")
        if size > 0 and n == 0:
            raise ShapeError("SamplerDataset: cannot draw items from an empty dataset")
        self.seed = secrets.randbits(63) if seed is None else _int("SamplerDataset", "seed",
                                                                   seed)
        self.replacement = bool(replacement)
        rng = np.random.default_rng(self.seed)
        if self.replacement:
            idx = rng.integers(0, n, size=size) if size else np.zeros(0, np.int64)
        else:
            rounds = -(-size // n) if n else 0
            idx = np.concatenate([rng.permutation(n) for _ in range(rounds)] or
                                 [np.zeros(0, np.int64)])[:size]
        super().__init__(dataset, idx)


class WindowsDataset(Dataset):
    """Windows of ``size`` consecutive items: item ``i`` is the list
    ``[dataset[i * step], ..., dataset[i * step + size - 1]]``."""

    __slots__ = ("dataset", "size", "step")

    def __init__(self, dataset, size: int, step: int = 1):
        self.dataset = as_dataset(dataset)
        self.size = _int("WindowsDataset", "size", size)
        self.step = _int("WindowsDataset", "step", step)
        if self.size < 1 or self.step < 1:
            raise ShapeError(f"WindowsDataset: size and step must be >= 1, got size "
                             f"{self.size}, step {self.step}")

    def __len__(self) -> int:
        n = len(self.dataset)
        return 0 if n < self.size else (n - self.size) // self.step + 1

    def get(self, index: int):
        if not 0 <= index < len(self):
            return None
        start = index * self.step
        return [self.dataset.get(j) for j in range(start, start + self.size)]

    def __repr__(self) -> str:
        return f"WindowsDataset({self.dataset!r}, size={self.size}, step={self.step})"


class ComposedDataset(Dataset):
    """The datasets one after another (their concatenation)."""

    __slots__ = ("datasets", "_ends")

    def __init__(self, datasets: Sequence):
        self.datasets = [as_dataset(d) for d in datasets]
        ends, total = [], 0
        for d in self.datasets:
            total += len(d)
            ends.append(total)
        self._ends = ends

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def get(self, index: int):
        if not 0 <= index < len(self):
            return None
        k = bisect.bisect_right(self._ends, index)
        start = self._ends[k - 1] if k else 0
        return self.datasets[k].get(index - start)

    def __repr__(self) -> str:
        return f"ComposedDataset({len(self.datasets)} datasets, len={len(self)})"
