"""Autotune: pick the fastest launch variant of a kernel, once per machine, kept in SQLite.

A *variant* is how a kernel runs: OpenMP threads, the work-item size (``chunk``), 32-bit
loop indices, an unroll hint and the vector width (the last three are compile-time: another
library). The key is the kernel's structure (expressions, dtypes, which inputs are
contiguous, broadcast or strided — not the numbers), its shape bucketed by powers of two per
dim, and the machine (CPU model and flags, thread count). Kernels of one key share the
winner.

Policy (documented choice): tuning runs **synchronously, on the second launch of a key,
and bounded in time** (``EMBER_AUTOTUNE_BUDGET`` seconds, default 0.25, compiles included)
and only for kernels big enough to matter (``EMBER_AUTOTUNE_MIN_WORK`` loop trips, default
2**18); smaller kernels use the default variant. The first launch runs the default variant:
a kernel that runs once gains nothing from tuning, and its first call should cost a compile
only; one that runs again (a training step's) is tuned then (``EMBER_AUTOTUNE_AFTER``: the
launches before tuning, default 1; 0 tunes on the first). Another thread launching a key being tuned
gets the default variant meanwhile (no waiting). Candidates are tried by coordinate descent
— threads, vector width, chunk, 32-bit indexing, unroll — each timed as the best of
at least two runs after a warm-up, on scratch outputs (never the caller's buffers); thread
counts that the default already uses are skipped, and the winner must beat the default
again in a last comparison (a loaded machine's noise is not stored as a winner). The winner
goes to ``<cache>/autotune.sqlite3`` (WAL mode, busy timeout: safe for concurrent
processes); a later process reads it without benchmarking (`Autotuner.stats` counts both).
``EMBER_AUTOTUNE=0`` turns it all off: the default variant, no database.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass

from . import ir
from .cache_dir import cache_dir

__all__ = ["Variant", "Autotuner", "structure_hash", "shape_bucket", "enabled_by_env",
           "get_autotuner"]


@dataclass(frozen=True, slots=True)
class Variant:
    """``threads``: OpenMP team size (0: the runtime's choice); ``chunk``: elements per work
    item (0: the kernel's default); ``idx32``: 32-bit indices; ``unroll``: inner-loop unroll
    hint (0: the compiler's choice); ``wide``: the widest vectors the CPU has (AVX-512:
    GCC otherwise prefers 256-bit ones); ``lanes``: bytes of accumulators per work item of a
    column-mode reduction (0: the renderer's default): how much of the input one item
    sweeps, which decides what stays in cache between a reduce-then-broadcast kernel's
    passes."""
    threads: int = 0
    chunk: int = 0
    idx32: bool = False
    unroll: int = 0
    wide: bool = False
    lanes: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, s: str) -> "Variant":
        d = json.loads(s)
        return cls(**{k: d[k] for k in ("threads", "chunk", "idx32", "unroll", "wide", "lanes")
                      if k in d})

    @property
    def compile_options(self) -> tuple:
        return (self.idx32, self.unroll, self.wide, self.lanes)


DEFAULT = Variant()


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, str(default)))
    except ValueError:
        return default


def _busy_load() -> float:
    """``EMBER_AUTOTUNE_BUSY_LOAD``, else the number of CPUs this process may use."""
    env = os.environ.get("EMBER_AUTOTUNE_BUSY_LOAD", "").strip()
    if env:
        try:
            return float(env)
        except ValueError:
            pass
    try:
        return float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return float(os.cpu_count() or 1)


def enabled_by_env() -> bool:
    return os.environ.get("EMBER_AUTOTUNE", "1").strip().lower() not in ("0", "false", "off",
                                                                         "no")


def _stride_class(strides, shape) -> tuple:
    out, acc = [], 1
    contig = []
    for n in reversed(shape):
        contig.append(acc)
        acc *= int(n)
    contig.reverse()
    for s, c, n in zip(strides, contig, shape):
        s = int(s)
        if int(n) == 1:
            out.append("1")
        elif s == 0:
            out.append("b")
        elif s == c:
            out.append("c")
        elif s == 1:
            out.append("u")
        elif s < 0:
            out.append("n")
        else:
            out.append("s")
    return tuple(out)


def structure_hash(kernel) -> str:
    """A hash of the kernel's structure: expression DAG, dtypes, the class of each input
    stride (contiguous, unit, broadcast, negative, other) — not shapes, strides or offsets."""
    memo: dict = {}
    keep = []

    def h(e):
        stack = [(e, False)]
        while stack:
            node, done = stack.pop()
            if id(node) in memo:
                continue
            if not done:
                stack.append((node, True))
                for c in ir.children(node):
                    if id(c) not in memo:
                        stack.append((c, False))
                continue
            fields = []
            for f in node.__dataclass_fields__:
                v = getattr(node, f)
                if isinstance(v, ir.Expr):
                    fields.append(memo[id(v)])
                elif f == "dtype":
                    fields.append(v.short)
                else:
                    fields.append(repr(v))
            memo[id(node)] = hashlib.sha1(
                (type(node).__name__ + "(" + ",".join(fields) + ")").encode()).hexdigest()
            keep.append(node)
        return memo[id(e)]

    parts = [type(kernel).__name__, str(len(kernel.shape))]
    for v in kernel.inputs:
        parts.append(v.dtype.short + ":" + "".join(_stride_class(v.strides, kernel.shape)))
    parts.append(",".join(d.short for d in kernel.args))
    if isinstance(kernel, ir.Elementwise):
        parts += [h(e) for e in kernel.exprs]
        parts.append(",".join(d.short for d in kernel.out_dtypes))
    else:
        parts += [str(kernel.axis), kernel.op, h(kernel.prologue), h(kernel.epilogue),
                  kernel.out_dtype.short, str(bool(getattr(kernel, "broadcast", False)))]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def shape_bucket(shape) -> tuple:
    """Each dim rounded up to a power of two (0 stays 0)."""
    return tuple(0 if int(n) == 0 else 1 << (int(n) - 1).bit_length() for n in shape)


class Autotuner:
    """Chooses variants; ``stats`` counts tunings, benchmark runs and cache hits."""

    def __init__(self, cache_root=None, enabled: bool | None = None,
                 budget_s: float | None = None, min_work: int | None = None,
                 tune_after: int | None = None, busy_load: float | None = None):
        self.enabled = enabled_by_env() if enabled is None else bool(enabled)
        #: a winner timed while the 1-minute load average is above this is kept for the
        #: process only, not stored (`machine_busy`)
        self.busy_load = _busy_load() if busy_load is None else float(busy_load)
        #: launches of a key with no stored winner that get the default before it is tuned
        self.tune_after = _env_int("EMBER_AUTOTUNE_AFTER", 1) if tune_after is None \
            else int(tune_after)
        self.budget_s = float(os.environ.get("EMBER_AUTOTUNE_BUDGET", "0.25")) \
            if budget_s is None else float(budget_s)
        self.min_work = int(os.environ.get("EMBER_AUTOTUNE_MIN_WORK", str(1 << 18))) \
            if min_work is None else int(min_work)
        self.cache_root = cache_root
        self.stats = {"tunings": 0, "benchmarks": 0, "db_hits": 0, "memory_hits": 0,
                      "db_writes": 0, "busy_defaults": 0, "deferred": 0, "db_errors": 0,
                      "unstored_busy": 0}
        self._mem: dict = {}
        self._untuned_launches: dict = {}
        self._busy: set = set()
        self._lock = threading.Lock()
        self._db_lock = threading.Lock()
        self._db = None
        self._db_failed = False

    # -- storage ----------------------------------------------------------------------------
    @property
    def path(self):
        return cache_dir(root=self.cache_root) / "autotune.sqlite3"

    def _conn(self):
        if self._db is None and not self._db_failed:
            try:
                c = sqlite3.connect(str(self.path), timeout=10.0, check_same_thread=False,
                                    isolation_level=None)
                c.execute("PRAGMA journal_mode=WAL")
                c.execute("PRAGMA busy_timeout=10000")
                c.execute("CREATE TABLE IF NOT EXISTS tune (key TEXT PRIMARY KEY, "
                          "variant TEXT NOT NULL, seconds REAL, default_seconds REAL, "
                          "created REAL)")
                self._db = c
            except (sqlite3.Error, OSError):
                self._db_failed = True
                self.stats["db_errors"] += 1
        return self._db

    def _db_get(self, key):
        with self._db_lock:
            c = self._conn()
            if c is None:
                return None
            try:
                row = c.execute("SELECT variant FROM tune WHERE key = ?", (key,)).fetchone()
            except sqlite3.Error:
                self.stats["db_errors"] += 1
                return None
        if row is None:
            return None
        try:
            return Variant.from_json(row[0])
        except (ValueError, TypeError):
            return None

    def _db_put(self, key, v: Variant, secs, dsecs):
        with self._db_lock:
            c = self._conn()
            if c is None:
                return
            try:
                c.execute("INSERT OR REPLACE INTO tune VALUES (?, ?, ?, ?, ?)",
                          (key, v.to_json(), secs, dsecs, time.time()))
                self.stats["db_writes"] += 1
            except sqlite3.Error:
                self.stats["db_errors"] += 1

    def close(self):
        with self._db_lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # -- choosing ---------------------------------------------------------------------------
    def lookup(self, key: str) -> Variant | None:
        """The stored winner of ``key`` (memory, then the database), or None."""
        v = self._mem.get(key)
        if v is not None:
            self.stats["memory_hits"] += 1
            return v
        v = self._db_get(key)
        if v is not None:
            self.stats["db_hits"] += 1
            self._mem[key] = v
        return v

    def choose(self, key: str, axes, run, default: Variant = DEFAULT) -> Variant:
        """The variant to use for ``key``: the stored winner, else tune now.

        ``axes``: candidate values per field, tried in order by coordinate descent, e.g.
        ``[("threads", [1, 2, 4]), ("chunk", [0, 4096])]``; ``run(variant)`` runs the kernel
        once (on scratch outputs) and may raise to reject a variant."""
        if not self.enabled:
            return default
        v = self.lookup(key)
        if v is not None:
            return v
        with self._lock:
            seen = self._untuned_launches.get(key, 0)
            if seen < self.tune_after:
                self._untuned_launches[key] = seen + 1
                self.stats["deferred"] += 1
                return default
            if key in self._busy:
                self.stats["busy_defaults"] += 1
                return default
            self._busy.add(key)
        try:
            best, secs, dsecs = self._tune(axes, run, default)
            self._mem[key] = best
            if self.machine_busy():
                self.stats["unstored_busy"] += 1
            else:
                self._db_put(key, best, secs, dsecs)
            self.stats["tunings"] += 1
            return best
        finally:
            with self._lock:
                self._busy.discard(key)

    def machine_busy(self) -> bool:
        """Whether other work loads the CPUs now (the 1-minute load average is above
        ``busy_load``, by default the number of CPUs this process may use): timings taken
        then favour what the load favours (one thread, when the other core is busy), so the
        winner serves this process but is not stored for later ones."""
        try:
            return os.getloadavg()[0] > self.busy_load
        except (OSError, AttributeError):       # no load average on this platform
            return False

    def settled(self, key: str) -> bool:
        """Whether `choose` has its final answer for ``key`` (tuned or stored, or tuning is
        off); until then a runtime asks again on the next launch (the first launches of a
        key, or another thread was tuning it)."""
        return not self.enabled or key in self._mem

    def _time(self, run, v: Variant, reps: int):
        run(v)                      # warm-up (and compile, for a compile-time variant)
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            run(v)
            best = min(best, time.perf_counter() - t0)
        self.stats["benchmarks"] += 1
        return best

    def _tune(self, axes, run, default: Variant):
        """Coordinate descent; each time is the best of at least two runs (one run of a
        loaded machine picks noise); a candidate that looks a clear win over the best so
        far is timed against it again, alternately (`_duel`), before it takes its place, and
        the final winner against the default."""
        t_start = time.perf_counter()
        deadline = t_start + self.budget_s
        t_def = self._time(run, default, 3)
        reps = 3 if t_def < 0.01 else 2
        best, best_t = default, t_def
        for field, values in axes:
            for val in values:
                if time.perf_counter() > deadline:
                    return self._confirm(run, best, best_t, default, t_def, reps)
                cand = Variant(**{**asdict(best), field: val})
                if cand == best:
                    continue
                try:
                    t = self._time(run, cand, reps)
                except Exception:      # a variant that cannot be built or run is skipped
                    continue
                if t < best_t * 0.97:  # a clear win only, against timing noise
                    if best == default:
                        best, best_t = cand, t          # (`_confirm` duels the default)
                        continue
                    t_best, t = self._duel(run, best, cand, reps)
                    if t < t_best * 0.97:
                        best, best_t = cand, t
                    else:
                        best_t = t_best
        return self._confirm(run, best, best_t, default, t_def, reps)

    def _duel(self, run, a: Variant, b: Variant, reps: int):
        """Times of ``a`` and ``b`` taken afresh in the order a b b a, each the best of its
        two: a drift of the machine's speed while tuning (a GPU's clocks under a long
        kernel) falls on both alike. On an H200 the GELU of bench/gpu.py row 2 timed
        511-530 us at 4 elements a thread and 512-558 at 2, alternating; the tuner, timing
        each once in turn, kept 2."""
        ta = self._time(run, a, reps)
        tb = self._time(run, b, reps)
        tb = min(tb, self._time(run, b, reps))
        ta = min(ta, self._time(run, a, reps))
        return ta, tb

    def _confirm(self, run, best, best_t, default, t_def, reps):
        if best == default:
            return best, best_t, t_def
        t_def, best_t = self._duel(run, default, best, reps)
        if best_t < t_def * 0.97:
            return best, best_t, t_def
        return default, t_def, t_def


_TUNERS: dict = {}
_TUNERS_LOCK = threading.Lock()


def get_autotuner(cache_root=None) -> Autotuner:
    """The process's autotuner for the current cache dir and ``EMBER_AUTOTUNE``."""
    k = (str(cache_root) if cache_root is not None else os.environ.get("EMBER_CACHE_DIR"),
         os.environ.get("XDG_CACHE_HOME"), enabled_by_env())
    t = _TUNERS.get(k)
    if t is None:
        with _TUNERS_LOCK:
            t = _TUNERS.get(k)
            if t is None:
                t = _TUNERS[k] = Autotuner(cache_root=cache_root)
    return t
