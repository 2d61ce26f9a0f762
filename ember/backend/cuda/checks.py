"""Index checks that do not stop the host: found on the device, raised at the next read.

An op that indexes with values it cannot see on the host (embedding, gather, index_select,
one_hot, cross-entropy targets) must not read them back to check them: that read waits for
every queued kernel, and a training step with one (a GPT's embeddings: four a step) loses
the overlap of host and GPU at each. Instead the op queues a check kernel on its stream: the
first out-of-range value found goes into this thread's error word on the device, with a code
naming the op's message. The op runs with the value wrapped (CuPy's indexing: no access out
of bounds), and the error is raised as `ember.errors.IndexError` at the first point where a
value of that device reaches the host or another library on this thread (`Cuda.to_numpy`,
`native`, DLPack, ``__cuda_array_interface__``) or at `em.sync`, before anything is read. So
no wrong value is ever observed; the error names the op, the index and the valid range, as
the NumPy path's does, and says where it was found.

Each thread keeps its own word per device (its kernels run on its own stream, so a read on
that stream sees them). A thread that queues `MAX_PENDING` checks without a read has its
word read then (one synchronization per that many checks).
"""
from __future__ import annotations

import threading

import numpy as np

from ...errors import IndexError_
from .ops import _Kernels

__all__ = ["CHECK_SOURCE", "DeferredChecks", "check_kernel_names", "MAX_PENDING"]

#: checks a thread may queue before its error word is read anyway
MAX_PENDING = 4096
_BLOCK = 256
_GRID_CAP = 1024

#: ember's int dtypes (they fit a long long)
_INDEX_TYPES = {"i8": "signed char", "i16": "short", "i32": "int", "i64": "long long",
                "u8": "unsigned char"}
_NAMES = {np.dtype(("int" if k[0] == "i" else "uint") + k[1:]): k for k in _INDEX_TYPES}

CHECK_SOURCE = r"""
template <typename I>
__device__ __forceinline__ void ember_check_range(
    const I* __restrict__ idx, unsigned long long* word, long long n, long long size,
    long long code, long long ignore, long long has_ignore) {
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    const long long v = (long long)idx[i];
    if (has_ignore && v == ignore) continue;
    if (v < 0 || v >= size) {
      if (atomicCAS(word, 0ULL, (unsigned long long)code) == 0ULL)
        word[1] = (unsigned long long)v;
      return;
    }
  }
}
#define EMBER_CHECK(TN, T)                                                                 \
  extern "C" __global__ void ember_check_range_##TN(                                      \
      const T* idx, unsigned long long* word, long long n, long long size, long long code, \
      long long ignore, long long has_ignore) {                                           \
    ember_check_range<T>(idx, word, n, size, code, ignore, has_ignore);                  \
  }
""" + "".join(f"EMBER_CHECK({k}, {t})\n" for k, t in _INDEX_TYPES.items())


def check_kernel_names() -> list[str]:
    return [f"ember_check_range_{k}" for k in _INDEX_TYPES]


class _Word:
    """One thread's error word on one device, and the messages its codes stand for."""

    __slots__ = ("array", "messages")

    def __init__(self, array):
        self.array = array          # uint64[2]: code (0: nothing found), the value found
        self.messages = []          # code - 1 -> message(value) -> str


class DeferredChecks:
    """The Cuda backend's index checks (the ``defer_index_check`` of its op namespace)."""

    def __init__(self, cp):
        self.cp = cp
        self._kernels = _Kernels(cp, CHECK_SOURCE)
        self._tls = threading.local()

    def _word(self, index: int) -> _Word:
        w = self._tls.__dict__.get(index)
        if w is None:
            w = self._tls.__dict__[index] = _Word(self.cp.zeros(2, np.uint64))
        return w

    def __call__(self, idx, size: int, message, ignore=None) -> None:
        """Queue a check of ``idx`` (a CuPy int array on the current device and stream)
        against ``[0, size)`` (``ignore``: a value let through); ``message(value)`` is the
        error's text for an offending value."""
        n = idx.size
        if not n:
            return
        w = self._word(self.cp.cuda.runtime.getDevice())
        if len(w.messages) >= MAX_PENDING:
            self._raise_found(w)
        name = _NAMES.get(idx.dtype)
        if name is None:
            raise TypeError(f"index check: {idx.dtype} is not an int dtype")
        idx = self.cp.ascontiguousarray(idx)
        w.messages.append(message)
        grid = min(-(-n // _BLOCK), _GRID_CAP)
        self._kernels.launch(f"ember_check_range_{name}", grid, _BLOCK, (idx, w.array),
                             (n, size, len(w.messages), 0 if ignore is None else int(ignore),
                              0 if ignore is None else 1))

    def pending(self, index: int) -> bool:
        """Whether this thread has checks on device ``index`` not yet read."""
        w = self._tls.__dict__.get(index)
        return w is not None and bool(w.messages)

    def raise_found(self, index: int) -> None:
        """Raise the first error this thread's checks on device ``index`` found (reads the
        word on the current stream, which must be this thread's there); nothing pending:
        no read."""
        w = self._tls.__dict__.get(index)
        if w is not None and w.messages:
            self._raise_found(w)

    def _raise_found(self, w: _Word) -> None:
        code, value = (int(v) for v in w.array.get())
        messages, w.messages = w.messages, []
        if code:
            w.array.fill(0)
            value = value - (1 << 64) if value >= 1 << 63 else value
            dev = self.cp.cuda.runtime.getDevice()
            raise IndexError_(f"{messages[code - 1](value)} (found on cuda:{dev} by a check "
                              f"queued on the device; raised at the first read after it)")
