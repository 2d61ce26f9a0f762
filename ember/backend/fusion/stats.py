"""Fusion counters (`em.fusion.stats()`) and the plan log (``EMBER_FUSION_LOG=1``)."""
from __future__ import annotations

import os
import sys
import threading

_lock = threading.Lock()
_FIELDS = ("kernels", "inner_ops", "recorded_ops", "flushes", "plan_cache_hits",
           "plan_cache_misses", "compiles", "compile_time_s", "plan_time_s",
           "buffers_reused")
_counts = dict.fromkeys(_FIELDS, 0)
_counts["compile_time_s"] = 0.0
_counts["plan_time_s"] = 0.0


def add(field: str, n=1) -> None:
    with _lock:
        _counts[field] += n


def stats() -> dict:
    """Counters since the process started (or the last `reset_stats`):

    * ``kernels``: generated kernels launched;
    * ``inner_ops``: ops that ran on the inner backend instead (ops fusion cannot hold:
      matmul, conv, sort, indexing ..., and everything when no kernel runtime is available);
    * ``recorded_ops``: ops recorded lazily; ``flushes``: times a stream was planned;
    * ``plan_cache_hits`` / ``plan_cache_misses``: flushes that reused a cached plan (and its
      compiled kernels) / that had to plan;
    * ``compiles``, ``compile_time_s``: kernels compiled (memory and disk caches included)
      and the time spent; ``plan_time_s``: time spent planning on misses;
    * ``buffers_reused``: kernel outputs written in place into an input buffer nothing else
      held any more.
    """
    with _lock:
        return dict(_counts)


def reset_stats() -> None:
    with _lock:
        for k in _FIELDS:
            _counts[k] = 0.0 if k.endswith("_s") else 0


def log_enabled() -> bool:
    return os.environ.get("EMBER_FUSION_LOG", "") not in ("", "0")


def log(text: str) -> None:
    print(f"[ember.fusion] {text}", file=sys.stderr, flush=True)
