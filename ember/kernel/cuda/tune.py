"""Autotune of CUDA kernels: the launch variants and their timing, on the shared autotune
store (`ember.kernel.autotune`: the same SQLite file, key scheme and policy).

A `CudaVariant` is ``block`` (threads per block), ``vec`` (elementwise elements per thread
and step, in chunks of one vector access), ``ept`` (elementwise steps per thread: the grid
size; 0 or 1: one step each, a grid that covers the array), ``tpr`` (row reductions: threads
per output) and ``by`` (column reductions: threads per output); 0 means the renderer's
default. ``ept`` is a launch choice; the others are compile-time (another NVRTC compile,
cached like any kernel).

Tuning is synchronous, on a key's second launch (the first runs the default variant:
``EMBER_AUTOTUNE_AFTER``, as for C kernels), within ``EMBER_AUTOTUNE_BUDGET`` (compiles
included), for kernels of at least ``EMBER_CUDA_AUTOTUNE_MIN_WORK`` elements (default
2**20); it times each candidate with CUDA events on the current stream (so that launch
synchronizes once). Candidates go by coordinate descent; a candidate must be 3% faster to
win, and one displacing a winner other than the default is timed against it again in the
order a b b a (the shared tuner's `_duel`) before it takes its place. The winner is stored under ``cuda|<structure>|<shape bucket>|<device>|v1``.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass

from ..autotune import Autotuner, enabled_by_env

__all__ = ["CudaVariant", "CudaTuner", "DEFAULT", "min_work"]


@dataclass(frozen=True, slots=True)
class CudaVariant:
    block: int = 0
    vec: int = 0
    ept: int = 0
    tpr: int = 0
    by: int = 0
    idx64: bool = False      # force 64-bit indexing (tests of that path; never tuned)

    def to_json(self) -> str:
        return json.dumps({"cuda": asdict(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, s: str) -> "CudaVariant":
        d = json.loads(s)["cuda"]
        v = cls(**{k: int(d[k]) for k in ("block", "vec", "ept", "tpr", "by") if k in d})
        return cls(v.block, v.vec, v.ept, v.tpr, v.by, bool(d.get("idx64", False)))

    @property
    def compile_options(self) -> tuple:
        return (self.block, self.vec, self.tpr, self.by, self.idx64)


DEFAULT = CudaVariant()


def min_work() -> int:
    try:
        return int(os.environ.get("EMBER_CUDA_AUTOTUNE_MIN_WORK", str(1 << 20)))
    except ValueError:
        return 1 << 20


class CudaTuner(Autotuner):
    """The autotuner with CUDA variants: the stored JSON decodes as a `CudaVariant`, and
    candidates are timed by ``run(variant) -> seconds`` (CUDA events), not the host clock."""

    def choose(self, key, axes, run, default=None):
        return super().choose(key, axes, run, DEFAULT if default is None else default)

    def machine_busy(self) -> bool:
        """CUDA candidates are timed on the GPU (events): the host's load does not decide."""
        return False

    def _db_get(self, key):
        s = self._db_get_text(key)
        if s is None:
            return None
        try:
            return CudaVariant.from_json(s)
        except (ValueError, TypeError, KeyError):
            return None

    def _db_get_text(self, key):
        import sqlite3
        with self._db_lock:
            c = self._conn()
            if c is None:
                return None
            try:
                row = c.execute("SELECT variant FROM tune WHERE key = ?", (key,)).fetchone()
            except sqlite3.Error:
                self.stats["db_errors"] += 1
                return None
        return None if row is None else row[0]

    #: alternating re-measurements of the descent's winner and the default (each side)
    CONFIRM = 3

    def _time(self, run, v, reps):
        """The best of ``reps`` GPU timings (``run`` warms up and times with events)."""
        self.stats["benchmarks"] += 1
        return min(run(v) for _ in range(reps))

    def _tune(self, axes, run, default):
        deadline = time.perf_counter() + self.budget_s
        t_def = run(default)
        self.stats["benchmarks"] += 1
        best, best_t = default, t_def
        for field, values in axes:
            for val in values:
                if time.perf_counter() > deadline:
                    break
                cand = CudaVariant(**{**asdict(best), field: val})
                if cand == best:
                    continue
                try:
                    t = run(cand)
                except Exception:      # a variant that cannot be built or run is skipped
                    continue
                self.stats["benchmarks"] += 1
                if t < best_t * 0.97:
                    if best == default:
                        best, best_t = cand, t          # (`_confirm` re-times the default)
                        continue
                    t_best, t = self._duel(run, best, cand, 1)
                    if t < t_best * 0.97:
                        best, best_t = cand, t
                    else:
                        best_t = t_best
        if best != default:
            best, best_t, t_def = self._confirm(run, best, default)
        return best, best_t, t_def

    def _confirm(self, run, best, default):
        """``(winner, its seconds, the default's)``: ``best`` and ``default`` timed in turn
        `CONFIRM` times each, the lower median winning (by 3%, as in the descent). One timing
        each decided the descent, and the first ones run on a GPU still at boost clocks, or
        with the default's lazy setup in them (the likely cause of an H200 run whose GELU over
        2^28 f32 ran at 92% of the copy bandwidth, where the runs before it ran at 97%)."""
        tb, td = [], []
        for _ in range(self.CONFIRM):
            td.append(run(default))
            tb.append(run(best))
        self.stats["benchmarks"] += 2 * self.CONFIRM
        mb, md = sorted(tb)[len(tb) // 2], sorted(td)[len(td) // 2]
        return (best, mb, md) if mb < md * 0.97 else (default, md, md)


_TUNERS: dict = {}


def get_tuner(cache_root=None) -> CudaTuner:
    k = (str(cache_root) if cache_root is not None else os.environ.get("EMBER_CACHE_DIR"),
         os.environ.get("XDG_CACHE_HOME"), enabled_by_env())
    t = _TUNERS.get(k)
    if t is None:
        t = _TUNERS[k] = CudaTuner(cache_root=cache_root)
    return t
