"""`DataLoader`: batches of a dataset, built by a `Batcher` on a device, in seeded order,
optionally by worker threads that prefetch ahead of the training loop."""
from __future__ import annotations

import math
import operator
import secrets
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from ..dtype import as_dtype
from ..errors import DTypeError, ShapeError
from .dataset import Dataset, as_dataset

__all__ = ["Batcher", "DataLoader", "TensorBatcher", "ClassificationBatcher",
           "ClassificationBatch"]

THREAD_PREFIX = "ember-data"


@runtime_checkable
class Batcher(Protocol):
    """Turns a list of items into one batch on a device (Burn's ``Batcher``). A plain
    function ``fn(items, device) -> batch`` works as well."""

    def batch(self, items: list, device) -> Any: ...


def _batch_fn(batcher):
    if batcher is None:
        return TensorBatcher().batch
    fn = getattr(batcher, "batch", None)
    if callable(fn):
        return fn
    if callable(batcher):
        return batcher
    raise DTypeError(f"DataLoader: batcher must have a batch(items, device) method or be a "
                     f"function (items, device) -> batch, got {type(batcher).__name__}")


def _resolve_device(device):
    import ember as em
    if device is None:
        return em.default_device()
    if isinstance(device, str):
        return em.device(device)
    return device


def _positive(name: str, v, minimum: int) -> int:
    try:
        v = operator.index(v)
    except TypeError:
        raise DTypeError(f"DataLoader: {name} must be an int, got {type(v).__name__} "
                         f"{v!r}") from None
    if v < minimum:
        raise ShapeError(f"DataLoader: {name} must be >= {minimum}, got {v}")
    return v


class DataLoader:
    """Iterates over ``dataset`` in batches of ``batch_size`` items, each batch made by
    ``batcher.batch(items, device)`` (or ``batcher(items, device)``).

    - ``shuffle``: a new order every epoch, from ``seed`` mixed with the epoch number, so a
      run is reproducible and epochs differ; ``seed=None`` draws a seed once (``loader.seed``
      tells it). Each ``iter(loader)`` is the next epoch; ``set_epoch(n)`` chooses it (for
      resuming). Without shuffling items come in dataset order.
    - ``num_workers > 0``: that many threads read items and build batches, up to
      ``prefetch`` batches (default ``2 * num_workers``) ahead of the one the loop holds;
      batches still come in order. An exception in a worker is raised in the loop with a note
      naming the item index (its type is kept, e.g. `DatasetError`). Breaking out of the loop,
      dropping the iterator, or ``it.close()`` stops the threads.
    - ``drop_last``: leave out a last batch smaller than ``batch_size``.
    - ``len(loader)`` is the number of batches; ``loader.num_items()`` the number of items.

    ``device`` (None: the calling thread's default device when iteration starts) is where
    batches are made."""

    def __init__(self, dataset, batcher=None, batch_size: int = 1, *, shuffle: bool = True,
                 seed: int | None = None, num_workers: int = 0, prefetch: int | None = None,
                 drop_last: bool = False, device=None):
        self.dataset: Dataset = as_dataset(dataset)
        self.batcher = batcher
        self._batch = _batch_fn(batcher)
        self.batch_size = _positive("batch_size", batch_size, 1)
        self.shuffle = bool(shuffle)
        if seed is None:
            seed = secrets.randbits(63)
        else:
            try:
                seed = operator.index(seed)
            except TypeError:
                raise DTypeError(f"DataLoader: seed must be an int or None, got "
                                 f"{type(seed).__name__} {seed!r}") from None
        self.seed = seed
        self.num_workers = _positive("num_workers", num_workers, 0)
        self.prefetch = (2 * self.num_workers if prefetch is None
                         else _positive("prefetch", prefetch, 1))
        self.drop_last = bool(drop_last)
        self.device = device
        self._epoch = 0
        self._lock = threading.Lock()

    # -- sizes -----------------------------------------------------------------------------
    def num_items(self) -> int:
        """Items per epoch (without the dropped remainder)."""
        n = len(self.dataset)
        return (n // self.batch_size) * self.batch_size if self.drop_last else n

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    # -- epochs ----------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch the next ``iter(loader)`` runs (0 first)."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        self._epoch = _positive("epoch", epoch, 0)

    def order(self, epoch: int | None = None) -> np.ndarray:
        """The item indices of one epoch, in the order they are batched."""
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        e = self._epoch if epoch is None else _positive("epoch", epoch, 0)
        rng = np.random.default_rng([self.seed & 0xFFFF_FFFF_FFFF_FFFF, e])
        return rng.permutation(n)

    def to_device(self, device) -> "DataLoader":
        """The same loader (dataset, batcher, seed, epoch) making batches on ``device``."""
        out = DataLoader(self.dataset, self.batcher, self.batch_size, shuffle=self.shuffle,
                         seed=self.seed, num_workers=self.num_workers, prefetch=self.prefetch,
                         drop_last=self.drop_last, device=device)
        out._epoch = self._epoch
        return out

    def __iter__(self) -> "_LoaderIterator":
        with self._lock:
            epoch = self._epoch
            self._epoch += 1
        order = self.order(epoch)
        bs = self.batch_size
        stop = len(self) * bs if self.drop_last else len(order)
        batches = [order[s:min(s + bs, stop)] for s in range(0, stop, bs)]
        return _LoaderIterator(self.dataset, self._batch, batches,
                               _resolve_device(self.device), epoch, self.num_workers,
                               self.prefetch)

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"DataLoader({self.dataset!r}, batch_size={self.batch_size}, "
                f"batches={len(self)}, shuffle={self.shuffle}, seed={self.seed}, "
                f"num_workers={self.num_workers}, prefetch={self.prefetch}, "
                f"drop_last={self.drop_last})")


