"""The CPU kernel runtime: kernels compiled to C, launched on NumPy arrays.

::

    rt = CpuKernelRuntime()
    if rt.available():
        prog = rt.compile(kernel)              # memory and disk cached
        (out,) = rt.launch(prog, [a, b], [0.5])

Inputs are NumPy arrays, one per `BufferView`; a view's strides and offset index the array's
memory from its data pointer (its first element), whatever the array's own strides — every
element the view reaches must lie within the array's memory (checked: a wrong view raises
instead of reading stray memory). Outputs are contiguous arrays, allocated by `launch` or
given to `launch_into` (which may alias an input read at the same positions: in-place).

Threads: ``EMBER_NUM_THREADS`` (default: the CPUs this process may run on). A launch uses
several threads only when the work is large: about ``EMBER_OMP_THRESHOLD`` (default 65536)
expression-node evaluations per thread; the autotuner (`ember.kernel.autotune`) may pick
another count, chunk size or compile-time variant per kernel key. The GIL is released while
a kernel runs. A process forked after kernels ran multi-threaded runs its kernels serially
(libgomp's thread pool does not survive ``fork``; using it would hang the child).
"""
from __future__ import annotations

import ctypes
import os
import struct
import threading

import numpy as np

from ... import dtype as dt
from ...errors import DTypeError, ShapeError
from .. import ir
from ..autotune import DEFAULT, Variant, get_autotuner, shape_bucket, structure_hash
from ..buffer_pool import default_pool
from ..c_family import nodes
from ..launch_signature import input_ranges, launch_signature
from .compiler import cpu_id, get_compiler, warn_unavailable_once
from . import fastcall
from .render import COL_BYTES, Options, fits_idx32, render

__all__ = ["CpuKernelRuntime", "Program", "default_runtime", "default_num_threads"]


# libgomp's thread pool does not survive fork(): a child whose parent ran an OpenMP team
# hangs in its first parallel region. Such children run kernels serially.
_TEAM_USED = False
_FORKED_AFTER_TEAM = False


def _after_fork_in_child():
    global _FORKED_AFTER_TEAM
    if _TEAM_USED:
        _FORKED_AFTER_TEAM = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

#: how long (busy-wait iterations) libgomp's idle threads spin before they sleep, unless
#: GOMP_SPINCOUNT / OMP_WAIT_POLICY say otherwise
SPINCOUNT = 10000
_SPIN_SET = False


def _short_openmp_spin():
    """Load libgomp with a short busy-wait. Its default (300000 spins, milliseconds) keeps
    the team spinning between kernels; on a machine where other processes want the cores,
    the spinning threads take their time and every barrier waits for a preempted thread
    (layer norm after swap_dims: 29 ms on 2 threads with one core busy elsewhere, 20 ms with
    short spins, 15 ms on 1 thread). libgomp reads the variable once, when it is loaded:
    it is set only around that load and only if the user has not set either variable.
    A process has one libgomp (PyTorch's bundled copy has the same soname): if PyTorch came
    first, the kernels use its runtime as it is; if ember came first, PyTorch uses this one."""
    global _SPIN_SET
    if _SPIN_SET:
        return
    _SPIN_SET = True
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        return
    os.environ["GOMP_SPINCOUNT"] = str(SPINCOUNT)
    try:
        ctypes.CDLL("libgomp.so.1")
    except OSError:              # another OpenMP runtime (clang's libomp), or none
        pass
    finally:
        os.environ.pop("GOMP_SPINCOUNT", None)


_AVX512 = None


def _has_avx512() -> bool:
    """Whether the CPU has AVX-512 (then 512-bit vectors are a variant worth timing)."""
    global _AVX512
    if _AVX512 is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                _AVX512 = any(line.startswith("flags") and " avx512f" in line for line in f)
        except OSError:
            _AVX512 = False
    return _AVX512


def default_num_threads() -> int:
    env = os.environ.get("EMBER_NUM_THREADS")
    if env:
        try:
            n = int(env)
            if n >= 1:
                return n
        except ValueError:
            pass
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _count_nodes(exprs) -> int:
    return len(nodes(exprs))


