"""Cuda: tensors as CuPy arrays on NVIDIA GPUs, every registry op on the device.

* Ops: `ember.backend.cuda.ops` finds each op's implementation once; the op path queues
  kernels on the calling thread's stream and never waits for the GPU (index ops that must
  refuse out-of-range indices read two values back: the one exception). Elementwise ops on
  contiguous operands of one shape, and small reductions, run as ember's own kernels,
  launched directly (`ember.backend.cuda.eager`, `ember.backend.cuda.reduce`: a CuPy call
  costs more host time than the op on a small tensor), as does adam_update; their output
  arrays are reused per stream once dropped (`memory.Outputs`).
* Streams: one blocking CuPy stream per thread and device (`streams`); reads
  (``to_numpy``) wait for that stream; ``sync`` waits for the whole device.
* Memory: CuPy's memory pool; running out raises `ember.errors.OutOfMemoryError` naming the
  size asked for and what is in use (`memory`).
* Random: one CuPy generator per device, seeded by ``device.seed(n)`` / ``em.seed(n)``.
* Interop: ``tensor.primitive`` is the CuPy array (``.data.ptr`` its device pointer); DLPack
  and ``__cuda_array_interface__`` export it with the stream its pending work is on.
"""
from __future__ import annotations

import threading

import numpy as np

from ...errors import BackendUnavailableError, DeviceError, DTypeError, ShapeError
from ...kernel.cuda import custom as _custom
from ..base import Backend
from . import _cupy, memory
from . import eager as _eager
from . import reduce as _reduce
from .checks import DeferredChecks
from .copy import StridedCopy
from .matmul import CublasMatmul
from .ops import BF16, BF16_NATIVE, F32, direct_path, namespace, resolve
from .streams import StreamOrder

_U16 = np.dtype(np.uint16)
_EW, _RED = 1, 2            # the eager paths: elementwise kernels, reductions
_DL_CUDA = (2, 13)          # DLPack device types: CUDA, CUDA managed