def _build(dataset, batch_fn, indices, device, batch_no, epoch, stop):
    """Read the items of one batch and batch them. Runs in a worker thread (or inline)."""
    items = []
    for i in indices:
        if stop is not None and stop.is_set():
            return None
        i = int(i)
        try:
            items.append(dataset.get(i))
        except BaseException as e:
            e.add_note(f"DataLoader: while reading item {i} of {dataset!r} (batch {batch_no}"
                       f", epoch {epoch})")
            raise
    try:
        return batch_fn(items, device)
    except BaseException as e:
        shown = [int(i) for i in indices[:8]]
        more = ", ..." if len(indices) > 8 else ""
        e.add_note(f"DataLoader: while batching items {shown}{more} (batch {batch_no}, "
                   f"epoch {epoch})")
        raise


class _LoaderIterator:
    """One epoch of a `DataLoader`. Worker threads never hold a reference to this object,
    so dropping it (or ``close()``) cancels queued batches and joins the threads."""

    def __init__(self, dataset, batch_fn, batches, device, epoch, num_workers, prefetch):
        self._dataset = dataset
        self._batch_fn = batch_fn
        self._batches = batches
        self._device = device
        self.epoch = epoch
        self._pos = 0          # the next batch handed out
        self._submitted = 0    # batches given to workers
        self._pending: deque = deque()
        self._prefetch = prefetch
        self._closed = False
        self._stop = None
        self._pool = None
        if num_workers > 0 and batches:
            self._stop = threading.Event()
            self._pool = ThreadPoolExecutor(max_workers=num_workers,
                                            thread_name_prefix=THREAD_PREFIX)

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._batches) - self._pos

    def _fill(self) -> None:
        while (len(self._pending) < self._prefetch
               and self._submitted < len(self._batches)):
            k = self._submitted
            self._pending.append(self._pool.submit(
                _build, self._dataset, self._batch_fn, self._batches[k], self._device, k,
                self.epoch, self._stop))
            self._submitted += 1

    def __next__(self):
        if self._closed or self._pos >= len(self._batches):
            self.close()
            raise StopIteration
        k = self._pos
        if self._pool is None:
            try:
                out = _build(self._dataset, self._batch_fn, self._batches[k], self._device,
                             k, self.epoch, None)
            except BaseException:
                self.close()
                raise
            self._pos += 1
            return out
        self._fill()
        future = self._pending.popleft()
        try:
            out = future.result()
        except BaseException:
            self.close()
            raise
        self._pos += 1
        self._fill()  # keep the workers busy while the loop uses this batch
        return out

    def close(self) -> None:
        """Stop: cancel queued batches, let running ones notice, join the threads."""
        if self._closed:
            return
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            self._stop.set()
            for f in self._pending:
                f.cancel()
            self._pending.clear()
            # the garbage collector may drop this iterator in one of its own workers, which
            # cannot join itself; the others still stop
            own = threading.current_thread() in getattr(pool, "_threads", ())
            pool.shutdown(wait=not own, cancel_futures=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# -- batchers ------------------------------------------------------------------------------
def _leaf_tensor(em, values: list, dtype, device, where: str):
    first = values[0]
    if isinstance(first, em.Tensor):
        shapes = {tuple(v.shape) for v in values}
        if len(shapes) > 1:
            raise ShapeError(f"TensorBatcher: {where} tensors of different shapes "
                             f"{sorted(shapes)[:4]} cannot be stacked")
        out = em.stack([v.to_device(device) for v in values], 0)
        return out.cast(dtype) if dtype is not None else out
    if isinstance(first, (bool, int, float)) and not isinstance(first, np.generic):
        return em.tensor(values, dtype=dtype, device=device)
    arrs = [np.asarray(v) for v in values]
    shape = arrs[0].shape
    for k, a in enumerate(arrs):
        if a.shape != shape:
            raise ShapeError(f"TensorBatcher: {where} item {k} has shape {list(a.shape)} but "
                             f"item 0 has {list(shape)}; items of one batch must have the "
                             f"same shape")
    stacked = np.stack(arrs)
    if stacked.dtype == object:
        raise DTypeError(f"TensorBatcher: {where} values of type {type(first).__name__} "
                         f"cannot be made into a tensor")
    return em.tensor(stacked, dtype=dtype, device=device)


class TensorBatcher:
    """Stacks items into tensors along a new first dim. An item is an array (NumPy, a
    number, an ember Tensor), or a tuple/list/dict of them: the batch has the same structure,
    each field a tensor ``[batch, *field shape]``. NumPy arrays keep their dtype, Python
    floats become f32 and ints i64 (as in `em.tensor`); ``dtype`` casts: one dtype for every
    field, or a tuple/dict of dtypes (None keeps) matching the items."""

    __slots__ = ("dtype",)

    def __init__(self, dtype=None):
        self.dtype = dtype

    def _dtype_for(self, key):
        d = self.dtype
        if isinstance(d, dict):
            return d.get(key)
        if isinstance(d, (tuple, list)):
            return d[key] if key is not None and key < len(d) else None
        return d

    def batch(self, items: list, device):
        import ember as em
        if not items:
            raise ShapeError("TensorBatcher: cannot batch zero items")
        first = items[0]
        if isinstance(first, dict):
            keys = list(first)
            for k, it in enumerate(items):
                if not isinstance(it, dict) or list(it) != keys:
                    raise ShapeError(f"TensorBatcher: item {k} has fields "
                                     f"{list(it) if isinstance(it, dict) else type(it).__name__}"
                                     f"; item 0 has {keys}")
            return {key: _leaf_tensor(em, [it[key] for it in items], self._dtype_for(key),
                                      device, f"field {key!r}:") for key in keys}
        if isinstance(first, (tuple, list)) and not _is_scalar_list(first):
            n = len(first)
            for k, it in enumerate(items):
                if len(it) != n:
                    raise ShapeError(f"TensorBatcher: item {k} has {len(it)} fields; item 0 "
                                     f"has {n}")
            out = [_leaf_tensor(em, [it[j] for it in items], self._dtype_for(j), device,
                                f"field {j}:") for j in range(n)]
            if hasattr(first, "_fields"):  # a NamedTuple keeps its type
                return type(first)(*out)
            return tuple(out)
        return _leaf_tensor(em, list(items), self._dtype_for(None), device, "")


def _is_scalar_list(x) -> bool:
    return isinstance(x, list) and all(isinstance(v, (int, float, bool)) for v in x) and \
        bool(x)


class ClassificationBatch(NamedTuple):
    """``images`` (float tensor ``[batch, ...]``) and ``targets`` (i64 tensor ``[batch]``)."""
    images: Any
    targets: Any


class ClassificationBatcher:
    """Batches ``(image, label)`` items (or dicts with ``image_key`` and ``label_key``) into
    a `ClassificationBatch`: images stacked as ``dtype`` (f32), optionally scaled
    (``x * scale``), normalized (``(x - mean) / std``, per channel when sequences are given),
    made channels-first (``[B, H, W, C] -> [B, C, H, W]``; ``[B, H, W] -> [B, 1, H, W]``), or
    flattened to ``[B, features]``; labels as an i64 tensor ``[B]``. The work is done in NumPy,
    in the loader's worker threads, and each batch is moved to the device once."""

    __slots__ = ("scale", "mean", "std", "channels_first", "flatten", "dtype", "image_key",
                 "label_key")

    def __init__(self, *, scale: float | None = None, mean=None, std=None,
                 channels_first: bool = False, flatten: bool = False, dtype=None,
                 image_key: str = "image", label_key: str = "label"):
        if channels_first and flatten:
            raise ShapeError("ClassificationBatcher: choose channels_first or flatten, not "
                             "both")
        self.scale = scale
        self.mean = None if mean is None else np.asarray(mean, dtype=np.float64)
        self.std = None if std is None else np.asarray(std, dtype=np.float64)
        self.channels_first = channels_first
        self.flatten = flatten
        self.dtype = dtype
        self.image_key = image_key
        self.label_key = label_key

    def batch(self, items: list, device) -> ClassificationBatch:
        import ember as em
        if not items:
            raise ShapeError("ClassificationBatcher: cannot batch zero items")
        images, labels = [], []
        for k, it in enumerate(items):
            if isinstance(it, dict):
                try:
                    img, lab = it[self.image_key], it[self.label_key]
                except KeyError as e:
                    raise ShapeError(f"ClassificationBatcher: item {k} has no field {e}; it "
                                     f"has {list(it)} (set image_key/label_key)") from None
            else:
                try:
                    img, lab = it
                except (TypeError, ValueError):
                    raise ShapeError(f"ClassificationBatcher: item {k} is a "
                                     f"{type(it).__name__}; expected (image, label) or a "
                                     f"dict") from None
            images.append(np.asarray(img))
            labels.append(lab)
        shape = images[0].shape
        for k, a in enumerate(images):
            if a.shape != shape:
                raise ShapeError(f"ClassificationBatcher: image {k} has shape {list(a.shape)} "
                                 f"but image 0 has {list(shape)}; resize images to one size")
        d = as_dtype(self.dtype) if self.dtype is not None else em.f32
        x = np.stack(images).astype(np.float32 if d.np.itemsize <= 4 else np.float64)
        if self.scale is not None:
            x = x * x.dtype.type(self.scale)
        if self.mean is not None:
            x = x - self.mean.astype(x.dtype)
        if self.std is not None:
            x = x / self.std.astype(x.dtype)
        if self.channels_first:
            x = x[:, None] if x.ndim == 3 else np.moveaxis(x, -1, 1)
        elif self.flatten:
            x = x.reshape(x.shape[0], -1)
        y = np.asarray(labels)
        if y.dtype.kind not in "iub" or y.ndim != 1:
            raise DTypeError(f"ClassificationBatcher: labels must be integers, one per item; "
                             f"got {y.dtype} of shape {list(y.shape)}")
        return ClassificationBatch(em.tensor(np.ascontiguousarray(x), dtype=d, device=device),
                                   em.tensor(y.astype(np.int64), device=device))