class Program:
    """A compiled kernel with what launching it needs. ``variant`` is the launch variant in
    use (the default until the autotuner picks one)."""

    __slots__ = ("kernel", "source", "key", "fn", "mode", "work", "items", "n_in", "n_out",
                 "out_shapes", "out_dtypes", "in_np", "ranges", "arg_fmt", "arg_kinds",
                 "numel", "cost", "variant", "tuned", "tune_key", "_fns", "_lock", "idx32_ok",
                 "__weakref__")

    def __repr__(self):
        return (f"Program({type(self.kernel).__name__} {tuple(self.kernel.shape)}, "
                f"mode={self.mode}, key={self.key[:12]})")


_addressof = ctypes.addressof
_from_buffer = ctypes.c_char.from_buffer


def _ptr(a: np.ndarray) -> int:
    """The data pointer of ``a`` (the buffer protocol is 3x faster than ``a.ctypes``, for
    writable contiguous arrays)."""
    try:
        return _addressof(_from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


_ADDRESSES: dict = {}


def _address(fn) -> int:
    """The address of a loaded kernel's ctypes function (for `fastcall`)."""
    hit = _ADDRESSES.get(id(fn))        # (ctypes functions are not hashable)
    if hit is not None and hit[0] is fn:
        return hit[1]
    if len(_ADDRESSES) > 65536:
        _ADDRESSES.clear()
    a = ctypes.cast(fn, ctypes.c_void_p).value
    _ADDRESSES[id(fn)] = (fn, a)        # the function kept alive: its id stays its own
    return a


def _arg_kind(d: dt.DType) -> str:
    d = ir.compute_dtype(d)
    return "d" if d.is_float else "q"


class CpuKernelRuntime:
    """Compiles kernels with the system C compiler and runs them on NumPy arrays."""

    name = "c"
    #: runs `ir.Reduce` kernels with ``broadcast=True`` itself (reduce, then sweep the row)
    features = frozenset({"broadcast_reduce"})

    def __init__(self, num_threads: int | None = None, cache_root=None,
                 autotune: bool | None = None, omp_threshold: int | None = None):
        self.cache_root = cache_root
        _short_openmp_spin()             # before anything loads libgomp (the probe does)
        self._compiler = get_compiler(cache_root)
        self._num_threads = num_threads or default_num_threads()
        self.omp_threshold = omp_threshold or int(os.environ.get("EMBER_OMP_THRESHOLD",
                                                                 "65536"))
        self.autotuner = get_autotuner(cache_root)
        self.pool = default_pool()       # outputs reuse the memory of dead large outputs
        self.autotune = self.autotuner.enabled if autotune is None else bool(autotune)
        self._programs: dict = {}
        self._by_id: dict = {}         # id(kernel) -> (kernel, program): skips rendering
        self._lock = threading.RLock()
        self.launches = 0
        #: launches through the `fastcall` extension (~0.4 µs) rather than ctypes (~3.3)
        self._fast = fastcall.get(self._compiler) if self._compiler.available else None

    # -- availability ---------------------------------------------------------------------
    @property
    def fast_launch(self) -> bool:
        """Whether kernels launch through `fastcall` (cheap enough for small tensors)."""
        return self._fast is not None

    @property
    def compiler(self):
        return self._compiler

    def available(self) -> bool:
        return self._compiler.available

    def why_unavailable(self) -> str:
        """Why kernels cannot be compiled here ("" when they can)."""
        return self._compiler.why_unavailable()

    def warning_text(self) -> str:
        """The message to show (once) when falling back to unfused execution."""
        return self._compiler.unavailable_warning() if not self.available() else ""

    def warn_once(self) -> bool:
        """Warn (RuntimeWarning) once per process that kernels are off; True if it did."""
        return warn_unavailable_once(self._compiler)

    @property
    def num_threads(self) -> int:
        return self._num_threads

    @num_threads.setter
    def num_threads(self, n: int):
        self._num_threads = max(1, int(n))

    # -- compiling --------------------------------------------------------------------------
    def _options(self, idx32=False, unroll=0, wide=False, lanes=0) -> Options:
        c = self._compiler
        return Options(idx32=idx32, unroll=unroll, float16=c.float16,
                       openmp=c.openmp or c.openmp_simd, wide=wide, col_bytes=lanes)

    def compile(self, kernel, variant: Variant | None = None) -> Program:
        """The program of ``kernel`` (rendered, compiled or found in the caches, loaded)."""
        if not self.available():
            from ...errors import BackendUnavailableError
            raise BackendUnavailableError(f"C kernels are unavailable: {self.why_unavailable()}")
        explicit = variant is not None
        if not explicit:
            hit = self._by_id.get(id(kernel))
            if hit is not None and hit[0] is kernel:
                return hit[1]
        variant = variant or DEFAULT
        rd = render(kernel, self._options(variant.idx32, variant.unroll, variant.wide,
                                          variant.lanes))
        key = self._compiler.key(rd.source)
        # one source may serve kernels that launch differently (an unread bool or u8 input,
        # shapes that collapse alike): a program is keyed by its launch signature too
        sig = launch_signature(kernel)
        pkey = (key, sig, variant) if explicit else (key, sig)
        prog = self._programs.get(pkey)
        if prog is None:
            prog = self._new_program(kernel, rd, key, pkey, variant, explicit)
        if not explicit:
            if len(self._by_id) > 4096:
                self._by_id.clear()
            self._by_id[id(kernel)] = (kernel, prog)
        return prog

    def _new_program(self, kernel, rd, key, pkey, variant, explicit) -> Program:
        with self._lock:
            prog = self._programs.get(pkey)
            if prog is not None:
                return prog
            _, fn = self._compiler.load(rd.source)
            p = Program()
            p.kernel = kernel
            p.source = rd.source
            p.key = key
            p.fn = fn
            p.mode = rd.mode
            p.work = rd.work
            p.items = max(1, rd.items)
            p.n_in = len(kernel.inputs)
            p.in_np = tuple(v.dtype.np for v in kernel.inputs)
            if isinstance(kernel, ir.Elementwise):
                shape = tuple(int(s) for s in kernel.shape)
                p.out_shapes = tuple(shape for _ in kernel.exprs)
                p.out_dtypes = tuple(d.np for d in kernel.out_dtypes)
                n_nodes = _count_nodes(kernel.exprs)
                p.numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
            else:
                shape = [int(s) for s in kernel.shape]
                if not getattr(kernel, "broadcast", False):
                    shape[kernel.axis] = 1
                p.out_shapes = (tuple(shape),)
                p.out_dtypes = (kernel.out_dtype.np,)
                n_nodes = _count_nodes([kernel.prologue])
                p.numel = int(np.prod(shape, dtype=np.int64))
            p.n_out = len(p.out_shapes)
            p.cost = max(1, n_nodes) * max(1, rd.work)
            p.ranges = input_ranges(kernel)
            p.arg_kinds = tuple(_arg_kind(d) for d in kernel.args)
            p.arg_fmt = "=" + "".join(p.arg_kinds)
            p.variant = variant
            p.tuned = explicit or not self.autotune
            p.tune_key = None
            p._fns = {variant.compile_options: fn}
            p._lock = threading.Lock()
            p.idx32_ok = fits_idx32(kernel)
            self._programs[pkey] = p
            return p

    # -- launching --------------------------------------------------------------------------
    def _check_inputs(self, prog: Program, inputs):
        if len(inputs) != prog.n_in:
            raise ShapeError(f"launch: the kernel has {prog.n_in} input views, got "
                             f"{len(inputs)} arrays")
        for b, (a, want, rng) in enumerate(zip(inputs, prog.in_np, prog.ranges)):
            if not isinstance(a, np.ndarray):
                raise TypeError(f"launch: input {b} is a {type(a).__name__}, not a NumPy array")
            if a.dtype != want:
                raise DTypeError(f"launch: input {b} has dtype {a.dtype}, the kernel's view "
                                 f"is {want}")
            if rng is None:
                continue
            lo, hi = rng
            if a.flags.c_contiguous:
                ok = lo >= 0 and hi < a.size
                alo, ahi = 0, a.size - 1
            else:
                blo, bhi = np.lib.array_utils.byte_bounds(a)
                base = a.__array_interface__["data"][0]
                item = a.itemsize
                ok = a.size > 0 and base + lo * item >= blo and base + (hi + 1) * item <= bhi
                alo, ahi = (blo - base) // item, (bhi - base) // item - 1
            if not ok:
                raise ShapeError(f"launch: input {b}'s view reads elements {lo}..{hi} of an "
                                 f"array whose memory holds elements {alo}..{ahi}")

    def _threads(self, prog: Program, v: Variant) -> int:
        global _TEAM_USED
        n = v.threads if v.threads > 0 else max(1, prog.cost // self.omp_threshold)
        n = min(n, self._num_threads, prog.items)
        if n > 1:
            if _FORKED_AFTER_TEAM:
                return 1
            _TEAM_USED = True
            return n
        return 1

    def _pack_args(self, prog, args):
        kinds = prog.arg_kinds
        if not kinds:
            return None
        if len(args) != len(kinds):
            raise ShapeError(f"launch: the kernel takes {len(kinds)} scalar args, got "
                             f"{len(args)}")
        vals = [float(x) if k == "d" else ((int(x) + (1 << 63)) % (1 << 64)) - (1 << 63)
                for x, k in zip(args, kinds)]
        return struct.pack(prog.arg_fmt, *vals)

    def _invoke(self, fn, arrays, packed, threads, chunk, ptrs_t=None):
        """Call kernel ``fn`` on ``arrays`` (inputs, then outputs): through `fastcall`, else
        ctypes (``ptrs_t``: the pointer-array type, when the caller made it once)."""
        fast = self._fast
        if fast is not None:
            fast(_address(fn), arrays, packed, threads, chunk)
        else:
            fn((ptrs_t or ctypes.c_void_p * len(arrays))(*[_ptr(a) for a in arrays]), packed,
               threads, chunk)

    def _call(self, prog, fn, inputs, outputs, args, v: Variant):
        self._invoke(fn, [*inputs, *outputs], self._pack_args(prog, args),
                     self._threads(prog, v), v.chunk)

    def launch(self, program: Program, inputs, args=()) -> list:
        """Run ``program``; returns new contiguous outputs (large ones in memory of earlier
        outputs nothing references any more: `ember.kernel.buffer_pool`)."""
        empty = self.pool.empty
        outs = [empty(s, d) for s, d in zip(program.out_shapes, program.out_dtypes)]
        self._launch(program, inputs, args, outs)
        return outs

    def launch_into(self, program: Program, inputs, args, outputs) -> None:
        """Run ``program`` writing into ``outputs`` (C-contiguous arrays of the output shapes
        and dtypes; an output may be an input read at the same positions)."""
        if len(outputs) != program.n_out:
            raise ShapeError(f"launch: the kernel has {program.n_out} outputs, got "
                             f"{len(outputs)} arrays")
        for i, (o, s, d) in enumerate(zip(outputs, program.out_shapes, program.out_dtypes)):
            if not isinstance(o, np.ndarray) or o.dtype != d or o.shape != s \
                    or not o.flags.c_contiguous or not o.flags.writeable:
                raise ShapeError(f"launch: output {i} must be a writeable C-contiguous "
                                 f"{d} array of shape {s}")
        self._launch(program, inputs, args, outputs)

    def _launch(self, program: Program, inputs, args, outputs) -> None:
        self._check_inputs(program, inputs)
        if program.numel == 0:
            return
        if not program.tuned:
            self._autotune(program, inputs, args)
        v = program.variant
        fn = program._fns.get(v.compile_options, program.fn) if v is not DEFAULT \
            else program.fn
        self._call(program, fn, inputs, outputs, args, v)
        self.launches += 1

    def launcher(self, program: Program):
        """``run(inputs, args) -> outputs``: `launch` with less per-call work, for a caller
        whose inputs keep the dtypes, shapes and strides of its first call (the Fusion
        decorator's cached plans: their key pins them). The inputs' bounds are checked on
        the first call only; small outputs skip the buffer pool."""
        n_all = program.n_in + program.n_out
        ptrs_t = ctypes.c_void_p * n_all
        small = self.pool.min_bytes
        outs_spec = tuple((s, np.dtype(d), int(np.prod(s, dtype=np.int64)) *
                           np.dtype(d).itemsize < small)
                          for s, d in zip(program.out_shapes, program.out_dtypes))
        empty, pooled = np.empty, self.pool.empty
        packer = struct.Struct(program.arg_fmt) if program.arg_kinds else None
        floats = all(k == "d" for k in program.arg_kinds)
        checked = []
        # once tuned, through `fastcall`: (team size it was for, address, threads, chunk)
        ready = [None]

        def run(inputs, args=()):
            if not checked:
                self._check_inputs(program, inputs)
                checked.append(True)
            outs = [empty(s, d) if sm else pooled(s, d) for s, d, sm in outs_spec]
            if program.numel == 0:
                return outs
            if packer is None:
                packed = None
            elif floats:
                packed = packer.pack(*[float(x) for x in args])
            else:
                packed = self._pack_args(program, args)
            r = ready[0]
            if r is not None and r[0] == self._num_threads and (
                    r[2] == 1 or not _FORKED_AFTER_TEAM):
                self._fast(r[1], [*inputs, *outs], packed, r[2], r[3])
                self.launches += 1
                return outs
            if not program.tuned:
                self._autotune(program, inputs, args)
            v = program.variant
            fn = program._fns.get(v.compile_options, program.fn) if v is not DEFAULT \
                else program.fn
            threads = self._threads(program, v)
            self._invoke(fn, [*inputs, *outs], packed, threads, v.chunk, ptrs_t)
            if self._fast is not None and program.tuned and not _FORKED_AFTER_TEAM:
                ready[0] = (self._num_threads, _address(fn), threads, v.chunk)
            self.launches += 1
            return outs
        return run

    # -- autotune ---------------------------------------------------------------------------
    def tune_key(self, program: Program) -> str:
        k = program.kernel
        return "|".join(["c", structure_hash(k),
                         ",".join(str(n) for n in shape_bucket(k.shape)),
                         cpu_id(), f"t{self._num_threads}", "v2"])

    def _variant_fn(self, program: Program, v: Variant):
        opts = v.compile_options
        fn = program._fns.get(opts)
        if fn is None:
            if v.idx32 and not program.idx32_ok:
                raise ValueError("idx32 does not fit this kernel")
            rd = render(program.kernel, self._options(v.idx32, v.unroll, v.wide, v.lanes))
            _, fn = self._compiler.load(rd.source)
            program._fns[opts] = fn
        return fn

    def _autotune(self, program: Program, inputs, args):
        with program._lock:
            if program.tuned:
                return
            if program.cost < self.autotuner.min_work:
                program.tuned = True
                return
            key = program.tune_key = program.tune_key or self.tune_key(program)
            scratch = [np.empty(s, d) for s, d in zip(program.out_shapes, program.out_dtypes)]
            args = list(args)

            def run(v: Variant):
                fn = self._variant_fn(program, v)
                self._call(program, fn, inputs, scratch, args, v)

            nt = self._num_threads
            # the team the default variant gets is not tried again as a number
            same = min(max(1, program.cost // self.omp_threshold), nt, program.items)
            threads = sorted({t for t in (1, 2, 4, 8, 16, 32, 64, nt)
                              if t <= min(nt, program.items) and t != same})
            axes = [("threads", threads)]
            if _has_avx512():
                axes.append(("wide", [True]))
            if program.mode in ("elementwise", "row"):    # the others ignore the chunk
                axes.append(("chunk", [1 << 12, 1 << 16, 1 << 18]))
            if program.idx32_ok:
                axes.append(("idx32", [True]))
            axes.append(("unroll", [4]))
            if program.mode == "column":     # accumulator lanes around COL_BYTES
                axes.append(("lanes", [COL_BYTES // 2, COL_BYTES * 2]))
            v = self.autotuner.choose(key, axes, run, DEFAULT)
            if v.idx32 and not program.idx32_ok:
                v = Variant(v.threads, v.chunk, False, v.unroll, v.wide, v.lanes)
            try:
                self._variant_fn(program, v)
            except Exception:
                v = DEFAULT
            program.variant = v
            # the key's first launch, or another thread tuning it, gave the default: try
            # again on a later launch
            program.tuned = self.autotuner.settled(key)

    def source(self, program: Program) -> str:
        """The C source of a program (for EMBER_FUSION_LOG)."""
        return program.source

    def stats(self) -> dict:
        return {"launches": self.launches, "programs": len(self._programs),
                "launch_path": "fastcall" if self._fast is not None else
                f"ctypes ({fastcall.reason() or 'no compiler'})",
                "compiler": dict(self._compiler.stats), "autotune": dict(self.autotuner.stats)}


_DEFAULT = None
_DEFAULT_LOCK = threading.Lock()


def default_runtime() -> CpuKernelRuntime:
    """The process-wide runtime (created on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = CpuKernelRuntime()
    return _DEFAULT
