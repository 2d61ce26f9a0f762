"""Fusion counters (`em.fusion.stats()`) and the plan log (``EMBER_FUSION_LOG=1``).

Counting is on the hot path of every op, so each thread counts into its own `Counts` without
a lock (`counts()`); `stats()` sums the threads' counters, and those of finished threads.
"""
from __future__ import annotations

import os
import sys
import threading
import weakref

_FIELDS = ("kernels", "inner_ops", "eager_ops", "recorded_ops", "flushes", "plan_cache_hits",
           "plan_cache_misses", "compiles", "compile_time_s", "plan_time_s",
           "buffers_reused")


class Counts:
    """One thread's counters (plain attributes: ``counts().kernels += 1``)."""
    __slots__ = _FIELDS

    def __init__(self):
        self.zero()

    def zero(self):
        for k in _FIELDS:
            setattr(self, k, 0.0 if k.endswith("_s") else 0)


#: the per-op counters, bumped without a lock or a thread lookup (``OP_COUNTS[EAGER] +=
#: 1``; several threads running ops at once may lose a count): ``eager_ops``, ``inner_ops``
#: and views of ready values (not reported); `REPLAY` marks, in the Fusion backend's
#: per-op decisions, a small primitive run as its replayed decomposition (counted as
#: ``inner_ops`` when it cannot be), and `PROBE` a small elementwise op that runs as its
#: one-op kernel where that measured faster (``eager_ops`` when it runs on the inner backend),
#: and `KERNEL` an op that runs as kernels Fusion builds for it (max pooling, cross-entropy:
#: `pooling.py`, `cross_entropy.py`) where it can (``inner_ops`` where it cannot). The
#: verdicts that run an op at once on the inner backend come first: Fusion's hot path tests
#: ``how < REPLAY``
EAGER, INNER, VIEW_OP, REPLAY, PROBE, KERNEL = 1, 2, 3, 4, 5, 6
OP_COUNTS = [0] * (KERNEL + 1)

_lock = threading.Lock()
_live = set()              # the Counts of running threads
_retired = Counts()        # the sum over finished threads
_local = threading.local()


class _Holder:
    """Lives in one thread's locals: when the thread ends, its counts are folded into
    ``_retired``."""
    __slots__ = ("c", "__weakref__")


def _retire(c):
    with _lock:
        _live.discard(c)
        for k in _FIELDS:
            setattr(_retired, k, getattr(_retired, k) + getattr(c, k))


def counts() -> Counts:
    """This thread's counters."""
    try:
        return _local.h.c
    except AttributeError:
        h = _Holder()
        h.c = c = Counts()
        with _lock:
            _live.add(c)
        weakref.finalize(h, _retire, c)
        _local.h = h
        return c


def add(field: str, n=1) -> None:
    c = counts()
    setattr(c, field, getattr(c, field) + n)


def stats() -> dict:
    """Counters since the process started (or the last `reset_stats`), over all threads:

    * ``kernels``: generated kernels launched;
    * ``inner_ops``: ops that ran on the inner backend instead (ops fusion cannot hold:
      matmul, conv, sort, indexing ..., and everything when no kernel runtime is available);
    * ``eager_ops``: fusable ops run at once on the inner backend, where a kernel would not
      pay (small tensors, a single op, an input laid out other than row-major: see
      ``Fusion(min_numel=...)`` and docs/fusion.md);
    * ``recorded_ops``: ops recorded lazily (counted when their stream part is flushed or
      dropped); ``flushes``: times a stream part was planned or replayed;
    * ``plan_cache_hits`` / ``plan_cache_misses``: flushes that reused a cached plan (and its
      compiled kernels) / that had to plan;
    * ``compiles``, ``compile_time_s``: kernels compiled (memory and disk caches included)
      and the time spent; ``plan_time_s``: time spent planning on misses;
    * ``buffers_reused``: kernel outputs written in place into an input buffer nothing else
      held any more.
    """
    with _lock:
        every = list(_live) + [_retired]
    out = {k: sum(getattr(c, k) for c in every) for k in _FIELDS}
    out["eager_ops"] += OP_COUNTS[EAGER]
    out["inner_ops"] += OP_COUNTS[INNER]
    return out


def reset_stats() -> None:
    with _lock:
        for c in list(_live) + [_retired]:
            c.zero()
        OP_COUNTS[:] = [0] * len(OP_COUNTS)


def log_enabled() -> bool:
    return os.environ.get("EMBER_FUSION_LOG", "") not in ("", "0")


def log(text: str) -> None:
    print(f"[ember.fusion] {text}", file=sys.stderr, flush=True)
