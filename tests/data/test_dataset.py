"""The Dataset protocol, in-memory datasets and transforms."""
import copy
import threading

import numpy as np
import pytest

from ember import errors
from ember.data import (ComposedDataset, Dataset, InMemoryDataset, MapDataset,
                        PartialDataset, SamplerDataset, SelectionDataset, ShuffledDataset,
                        WindowsDataset, as_dataset)


class Squares(Dataset):
    """A user dataset: only __len__ and get."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def get(self, index):
        return index * index if 0 <= index < self.n else None


def test_protocol_indexing():
    ds = Squares(5)
    assert len(ds) == ds.len() == 5 and not ds.is_empty()
    assert ds[2] == 4 and ds[-1] == 16 and ds.get(7) is None
    assert list(ds) == [0, 1, 4, 9, 16]
    with pytest.raises(errors.IndexError, match=r"index 5 out of range for 5 items"):
        ds[5]
    with pytest.raises(errors.IndexError):
        ds[-6]
    with pytest.raises(errors.DTypeError, match="index must be an int"):
        ds["a"]
    assert list(ds[1:4]) == [1, 4, 9]
    assert isinstance(ds[1:4], PartialDataset)
    assert list(ds[::2]) == [0, 4, 16]
    assert list(ds[3:1]) == []
    assert Squares(0).is_empty()


def test_as_dataset():
    ds = as_dataset([10, 20, 30])
    assert len(ds) == 3 and ds[1] == 20 and ds.get(3) is None
    arr = np.arange(12).reshape(4, 3)
    np.testing.assert_array_equal(as_dataset(arr)[2], [6, 7, 8])

    class GetOnly:
        def __len__(self):
            return 2

        def get(self, i):
            return ("x", i)

    assert list(as_dataset(GetOnly())) == [("x", 0), ("x", 1)]
    d = Squares(3)
    assert as_dataset(d) is d
    for bad in (5, "abc", {"a": 1}):
        with pytest.raises(errors.DTypeError):
            as_dataset(bad)


def test_in_memory():
    ds = InMemoryDataset(iter(["a", "b", "c"]))
    assert len(ds) == 3 and ds[0] == "a" and ds[-1] == "c" and ds.items() == ["a", "b", "c"]
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    y = np.arange(5) % 2
    pairs = InMemoryDataset.from_arrays(x, y)
    assert len(pairs) == 5
    xi, yi = pairs[3]
    np.testing.assert_array_equal(xi, x[3])
    assert yi == y[3]
    assert np.shares_memory(pairs.arrays[0], x)
    single = InMemoryDataset.from_arrays(x)
    np.testing.assert_array_equal(single[4], x[4])
    with pytest.raises(errors.ShapeError, match=r"different first dimensions \[5, 4\]"):
        InMemoryDataset.from_arrays(x, y[:4])
    with pytest.raises(errors.ShapeError):
        InMemoryDataset.from_arrays(np.float32(1.0))
    assert copy.deepcopy(pairs)[2][1] == y[2]


def test_map_and_chaining():
    ds = MapDataset(Squares(4), lambda v: v + 1)
    assert list(ds) == [1, 2, 5, 10] and ds.get(4) is None
    chained = Squares(6).map(str).partial(1, 5).windows(2)
    assert list(chained) == [["1", "4"], ["4", "9"], ["9", "16"]]
    with pytest.raises(errors.DTypeError):
        MapDataset(Squares(2), 3)


def test_partial_and_split():
    base = Squares(10)
    p = PartialDataset(base, 2, 6)
    assert list(p) == [4, 9, 16, 25] and p.get(4) is None and p[-1] == 25
    with pytest.raises(errors.IndexError, match="0 <= start <= end <= 10"):
        PartialDataset(base, 4, 11)
    with pytest.raises(errors.IndexError):
        PartialDataset(base, 5, 4)
    parts = PartialDataset.split(base, 3)
    assert [len(q) for q in parts] == [4, 3, 3]
    assert sum((list(q) for q in parts), []) == list(base)
    assert [len(q) for q in PartialDataset.split(Squares(2), 3)] == [1, 1, 0]


def test_selection():
    s = SelectionDataset(Squares(5), [4, 0, 4])
    assert list(s) == [16, 0, 16]
    with pytest.raises(errors.IndexError, match="index 5 out of range"):
        SelectionDataset(Squares(5), [1, 5])
    with pytest.raises(errors.DTypeError):
        SelectionDataset(Squares(5), [0.5])
    assert len(SelectionDataset(Squares(5), [])) == 0


def test_shuffled_is_seeded_permutation():
    base = InMemoryDataset(range(50))
    a = ShuffledDataset(base, 7)
    b = ShuffledDataset(base, 7)
    c = ShuffledDataset(base, 8)
    assert list(a) == list(b)
    assert list(a) != list(c)
    assert sorted(a) == list(range(50))
    assert list(a) != list(range(50))
    # an independent reference: NumPy's generator with the same seed
    assert list(a) == list(np.random.default_rng(7).permutation(50))
    assert list(base.shuffled(7)) == list(a)


def test_sampler_with_and_without_replacement():
    base = InMemoryDataset(range(7))
    wo = SamplerDataset(base, 17, replacement=False, seed=3)
    items = list(wo)
    assert len(items) == 17
    # whole permutations first: every item once before any twice
    assert sorted(items[:7]) == list(range(7)) and sorted(items[7:14]) == list(range(7))
    assert len(set(items[14:])) == 3
    w = SamplerDataset(base, 200, replacement=True, seed=3)
    vals = list(w)
    assert set(vals) <= set(range(7)) and len(set(vals)) == 7
    counts = np.bincount(vals, minlength=7)
    assert counts.max() > counts.min()  # real repeats, not a cycled permutation
    assert list(SamplerDataset(base, 20, seed=9)) == list(SamplerDataset(base, 20, seed=9))
    assert list(SamplerDataset(base, 20, seed=9)) != list(SamplerDataset(base, 20, seed=10))
    assert len(SamplerDataset(base, 0)) == 0
    with pytest.raises(errors.ShapeError):
        SamplerDataset(InMemoryDataset([]), 3)
    with pytest.raises(errors.ShapeError):
        SamplerDataset(base, -1)


def test_windows():
    base = InMemoryDataset(range(7))
    w = WindowsDataset(base, 3)
    assert len(w) == 5 and w[0] == [0, 1, 2] and w[-1] == [4, 5, 6] and w.get(5) is None
    s = WindowsDataset(base, 3, step=2)
    assert list(s) == [[0, 1, 2], [2, 3, 4], [4, 5, 6]]
    assert len(WindowsDataset(base, 8)) == 0
    assert len(WindowsDataset(base, 7)) == 1
    with pytest.raises(errors.ShapeError):
        WindowsDataset(base, 0)


def test_composed():
    c = ComposedDataset([InMemoryDataset([1, 2]), InMemoryDataset([]), [3, 4, 5]])
    assert len(c) == 5 and list(c) == [1, 2, 3, 4, 5] and c[-3] == 3 and c.get(5) is None
    assert len(ComposedDataset([])) == 0


def test_transforms_read_from_many_threads():
    base = MapDataset(InMemoryDataset(range(1000)), lambda v: v * 2)
    ds = ShuffledDataset(ComposedDataset([base, base]), 1)
    out = [None] * 4

    def work(k):
        out[k] = [ds[i] for i in range(len(ds))]

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    assert all(o == out[0] for o in out) and sorted(out[0]) == sorted(2 * list(range(0, 2000, 2)))