class Cuda(Backend):
    name = "cuda"
    kind = "cuda"
    #: ops with a decomposition that this backend runs as one kernel of its own: Fusion(Cuda)
    #: runs them here instead of decomposing them. Layer norm (`norm.py`): one read and one
    #: write, where Fusion's decomposition takes two kernels. adam_update (`ops.py`, launched
    #: directly): the same one kernel per parameter as the fused decomposition, without
    #: recording its ~15 ops (~600 of the ~1300 ops a GPT step recorded, bench/gpu.py row 9).
    #: attention (`attention.py`): two cuBLAS products around one softmax kernel; its
    #: derivative attention_backward: four products around one generated kernel.
    #: linear_backward (`linear.py`): a linear layer's gradients, two products and a column
    #: sum, as one op.
    #: adam_update_many: a whole optimizer step's updates in one op (`ember.optim.Adam` groups
    #: them where the backend lists it)
    fused_ops = frozenset({"layer_norm", "adam_update", "attention", "layer_norm_backward",
                           "adam_update_many", "attention_backward", "linear_backward"})

    def __init__(self):
        cp, why = _cupy.load()
        if cp is None:
            raise BackendUnavailableError(f"cuda: the Cuda backend is not usable here: {why}")
        super().__init__()
        self.cp = cp
        #: the array namespace the op references run with
        #: index checks queued on the device, raised at the next read (`checks.py`)
        self._checks = DeferredChecks(cp)
        #: C-contiguous copies as generated kernels (`copy.StridedCopy`), on the caller's stream
        self.contiguous = StridedCopy(cp, self._raw_kernel_runtime)
        #: concatenation as one directly launched kernel (`concat.Concatenate`): the cat op's
        #: direct path and the namespace's ``concatenate`` (CuPy's where it cannot run)
        self.concatenate = _concatenate(cp)
        self.xp = namespace(cp, matmul=CublasMatmul(cp, self.contiguous),
                            defer_index_check=self._checks, ember_contiguous=self.contiguous,
                            ember_kernel_runtime=self._raw_kernel_runtime,
                            **({} if self.concatenate is None else
                               {"concatenate": self.concatenate}))
        self._ndarray = cp.ndarray
        self._oom = cp.cuda.memory.OutOfMemoryError
        self._runners = {}
        #: ops that may run as ember's own flat kernels (`eager`), by op
        self._eager_ops = {}
        self._eager = None
        self._reduce = None
        if _eager.enabled():
            try:
                self._eager = _eager.EagerKernels(cp, lambda: self.kernel_runtime)
                self._reduce = _reduce.EagerReduce(cp, lambda: self.kernel_runtime,
                                                   self._eager._direct)
            except ImportError:          # a CuPy without the driver binding
                self._eager = self._reduce = None
        self._get_device = cp.cuda.runtime.getDevice
        st = cp.cuda.stream
        #: the calling thread's current CuPy stream, as a handle
        self._current_stream = getattr(st, "get_current_stream_ptr", None) or (
            lambda: st.get_current_stream().ptr)
        self._tls = threading.local()
        self._orders = {}
        self._rngs = {}
        self._lock = threading.Lock()

    # -- devices --------------------------------------------------------------------------
    def device(self, index: int = 0):
        d = self._devices.get(index)
        if d is not None:
            return d
        n = _cupy.device_count()
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
            raise DeviceError(f"Cuda: no device cuda:{index}; this machine has {n} CUDA "
                              f"device{'s' if n != 1 else ''} (valid: "
                              f"{', '.join(f'cuda:{i}' for i in range(n))})")
        return super().device(index)

    def scope(self, index: int):
        """The calling thread's stream scope on device ``index`` (``with`` it to queue work
        where this backend's ops go)."""
        s = self._tls.__dict__.get(index)
        if s is None:
            order = self._orders.get(index)
            if order is None:
                with self._lock:
                    order = self._orders.setdefault(index, StreamOrder(self.cp, index))
            s = self._tls.__dict__[index] = order.new_scope()
        return s

    # -- the op path ----------------------------------------------------------------------
    def execute(self, op, prims, attrs, meta, device):
        run = self._runners.get(op)
        if run is None:
            run = self._runners[op] = self._runner(op)
            self._eager_ops[op] = (_EW if self._eager is not None and _eager.eligible(op) else
                                   _RED if self._reduce is not None and _reduce.eligible(op)
                                   else self._direct_path(op))
        scope = self._tls.__dict__.get(device.index) or self.scope(device.index)
        order = scope.order
        try:
            eager = self._eager_ops[op]
            if eager and not order.tracking and not (
                    _custom._REGISTRY and op.name in _custom._REGISTRY):
                # an elementwise op or a small reduction as ember's own kernel on this
                # thread's stream, launched directly (no CuPy call, no stream switch): None
                # when its operands do not fit
                if eager == _EW:
                    out = self._eager.run(op, prims, attrs, meta, scope, device.index)
                elif eager == _RED:
                    out = self._reduce.run(op, prims[0], attrs, meta, scope, device.index)
                elif self._get_device() == device.index:
                    out = eager(prims, attrs, meta, scope, device.index)
                else:
                    out = None
                if out is not None:
                    return out
            with scope:
                if order.tracking:
                    crossed = order.before(scope, prims)
                    out = run(prims, attrs, meta, device)
                    order.after(scope, out, crossed)
                    return out
                return run(prims, attrs, meta, device)
        except self._oom as e:
            raise memory.out_of_memory(self.cp, op.name, e, device.index) from None

    def _direct_path(self, op):
        """An op's direct path (`ops.direct_path`: launched on this thread's stream without
        a stream switch, e.g. adam_update), or 0."""
        if self._eager is None or op.category == "random":
            return 0
        return direct_path(op.name, self.cp, self.contiguous, self.concatenate) or 0

    def _runner(self, op):
        """``run(prims, attrs, meta, device)`` for ``op``: its implementation, bf16 inputs
        computed in f32 unless the op takes them natively, outputs cast to the dtypes the
        registry inferred."""
        fn = resolve(op, self.cp, self.xp)
        ndarray = self._ndarray
        upcast = op.name not in BF16_NATIVE
        name = op.name

        def fix(out, m):
            if not isinstance(out, ndarray):
                raise TypeError(f"Cuda: the implementation of {name} returned "
                                f"{type(out).__name__}, not a CuPy array (a host value on "
                                f"the device path is a bug in ember)")
            want = m[1].np
            return out if out.dtype == want else out.astype(want)

        if op.category == "random":
            rng = self._rng

            def run(prims, attrs, meta, device):
                return fix(fn(rng(device), **attrs), meta)
            return run

        single = op.nout == 1
        custom = _custom._REGISTRY      # user kernels (register_kernel), process-wide

        def run(prims, attrs, meta, device):
            if custom and name in custom:
                out = self._run_custom(op, prims, attrs, meta)
                if out is not None:
                    return out
            if upcast:
                for p in prims:
                    if isinstance(p, ndarray) and p.dtype == BF16:
                        prims = tuple(q.astype(F32) if isinstance(q, ndarray) and
                                      q.dtype == BF16 else q for q in prims)
                        break
            out = fn(*prims, **attrs)
            if single:
                return fix(out, meta)
            return tuple(fix(o, m) for o, m in zip(out, meta))
        return run

    def _run_custom(self, op, prims, attrs, meta):
        """``op`` through the user kernel registered for its input dtypes (None: there is
        none, the backend's own implementation runs). The kernel gets C-contiguous CuPy
        operands; its result must have the inferred shapes and dtypes."""
        nd = self._ndarray
        fn = _custom.lookup(op.name, [p.dtype for p in prims if isinstance(p, nd)])
        if fn is None:
            return None
        cp = self.cp
        args = tuple(cp.ascontiguousarray(p) if isinstance(p, nd) else p for p in prims)
        out = fn(*args, **attrs)
        single = op.nout == 1
        outs, metas = ((out,), (meta,)) if single else (tuple(out), tuple(meta))
        for o, (shape, dtype) in zip(outs, metas):
            if not isinstance(o, nd):
                raise TypeError(f"Cuda: the kernel registered for {op.name} ({fn!r}) returned "
                                f"{type(o).__name__}, not a CuPy array")
            if tuple(o.shape) != tuple(shape):
                raise ShapeError(f"Cuda: the kernel registered for {op.name} ({fn!r}) "
                                 f"returned shape {tuple(o.shape)}; the op's result has shape "
                                 f"{tuple(shape)}")
            if o.dtype != dtype.np:
                raise DTypeError(f"Cuda: the kernel registered for {op.name} ({fn!r}) "
                                 f"returned dtype {o.dtype}; the op's result is "
                                 f"{dtype.name}")
        if len(outs) != len(metas):
            raise TypeError(f"Cuda: the kernel registered for {op.name} returned "
                            f"{len(outs)} arrays; the op has {len(metas)} outputs")
        return out if single else outs

    @property
    def custom_kernels(self) -> dict:
        """The registered user kernels (`ember.kernel.cuda.register_kernel`), by op name:
        Fusion runs these ops here, unfused."""
        return _custom._REGISTRY

    # -- data -----------------------------------------------------------------------------
    def from_numpy(self, array, device):
        cp = self.cp
        scope = self._tls.__dict__.get(device.index) or self.scope(device.index)
        a = np.asarray(array)
        try:
            with scope:
                if a.dtype == BF16:   # CuPy reads no bf16 host buffers: move the bits
                    out = cp.asarray(np.ascontiguousarray(a).view(_U16)).view(BF16)
                else:
                    out = cp.asarray(a)
                if scope.order.tracking:
                    scope.order.after(scope, out, None)
        except self._oom as e:
            raise memory.out_of_memory(self.cp, "from_numpy", e, device.index) from None
        return out

    def _scope_of(self, prim, leaving: bool = True):
        """The calling thread's scope on ``prim``'s device, with its stream ordered after the
        array's last use on another thread's stream. ``leaving``: the value leaves ember (a
        read, an export), so the index checks this thread queued on that device raise first
        (`checks.py`)."""
        index = prim.data.device_id
        scope = self._tls.__dict__.get(index) or self.scope(index)
        if scope.order.tracking:
            with scope:
                scope.order.before(scope, (prim,))
        if leaving:
            self._raise_found(scope)
        return scope

    def _raise_found(self, scope):
        """Raise what this thread's index checks on the scope's device found (one small read
        on its stream, only where checks are pending)."""
        if self._checks.pending(scope.index):
            with scope:
                self._checks.raise_found(scope.index)

    def to_numpy(self, prim):
        scope = self._scope_of(prim)
        with scope:                   # the copy waits for the stream's queued work
            if prim.dtype == BF16:
                return prim.view(_U16).get().view(BF16)
            return prim.get()

    def native(self, prim):
        """The CuPy array itself; the caller's current stream is ordered after the work
        queued for it (no host synchronization)."""
        scope = self._scope_of(prim)
        cp = self.cp
        if self._get_device() == scope.index:
            scope.order_stream(cp, self._current_stream())
        else:
            with cp.cuda.Device(scope.index):
                scope.order_stream(cp, self._current_stream())
        return prim

    def dlpack_source(self, prim):
        return _Export(prim, self._scope_of(prim))

    def ascontiguous(self, prim):
        """``prim`` itself when C-contiguous, else a contiguous copy on the calling thread's
        stream (what Fusion does with a buffer its kernels cannot index)."""
        if prim.flags.c_contiguous:
            return prim
        scope = self._scope_of(prim, leaving=False)
        try:
            with scope:
                out = self.contiguous(prim)
                if scope.order.tracking:
                    scope.order.after(scope, out, None)
        except self._oom as e:
            raise memory.out_of_memory(self.cp, "ascontiguous", e, prim.device.id) from None
        return out

    def cuda_array_interface(self, prim) -> dict:
        """``__cuda_array_interface__`` (v3) of a primitive: its ``stream`` is the one its
        pending work is queued on."""
        with self._scope_of(prim):
            return prim.__cuda_array_interface__

    def from_dlpack(self, obj, device):
        dev = tuple(obj.__dlpack_device__()) if hasattr(obj, "__dlpack_device__") else None
        if dev is not None and int(dev[0]) not in _DL_CUDA:
            raise DeviceError(f"from_dlpack: the source lives on DLPack device type "
                              f"{int(dev[0])} (not CUDA), and {device} shares GPU memory "
                              f"only; copy it with em.tensor(..., device=...)")
        if dev is not None and int(dev[1]) != device.index:
            raise DeviceError(f"from_dlpack: the source lives on cuda:{int(dev[1])}, not on "
                              f"{device}; move it there first, or import it on "
                              f"cuda:{int(dev[1])}")
        with self.scope(device.index):   # the producer orders its work before our stream
            arr = self.cp.from_dlpack(obj)
        return arr

    # -- synchronization and memory -------------------------------------------------------
    def sync(self, device):
        """Wait for all work queued on the device, by every thread."""
        with self.cp.cuda.Device(device.index):
            self.cp.cuda.Device(device.index).synchronize()
        scope = self._tls.__dict__.get(device.index)
        if scope is not None:     # (a thread without a scope there queued no checks: making
            self._raise_found(scope)     # one would add a stream, and stream tracking)

    # -- random streams -------------------------------------------------------------------
    def _rng(self, device):
        g = self._rngs.get(device.index)
        if g is None:
            with self._lock:
                g = self._rngs.get(device.index)
                if g is None:
                    g = self._rngs[device.index] = self._new_rng(device.index, None)
        return g

    def _new_rng(self, index, seed):
        with self.scope(index):
            return self.cp.random.default_rng(seed)

    def seed(self, device, seed):
        g = self._new_rng(device.index, seed)
        with self._lock:
            self._rngs[device.index] = g

    # -- kernel runtime (what Fusion(Cuda) runs generated kernels on) ---------------------
    def _raw_kernel_runtime(self):
        """The kernel runtime itself, or None (no scope of its own: what launches on it --
        copies, attention_backward's kernel -- runs inside an op's)."""
        rt = self.kernel_runtime
        return None if rt is None else rt._rt

    @property
    def kernel_runtime(self):
        """The CUDA C kernel runtime (NVRTC), created on first use; None when it cannot run
        here (``kernel_runtime_reason`` says why; Fusion then runs unfused)."""
        rt = self.__dict__.get("_kernel_runtime", False)
        if rt is False:
            try:
                from ...kernel.cuda.runtime import default_runtime
                from .kernel_runtime import ScopedKernelRuntime
                r = default_runtime()
                if r.available():
                    rt = ScopedKernelRuntime(r, self)   # on this backend's streams
                else:
                    self.kernel_runtime_reason = r.why_unavailable()
                    rt = None
            except ImportError as e:
                self.kernel_runtime_reason = f"the CUDA kernel runtime cannot be imported ({e})"
                rt = None
            self._kernel_runtime = rt
        return rt

    def describe(self) -> str:
        return "cuda"


class _Export:
    """What ``Tensor.__dlpack__`` exports: the CuPy array, with the consumer's stream ordered
    after the exporting thread's stream."""

    __slots__ = ("prim", "scope")

    def __init__(self, prim, scope):
        self.prim, self.scope = prim, scope

    def __dlpack__(self, *args, **kwargs):
        with self.scope:
            return self.prim.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.prim.__dlpack_device__()


def _concatenate(cp):
    """The backend's `concat.Concatenate`, or None where CuPy has no driver binding (the
    namespace keeps CuPy's concatenate)."""
    try:
        from .concat import Concatenate
        return Concatenate(cp)
    except ImportError:
        return None


def bf16_bits(prim):
    """A bf16 primitive's storage as uint16 (for kernels that take bf16 as bits)."""
    return prim.view(_U16) if prim.dtype == BF16 else prim


__all__ = ["Cuda", "BackendUnavailableError", "bf16_bits"]
