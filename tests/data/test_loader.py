"""DataLoader: batching, seeded shuffling, worker threads, prefetch, shutdown, errors."""
import gc
import threading
import time

import numpy as np
import pytest

import ember as em
from ember import errors
from ember.data import (DataLoader, Dataset, InMemoryDataset, MapDataset, TensorBatcher)


def run_with_timeout(fn, seconds=10.0):
    """Run fn in a thread; fail (instead of hanging the suite) if it does not finish."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"did not finish within {seconds} s (a hang)"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def worker_threads():
    return [t for t in threading.enumerate() if t.name.startswith("ember-data")]


def wait_no_workers(seconds=5.0):
    deadline = time.monotonic() + seconds
    while worker_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker_threads() == [], f"worker threads left: {worker_threads()}"


def wait_for(cond, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def ids(n):
    return InMemoryDataset.from_arrays(np.arange(n, dtype=np.int64))


def flat(batches):
    return [int(v) for b in batches for v in b.numpy()]


def test_len_and_sequential_order():
    loader = DataLoader(ids(10), TensorBatcher(), 3, shuffle=False)
    assert len(loader) == 4 and loader.num_items() == 10
    batches = list(loader)
    assert [tuple(b.shape) for b in batches] == [(3,), (3,), (3,), (1,)]
    assert flat(batches) == list(range(10))
    dl = DataLoader(ids(10), TensorBatcher(), 3, shuffle=False, drop_last=True)
    assert len(dl) == 3 and dl.num_items() == 9
    assert [tuple(b.shape) for b in dl] == [(3,)] * 3
    exact = DataLoader(ids(9), TensorBatcher(), 3, drop_last=True, seed=0)
    assert len(exact) == 3 and sorted(flat(exact)) == list(range(9))
    assert len(DataLoader(ids(0), TensorBatcher(), 4)) == 0
    assert list(DataLoader(ids(0), TensorBatcher(), 4, num_workers=2)) == []
    assert len(DataLoader(ids(2), TensorBatcher(), 4, drop_last=True)) == 0


def test_drop_last_with_shuffle_drops_the_tail_of_the_permutation():
    loader = DataLoader(ids(10), TensorBatcher(), 4, seed=5, drop_last=True)
    order = loader.order(0)
    got = flat(loader)
    assert got == [int(v) for v in order[:8]]


def test_seeded_shuffle_reproducible_and_per_epoch():
    a = DataLoader(ids(40), TensorBatcher(), 8, seed=123)
    b = DataLoader(ids(40), TensorBatcher(), 8, seed=123, num_workers=3)
    epochs_a = [flat(a) for _ in range(3)]
    epochs_b = [flat(b) for _ in range(3)]
    assert epochs_a == epochs_b                       # across runs and worker counts
    assert all(sorted(e) == list(range(40)) for e in epochs_a)
    assert epochs_a[0] != epochs_a[1] != epochs_a[2]  # a new order every epoch
    assert epochs_a[0] != list(range(40))
    # the epoch number mixes into the seed: an independent NumPy reference
    for e in range(3):
        ref = np.random.default_rng([123, e]).permutation(40)
        assert epochs_a[e] == list(ref)
    other = DataLoader(ids(40), TensorBatcher(), 8, seed=124)
    assert flat(other) != epochs_a[0]
    # set_epoch replays an epoch (resuming)
    assert a.epoch == 3
    a.set_epoch(1)
    assert flat(a) == epochs_a[1] and a.epoch == 2
    # no seed: a drawn one, reported, and reusable
    c = DataLoader(ids(40), TensorBatcher(), 8)
    first = flat(c)
    assert flat(DataLoader(ids(40), TensorBatcher(), 8, seed=c.seed)) == first
    assert DataLoader(ids(40), TensorBatcher(), 8, seed=-5).order(0).tolist() != first


def test_workers_keep_order_under_random_delays():
    rng = np.random.default_rng(0)
    delays = rng.uniform(0, 0.004, 64)

    def slow(v):
        time.sleep(delays[int(v)])
        return v

    ds = MapDataset(ids(64), slow)
    ref = flat(DataLoader(ds, TensorBatcher(), 5, seed=9))
    for workers, prefetch in ((1, 1), (4, None), (4, 2), (8, 16)):
        loader = DataLoader(ds, TensorBatcher(), 5, seed=9, num_workers=workers,
                            prefetch=prefetch)
        assert run_with_timeout(lambda: flat(loader)) == ref
    wait_no_workers()


def test_workers_run_in_parallel():
    """Four items can only be read if four threads read at once (a barrier)."""
    barrier = threading.Barrier(4, timeout=5)

    def meet(v):
        barrier.wait()
        return v

    loader = DataLoader(MapDataset(ids(8), meet), TensorBatcher(), 1, shuffle=False,
                        num_workers=4, prefetch=4)
    assert run_with_timeout(lambda: flat(loader)) == list(range(8))


class Counting(Dataset):
    def __init__(self, n):
        self.n = n
        self.reads = []
        self.lock = threading.Lock()

    def __len__(self):
        return self.n

    def get(self, i):
        with self.lock:
            self.reads.append(i)
        return np.int64(i)


def test_prefetch_is_bounded():
    ds = Counting(100)
    loader = DataLoader(ds, TensorBatcher(), 2, shuffle=False, num_workers=3, prefetch=4)
    it = iter(loader)
    first = next(it)
    # the batch handed out plus `prefetch` batches of 2 items are read, and no more
    wait_for(lambda: len(ds.reads) >= 2 * (1 + 4))
    time.sleep(0.1)
    assert len(ds.reads) == 2 * (1 + 4)
    assert flat([first]) == [0, 1]
    next(it)
    wait_for(lambda: len(ds.reads) >= 2 * (2 + 4))
    time.sleep(0.1)
    assert len(ds.reads) == 2 * (2 + 4)
    it.close()
    assert worker_threads() == []
    assert len(ds.reads) == 12                 # nothing more is read after close
    with pytest.raises(StopIteration):
        next(it)


def test_prefetch_without_workers_reads_lazily():
    ds = Counting(10)
    it = iter(DataLoader(ds, TensorBatcher(), 2, shuffle=False))
    next(it)
    assert sorted(ds.reads) == [0, 1]
    assert len(it) == 4


def test_early_stop_does_not_hang_and_stops_threads():
    def slow(v):
        time.sleep(0.01)
        return v

    ds = MapDataset(ids(400), slow)
    loader = DataLoader(ds, TensorBatcher(), 4, num_workers=4, prefetch=8, seed=1)

    def consume_some():
        for k, _ in enumerate(loader):
            if k == 2:
                break

    run_with_timeout(consume_some, 10)
    gc.collect()
    wait_no_workers()

    def drop_iterator():
        it = iter(loader)
        next(it)
        del it

    run_with_timeout(drop_iterator, 10)
    gc.collect()
    wait_no_workers()

    def with_block():
        with iter(loader) as it:
            next(it)

    run_with_timeout(with_block, 10)
    assert worker_threads() == []


def test_worker_exception_reraised_with_item_index():
    def boom(v):
        if int(v) == 13:
            raise ValueError("bad record")
        return v

    for workers in (0, 3):
        loader = DataLoader(MapDataset(ids(30), boom), TensorBatcher(), 4, shuffle=False,
                            num_workers=workers)
        seen = []

        def consume():
            for b in loader:
                seen.append(flat([b]))

        with pytest.raises(ValueError, match="bad record") as e:
            run_with_timeout(consume, 10)
        assert seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]   # earlier batches arrive
        notes = getattr(e.value, "__notes__", [])
        assert any("while reading item 13" in n and "batch 3" in n for n in notes), notes
        wait_no_workers()


def test_exception_closes_iterator():
    class Bad(Dataset):
        def __len__(self):
            return 8

        def get(self, i):
            if i == 5:
                raise errors.DatasetError("file x.csv: row 5 is bad")
            return np.int64(i)

    it = iter(DataLoader(Bad(), TensorBatcher(), 2, shuffle=False, num_workers=2))
    assert flat([next(it), next(it)]) == [0, 1, 2, 3]
    with pytest.raises(errors.DatasetError, match="row 5") as e:
        next(it)
    assert any("item 5" in n for n in e.value.__notes__)
    with pytest.raises(StopIteration):
        next(it)
    assert worker_threads() == []


def test_batcher_exception_names_items():
    def bad_batch(items, device):
        raise RuntimeError("cannot batch")

    loader = DataLoader(ids(6), bad_batch, 3, shuffle=False, num_workers=2)
    with pytest.raises(RuntimeError, match="cannot batch") as e:
        run_with_timeout(lambda: list(loader))
    assert any("while batching items [0, 1, 2]" in n for n in e.value.__notes__)


def test_batcher_forms_and_validation():
    def fn(items, device):
        return ("batch", [int(i) for i in items], device)

    dev = em.device("cpu")
    out = list(DataLoader(ids(3), fn, 2, shuffle=False, device=dev))
    assert out == [("batch", [0, 1], dev), ("batch", [2], dev)]

    class Proto:
        def batch(self, items, device):
            return len(items)

    assert list(DataLoader(ids(5), Proto(), 2, shuffle=False)) == [2, 2, 1]
    assert isinstance(Proto(), em.data.Batcher)
    with pytest.raises(errors.DTypeError, match="batcher must"):
        DataLoader(ids(3), 42, 2)
    with pytest.raises(errors.ShapeError, match="batch_size must be >= 1"):
        DataLoader(ids(3), TensorBatcher(), 0)
    with pytest.raises(errors.ShapeError, match="num_workers"):
        DataLoader(ids(3), TensorBatcher(), 1, num_workers=-1)
    with pytest.raises(errors.ShapeError, match="prefetch"):
        DataLoader(ids(3), TensorBatcher(), 1, num_workers=1, prefetch=0)
    with pytest.raises(errors.DTypeError, match="seed"):
        DataLoader(ids(3), TensorBatcher(), 1, seed=1.5)
    # a plain list is a dataset; no batcher means TensorBatcher
    assert flat(DataLoader([np.int64(4), np.int64(5)], None, 2, shuffle=False)) == [4, 5]


def test_device_placement_from_worker_threads():
    ad = em.device("cpu").autodiff()
    loader = DataLoader(ids(8), TensorBatcher(), 4, num_workers=2, device=ad, seed=0)
    assert all(b.device == ad for b in loader)
    # device=None: the default device of the thread that iterates, even in workers
    em.set_default_device(ad)
    try:
        plain = DataLoader(ids(8), TensorBatcher(), 4, num_workers=2, seed=0)
        assert all(b.device == ad for b in plain)
    finally:
        em.set_default_device(None)
    moved = loader.to_device("cpu")
    assert moved.seed == loader.seed and moved.epoch == loader.epoch
    assert all(b.device == em.device("cpu") for b in moved)


def test_two_iterators_at_once():
    loader = DataLoader(ids(12), TensorBatcher(), 3, seed=2, num_workers=2)
    it0, it1 = iter(loader), iter(loader)
    a = flat(list(it0))
    b = flat(list(it1))
    assert a == list(loader.order(0)) and b == list(loader.order(1)) and a != b
    wait_no_workers()
