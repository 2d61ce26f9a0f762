"""The `Dataset` protocol: a length and random access to items by index (Burn's `Dataset`)."""
from __future__ import annotations

import operator
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import DTypeError, IndexError as EmberIndexError

__all__ = ["Dataset", "DatasetLike", "as_dataset", "dataset_name"]


@runtime_checkable
class DatasetLike(Protocol):
    """Anything the data tools accept: a length and ``get(index)`` (or ``__getitem__``)."""

    def __len__(self) -> int: ...


class Dataset(ABC):
    """A finite, indexable collection of items.

    Subclasses implement ``__len__`` and ``get(index)``; ``get`` receives an int and returns
    the item, or ``None`` when the index is outside ``0 <= index < len(self)`` (as Burn's
    ``Option``). ``dataset[i]`` accepts negative indices and slices (a slice gives a
    `PartialDataset` view) and raises ``ember.errors.IndexError`` out of range. Datasets are
    read from several threads at once by `DataLoader`, so ``get`` must be thread-safe."""

    __slots__ = ()

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def get(self, index: int) -> Any: ...

    def len(self) -> int:
        """``len(self)``, spelled as in Burn."""
        return len(self)

    def is_empty(self) -> bool:
        return len(self) == 0

    def __getitem__(self, index):
        if isinstance(index, slice):
            from .transforms import PartialDataset
            start, stop, step = index.indices(len(self))
            if step != 1:
                from .transforms import SelectionDataset
                return SelectionDataset(self, range(start, stop, step))
            return PartialDataset(self, start, max(start, stop))
        i = _check_index(self, index)
        return self.get(i)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self.get(i)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(len={len(self)})"

    # -- transforms, chained ------------------------------------------------------------
    def map(self, fn) -> "Dataset":
        """``MapDataset(self, fn)``: items are ``fn(item)``, computed when read."""
        from .transforms import MapDataset
        return MapDataset(self, fn)

    def shuffled(self, seed: int) -> "Dataset":
        """``ShuffledDataset(self, seed)``: a seeded permutation of the items."""
        from .transforms import ShuffledDataset
        return ShuffledDataset(self, seed)

    def partial(self, start: int, end: int) -> "Dataset":
        """``PartialDataset(self, start, end)``: items ``start .. end-1``."""
        from .transforms import PartialDataset
        return PartialDataset(self, start, end)

    def windows(self, size: int, step: int = 1) -> "Dataset":
        """``WindowsDataset(self, size, step)``: lists of ``size`` consecutive items."""
        from .transforms import WindowsDataset
        return WindowsDataset(self, size, step)


def _check_index(ds, index) -> int:
    try:
        i = operator.index(index)
    except TypeError:
        raise DTypeError(f"{dataset_name(ds)}: index must be an int, got "
                         f"{type(index).__name__} {index!r}") from None
    n = len(ds)
    j = i + n if i < 0 else i
    if not 0 <= j < n:
        raise EmberIndexError(f"{dataset_name(ds)}: index {i} out of range for {n} items "
                              f"(valid: {-n} .. {n - 1})")
    return j


def dataset_name(ds) -> str:
    return type(ds).__name__


class _SequenceDataset(Dataset):
    """A view of a user object with ``__len__`` and ``get``/``__getitem__``."""

    __slots__ = ("source", "_get")

    def __init__(self, source):
        self.source = source
        get = getattr(source, "get", None)
        if callable(get) and not isinstance(source, (Sequence, dict)):
            self._get = get
        else:
            self._get = source.__getitem__

    def __len__(self) -> int:
        return len(self.source)

    def get(self, index: int):
        if not 0 <= index < len(self.source):
            return None
        return self._get(index)

    def __repr__(self) -> str:
        return f"Dataset({type(self.source).__name__}, len={len(self)})"


def as_dataset(obj) -> Dataset:
    """``obj`` itself when it is a `Dataset`; else a view of any object with ``__len__`` and
    ``get(i)`` or ``__getitem__(i)`` (lists, tuples, NumPy arrays, user classes)."""
    if isinstance(obj, Dataset):
        return obj
    if isinstance(obj, (str, bytes, dict)) or not hasattr(obj, "__len__") or not (
            hasattr(obj, "get") or hasattr(obj, "__getitem__")):
        raise DTypeError(f"as_dataset: expected a Dataset or an object with __len__ and "
                         f"get(i)/__getitem__(i), got {type(obj).__name__}")
    return _SequenceDataset(obj)
