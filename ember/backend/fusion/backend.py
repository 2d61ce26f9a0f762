"""Fusion(inner): records ops lazily and runs them as generated kernels (DESIGN.md §5).

``Fusion.execute`` records what kernels can hold -- elementwise ops (those with an IR
``expr``), views (reshape, expand, permute, slice, unfold) and the reductions sum, prod, max
and min -- and returns `FusionPrim` handles. Any other op (matmul, conv, sort, indexing,
creation, random ...) first materializes the inputs it needs and runs on the inner backend.
Reads (``to_numpy``, ``native``, DLPack), ``sync`` and a bound on the stream's length flush.
Where a kernel cannot pay -- small tensors with ready inputs, mostly -- a fusable op runs at
once on the inner backend too (``min_numel``; docs/fusion.md, "Small ops run at once").
An op that declares a ``decompose`` (a fused primitive such as ``adam_update``) runs as that
decomposition -- Tensor ops on this device, recorded and fused like any others -- when its
output has at least ``min_numel`` elements (always, with ``min_numel=0``), and below that on
the CPU as its decomposition's one traced kernel, replayed (`replay.Replays`), or else as the
primitive on the inner backend; an op the inner backend lists in its
``fused_ops`` (it has a faster kernel of its own: layer norm on Cuda) always runs there.
On the CPU, a small elementwise op with ready inputs runs as its one-op kernel where that
measured faster than the inner backend (`replay.Replays.run_elementwise`), and max pooling
and cross-entropy run as kernels Fusion builds for them (`pooling.py`, `cross_entropy.py`).

A reduction over several dims is recorded as one single-dim reduction per dim (innermost
first, keeping dims), then a reshape and a cast; f16/bf16 sums and products accumulate in
f32 and bool ones in i64, as on NdArray.

Without a kernel runtime (no C compiler) the backend is a pass-through: primitives are the
inner backend's own, and results are those of the inner backend.
"""
from __future__ import annotations

import os
import threading
import weakref

import numpy as np

from ... import dtype as dt
from ...errors import AutodiffError
from ...ops.registry import OPS
from ..base import Backend
from . import runtime as _rt
from .cache import PlanCache
from .stats import EAGER, INNER, KERNEL, PROBE, REPLAY, VIEW_OP, OP_COUNTS as _OPS
from .planner import EW, RED, VIEW
from .cross_entropy import OPS as _CE_OPS, CrossEntropyKernels
from .pooling import OPS as _POOL_OPS, PoolKernels
from . import linear as _linear
from .stream import _SIGS, FusionPrim, Node, Stream, _transposed, numel, sig_of

_EW_CATEGORIES = frozenset({"unary", "binary", "cast", "other"})
_VIEWS = frozenset({"reshape", "expand", "permute", "slice", "unfold"})
_REDUCTIONS = frozenset({"sum", "prod", "max", "min"})
_HALF = (dt.float16, dt.bfloat16)
#: `_classify`'s kind of an op that Fusion runs as its ``decompose`` when large
DECOMP = "decomp"
#: `_classify`'s kind of an op that runs as kernels Fusion builds for it where it can
OP_KERNEL = "op_kernel"
#: `_classify`'s kind of an op run as the primitives it stands for (`linear.py`)
SPLIT = "split"
_wrap = None   # ember.tensor.dispatch.wrap, imported on first use (the Tensor API sits above)


#: below this many elements a fusable op with ready inputs runs on the inner backend (on 2^16
#: f32 a chain of 4 elementwise ops breaks even with NumPy on one thread, of 2 on two threads:
#: docs/fusion.md)
DEFAULT_MIN_NUMEL = 1 << 16
#: where kernels launch through ctypes (~3.3 µs a launch), a small primitive with a
#: decomposition runs as its replayed kernels (`replay.Replays`) from this many elements, on
#: the inner backend below (NumPy's passes of Adam's update on 2^11 f32 take about as long);
#: through the `fastcall` extension (~0.4 µs) it replays at every size
REPLAY_MIN_NUMEL = 1 << 11
#: from this many elements a small elementwise op with ready inputs is timed as its one-op
#: kernel against the inner backend, and the faster runs (`replay.Replays.run_elementwise`);
#: below, NumPy's one call always wins
PROBE_MIN_NUMEL = 1 << 12
#: a flushed stream part that is a single op runs on the inner backend below this many
#: elements (a kernel fusing one op only wins when it is large enough to run threaded)
SINGLE_OP_MIN = 1 << 17


def _min_numel(v) -> int:
    if v is None:
        env = os.environ.get("EMBER_FUSION_MIN_NUMEL", "")
        try:
            v = int(env) if env else DEFAULT_MIN_NUMEL
        except ValueError:
            raise ValueError(f"EMBER_FUSION_MIN_NUMEL={env!r}: expected a whole number of "
                             f"elements (0 fuses every op)") from None
    v = int(v)
    if v < 0:
        raise ValueError(f"Fusion: min_numel must be >= 0, got {v}")
    return v


def _shape_of(p):
    return p.node.shape if type(p) is FusionPrim else tuple(getattr(p, "shape", ()))


def _normalizes(ins, shape) -> bool:
    """Whether a pending input is broadcast into the op's output ``shape``: the op combines
    a tensor with statistics of it (the mean of a layer norm, the max of a softmax), which a
    reduce-then-broadcast kernel computes reading the input once in its own layout (a tiled
    sweep), where the inner backend makes a pass per op."""
    return any(type(x) is Node and x.shape != shape for x in ins)


def _transposes(prims, min_numel) -> bool:
    """Whether an input is a large array laid out other than row-major (`_transposed`):
    a kernel, which writes row-major, would copy it transposed."""
    for p in prims:
        if type(p) is np.ndarray and _transposed(p, min_numel):
            return True
    return False


def _mergeable(x, groups) -> bool:
    """Whether ``x`` is a ready array (NumPy's or the inner backend's, a CuPy array on
    Fusion(Cuda); not a pending node) whose dims in each group (runs of adjacent dims) merge
    into one strided dim."""
    if type(x) is Node:
        return False
    st, sh = getattr(x, "strides", None), getattr(x, "shape", None)
    if st is None or sh is None or len(st) != len(sh):
        return False
    return all(st[d] == st[d + 1] * sh[d + 1] for g in groups for d in g[:-1])


def _inputs(prims):
    """A recorded node's inputs: pending nodes, else values (call with the stream's lock)."""
    return tuple([(p.node if p.node.value is None else p.node.value)
                  if type(p) is FusionPrim else p for p in prims])


class Fusion(Backend):
    """``Fusion(inner)``: lazy recording and generated kernels over ``inner``'s kernel
    runtime. ``runtime`` picks it: ``"auto"`` (``inner.kernel_runtime``, overridable with
    ``EMBER_FUSION_RUNTIME``), ``"interpret"`` (the IR interpreter, for tests) or ``"none"``.

    ``min_numel``: a fusable op whose inputs are all ready and whose output has fewer
    elements runs at once on the inner backend, unrecorded -- on tensors that small,
    recording and a kernel launch cost more than the op. So do, when ``min_numel`` is not 0,
    ready reductions and single-op stream parts below ``SINGLE_OP_MIN`` elements, and ops
    that would read a large input transposed (docs/fusion.md, "Small ops run at once").
    ``None``: ``EMBER_FUSION_MIN_NUMEL``, else `DEFAULT_MIN_NUMEL`; ``0`` records and fuses
    every op (the conformance stacks and the fusion tests).
    """

    def __init__(self, inner: Backend, runtime: str = "auto", min_numel: int | None = None):
        if inner.is_autodiff:
            raise AutodiffError(f"Fusion: wrap the backend before Autodiff, as "
                                f"Autodiff(Fusion({inner.inner.describe()})); "
                                f"Fusion({inner.describe()}) would record no gradients")
        super().__init__()
        self.inner = inner
        self.kind = inner.kind
        self.runtime = _rt.resolve(inner, runtime)
        self._runtime_arg = runtime
        self.min_numel = _min_numel(min_numel)
        #: small decomposable primitives of at least `replay_min` elements replayed as
        #: cached kernels (`replay.Replays`, made on first use); False: off
        #: (``EMBER_FUSION_REPLAY=0``, no kernel runtime, everything recorded, or a GPU,
        #: where it has not been measured yet)
        self._replays = None if (self.min_numel and self.runtime is not None and
                                 inner.kind == "cpu" and
                                 os.environ.get("EMBER_FUSION_REPLAY", "1") != "0") else False
        #: from this many elements a small primitive replays (every size where kernels
        #: launch through the C runtime's `fastcall` extension)
        self.replay_min = 0 if getattr(self.runtime, "fast_launch", False) \
            else REPLAY_MIN_NUMEL
        #: a flushed part that is a single op on fewer elements runs on the inner backend
        self.single_below = max(self.min_numel, SINGLE_OP_MIN) if self.min_numel else 0
        self.plans = PlanCache()
        self._local = threading.local()
        self._kinds = {}
        self._small = {}      # shape -> whether ops of that size run on the inner backend
        self._small_red = {}  # input shape -> True: reductions of it run there
        self._how = {}        # op -> {output shape: `_decide`'s verdict}
        #: Sigs of ops last flushed alone, with ready inputs: such ops run on the inner
        #: backend at once (the same computation, without recording and planning)
        self.alone = set()
        self.execute = self._execute_fused if self.runtime is not None else self._passthrough
        #: ops with a decomposition that the inner backend runs as one kernel of its own
        #: (``Backend.fused_ops``: layer norm on Cuda): they run there, not decomposed
        self._fused_inner = frozenset(getattr(inner, "fused_ops", ()))
        #: op name -> the kernels Fusion builds for that op (max pooling, cross-entropy:
        #: ops without an IR expr that NumPy runs in many passes), on the CPU (Cuda has
        #: kernels of its own for them); none without a kernel runtime or with
        #: ``EMBER_FUSION_OP_KERNELS=0``
        self._op_kernels = {}
        if self.runtime is not None and inner.kind == "cpu" and \
                os.environ.get("EMBER_FUSION_OP_KERNELS", "1") != "0":
            pool, ce = PoolKernels(self.runtime), CrossEntropyKernels(self.runtime)
            self._op_kernels = {**dict.fromkeys(_POOL_OPS, pool),
                                **dict.fromkeys(_CE_OPS, ce)}
        #: user kernels registered on the inner backend (by op name): those ops are not fused
        self._custom = getattr(inner, "custom_kernels", None)
        if self._custom is not None and self.runtime is not None:
            self.execute = self._execute_custom_aware

    def describe(self):
        return f"fusion({self.inner.describe()})"

    @property
    def name(self):
        return self.describe()

    @property
    def fusing(self) -> bool:
        """Whether ops are fused (False: no kernel runtime, everything runs unfused)."""
        return self.runtime is not None

    # -- the op path ----------------------------------------------------------------------
    def _passthrough(self, op, prims, attrs, meta, device):
        dev = device.inner
        return dev._execute(op, prims, attrs, meta, dev)

    def _stream(self) -> Stream:
        s = getattr(self._local, "stream", None)
        if s is None:
            s = self._local.stream = Stream(self)
        return s

    def _classify(self, op):
        k = 0
        if op.nout == 1:
            if op.expr is not None and op.category in _EW_CATEGORIES:
                k = EW
            elif op.category == "view" and op.name in _VIEWS:
                k = VIEW
            elif op.category == "reduce" and op.name in _REDUCTIONS:
                k = RED
        if not k and op.name in _linear.OPS and op.name not in self._fused_inner:
            k = SPLIT
        if not k and op.decompose is not None and op.name not in self._fused_inner:
            k = DECOMP
        if not k and op.name in self._op_kernels:
            k = OP_KERNEL
        self._kinds[op] = k
        return k

    def _execute_fused(self, op, prims, attrs, meta, device):
        for p in prims:
            if type(p) is FusionPrim:
                return self._execute_handles(op, prims, attrs, meta, device)
        # every input is a ready inner primitive (or a Python scalar): the common path. How
        # an op of this output shape runs is decided once: at once on the inner backend
        # (small elementwise ops, views, ops fusion cannot hold), or through `_record`.
        try:
            how = self._how[op][meta[0]]
        except KeyError:            # the first op of its kind and output shape
            how = self._decide(op, meta[0])
        if how:
            if how < REPLAY:        # EAGER, INNER, VIEW_OP: at once on the inner backend
                _OPS[how] += 1
                dev = device.inner
                return dev._execute(op, prims, attrs, meta, dev)
            if how == REPLAY:
                out = self._replay(op, prims, attrs, meta, device)
                if out is not None:
                    return out
                how = INNER
            elif how == PROBE:
                out, again = self._replays_of().run_elementwise(op, prims, attrs, meta, device)
                if not again:
                    self._how[op][meta[0]] = EAGER
                return out
            elif how == KERNEL:
                out = self._op_kernels[op.name].run(op, prims, attrs, meta)
                if out is not None:
                    return out
                how = INNER
            _OPS[how] += 1
            dev = device.inner
            return dev._execute(op, prims, attrs, meta, dev)
        kind = self._kinds.get(op)
        if kind is RED and self._small_red.get(getattr(prims[0], "shape", None)):
            # a reduction of a ready input below the single-op size: there is no prologue
            # to fuse, and the inner reduction over several dims is one pass (kernels: one
            # per dim)
            _OPS[EAGER] += 1
            dev = device.inner
            return dev._execute(op, prims, attrs, meta, dev)
        if kind is DECOMP:
            return self._decomposed(op, prims, attrs, device)
        if kind is SPLIT:
            return self._split(prims, attrs, meta, device)
        return self._record(op, kind, prims, None, attrs, meta, device)

    def _decide(self, op, shape) -> int:
        """How ``op`` with ready inputs and output ``shape`` (``meta[0]``: for an op of
        several outputs, the first one's (shape, dtype)) runs: `EAGER` (a small elementwise
        op), `PROBE` (one large enough to time its kernel against the inner backend's op),
        `INNER` (an op fusion cannot hold, or a small one with a decomposition), `REPLAY`
        (that, replayed), `KERNEL` (an op with kernels of Fusion's own), `VIEW_OP` (a view:
        the inner backend's own), or 0 (`_record` decides, or a large op with a
        decomposition runs it)."""
        kind = self._kinds.get(op)
        if kind is None:
            kind = self._classify(op)
        if not kind:
            how = INNER
        elif kind is OP_KERNEL:
            how = KERNEL
        elif kind is VIEW:
            how = VIEW_OP
        elif kind is EW and self._is_small(shape):
            how = PROBE if self._replays is not False and numel(shape) >= PROBE_MIN_NUMEL \
                else EAGER
        elif kind is DECOMP:
            first = shape if op.nout == 1 else shape[0]
            how = 0 if not self._is_small(first) else \
                REPLAY if self._replays is not False and numel(first) >= self.replay_min \
                else INNER
        else:
            how = 0
        by_shape = self._how.get(op)
        if by_shape is None:
            by_shape = self._how[op] = {}
        elif len(by_shape) > 1024:
            by_shape.clear()
        by_shape[shape] = how
        return how

    def _execute_handles(self, op, prims, attrs, meta, device):
        """``_execute_fused`` when some inputs are Fusion handles (pending, or holding their
        values)."""
        kind = self._kinds.get(op)
        if kind is None:
            kind = self._classify(op)
        if not kind:
            return self._inner(op, prims, attrs, meta, device)
        if kind is SPLIT:
            return self._split(prims, attrs, meta, device)
        if kind is OP_KERNEL:
            vals = _values(prims)
            out = self._op_kernels[op.name].run(op, vals, attrs, meta)
            if out is not None:
                return out
            return self._inner(op, vals, attrs, meta, device)
        if kind is DECOMP:
            first = meta[0] if op.nout == 1 else meta[0][0]
            if self._is_small(first):
                if self._replays is not False and numel(first) >= self.replay_min:
                    vals = _values(prims)
                    out = self._replay(op, vals, attrs, meta, device)
                    if out is not None:
                        return out
                return self._inner(op, prims, attrs, meta, device)
            return self._decomposed(op, prims, attrs, device)
        try:
            stream = self._local.stream
        except AttributeError:
            stream = self._stream()
        pending = False
        ins = []
        for p in prims:
            if type(p) is FusionPrim:
                n = p.node
                if n.value is None:
                    if n.stream is stream:
                        pending = True
                        ins.append(n)
                        continue
                    # pending in another thread's stream: materialized first, under that
                    # stream's lock (never while holding ours)
                    n.stream.materialize(n)
                ins.append(n.value)
            else:
                ins.append(p)
        # (a pending node that another thread flushes meanwhile is read through its value)
        ins = tuple(ins)
        if not pending:
            # every input is ready: as in the common path
            if kind is VIEW or (kind is EW and self._is_small(meta[0])):
                if kind is EW:
                    _OPS[EAGER] += 1
                dev = device.inner
                return dev._execute(op, ins, attrs, meta, dev)
            return self._record(op, kind, ins, None, attrs, meta, device)
        if kind is EW:
            shape = meta[0]
            if self.min_numel and len(shape) > 1 and _transposes(ins, self.min_numel) and \
                    not _normalizes(ins, shape):
                # a kernel would copy a large input transposed (a conv output in
                # channels-last order, say): its pending inputs are computed, and the op
                # runs on the inner backend, which keeps the input's memory order
                return self._inner(op, prims, attrs, meta, device, True)
            if 0 not in shape:
                # recorded, to fuse with what computes its pending inputs
                k = (EW, op, tuple(attrs.items()) if attrs else (), shape, meta[1])
                sig = _SIGS.get(k)
                if sig is None:
                    sig = sig_of(*k)
                with stream.lock:
                    return stream.record(sig, ins, device.inner)
        return self._record(op, kind, prims, stream, attrs, meta, device)

    def _execute_custom_aware(self, op, prims, attrs, meta, device):
        """``_execute_fused``, except that an op with a user kernel registered on the inner
        backend runs there (its inputs materialized), so the user's kernel runs as it is."""
        if self._custom and op.name in self._custom:
            return self._inner(op, prims, attrs, meta, device)
        return self._execute_fused(op, prims, attrs, meta, device)

    def _is_small(self, shape) -> bool:
        """Whether ops on tensors of ``shape`` run at once on the inner backend."""
        small = numel(shape) < self.min_numel
        if len(self._small) > 4096:
            self._small.clear()
        self._small[shape] = small
        return small

    def _record(self, op, kind, prims, stream, attrs, meta, device):
        """Record ``op`` in this thread's stream; ``stream`` is None when every input is
        ready, and then small reductions, ops whose structure last ran alone and ops that
        would read a large input laid out other than row-major run at once on the inner
        backend, as do ops whose kernel cannot be built (empty tensors, bool max/min ...)."""
        shape = meta[0]
        if 0 in shape:
            return self._inner(op, prims, attrs, meta, device)
        if kind is RED:
            p = prims[0]
            if type(p) is FusionPrim:
                xshape, xd = p.node.shape, p.node.dtype
            else:
                xshape, xd = tuple(getattr(p, "shape", ())), dt.from_numpy(p.dtype)
            name = op.name
            if name in ("sum", "prod") and (xd in _HALF or xd is dt.bool_):
                acc = dt.float32 if xd in _HALF else dt.int64
            else:
                acc = xd
            if stream is None and numel(xshape) < self.single_below:
                # a small ready input (see the common path in _execute_fused)
                if len(self._small_red) > 4096:
                    self._small_red.clear()
                self._small_red[xshape] = True
                return self._inner(op, prims, attrs, meta, device, True)
            if 0 in xshape or (name in ("max", "min") and xd is dt.bool_) or (
                    (acc is not xd or acc is not meta[1]) and OPS["cast"].expr is None):
                return self._inner(op, prims, attrs, meta, device)
            if stream is None:
                stream = self._stream()
            with stream.lock:
                return self._record_reduce(stream, op, _inputs(prims)[0], xshape, xd, acc,
                                           attrs, meta, device)
        k = (kind, op, tuple(attrs.items()) if attrs else (), shape, meta[1])
        sig = _SIGS.get(k)
        if sig is None:
            sig = sig_of(*k)
        if stream is None:
            if sig in self.alone or (self.min_numel and len(shape) > 1 and
                                     _transposes(prims, self.min_numel)):
                _OPS[EAGER] += 1
                dev = device.inner
                return dev._execute(op, prims, attrs, meta, dev)
            try:
                stream = self._local.stream
            except AttributeError:
                stream = self._stream()
            with stream.lock:
                return stream.record(sig, prims, device.inner, nodes=False)
        with stream.lock:
            return stream.record(sig, _inputs(prims), device.inner)

    def _record_reduce(self, stream, op, x, shape, xd, acc, attrs, meta, device):
        name = op.name
        cast = OPS["cast"]
        dev = device.inner
        cur = x
        recorded = False
        if acc is not xd:
            cur = stream.record(sig_of(EW, cast, (("dtype", acc),), shape, acc), (cur,), dev,
                                handle=False)
            recorded = True
        cur_shape = shape
        dims = sorted(d for d in set(attrs["dims"]) if shape[d] != 1)
        groups = []                   # runs of adjacent reduced dims
        for d in dims:
            if groups and groups[-1][-1] == d - 1:
                groups[-1].append(d)
            else:
                groups.append([d])
        if len(groups) < len(dims) and _mergeable(cur, groups):
            # adjacent reduced dims of a ready buffer merge into one (a reshape): one kernel
            # and one pass for them, where a kernel per dim would write and read an
            # intermediate (a pending input's dims cannot merge: reading a merged index of
            # it takes a division, which index maps do not hold)
            first = {g[0]: g for g in groups}
            merged, dims, d = [], [], 0
            while d < len(shape):
                g = first.get(d)
                if g is None:
                    merged.append(shape[d])
                    d += 1
                    continue
                dims.append(len(merged))
                n = 1
                for e in g:
                    n *= shape[e]
                merged.append(n)
                d = g[-1] + 1
            cur_shape = tuple(merged)
            cur = stream.record(sig_of(VIEW, OPS["reshape"], (("shape", cur_shape),),
                                       cur_shape, acc), (cur,), dev, handle=False)
            recorded = True
        for d in reversed(dims):
            cur_shape = cur_shape[:d] + (1,) + cur_shape[d + 1:]
            cur = stream.record(sig_of(RED, name, (("axis", d),), cur_shape, acc), (cur,), dev,
                                handle=False)
            recorded = True
        out_shape, out_dtype = meta
        if cur_shape != out_shape or not recorded:
            cur = stream.record(sig_of(VIEW, OPS["reshape"], (("shape", out_shape),),
                                       out_shape, acc), (cur,), dev, handle=False)
        if acc is not out_dtype:
            cur = stream.record(sig_of(EW, cast, (("dtype", out_dtype),), out_shape,
                                       out_dtype), (cur,), dev, handle=False)
        prim = FusionPrim(cur)
        cur.ref = weakref.ref(prim)
        return prim

    def _replay(self, op, prims, attrs, meta, device):
        """``op`` (small, with a decomposition, its inputs ready) as its traced kernels
        (`replay.Replays`), or None: it runs on the inner backend."""
        return self._replays_of().run(op, prims, attrs, meta, device)

    def _replays_of(self):
        """This backend's `replay.Replays`, made on first use."""
        r = self._replays
        if r is None:
            from .replay import Replays
            r = self._replays = Replays(Fusion(self.inner, self._runtime_arg, 0))
        return r

    def _split(self, prims, attrs, meta, device):
        """A `linear.OPS` op as the primitives it stands for, on this backend's op path."""
        return _linear.run(self.execute, prims, attrs, meta, device)

    def _decomposed(self, op, prims, attrs, device):
        """Run ``op`` as ``op.decompose``: Tensor ops on this device, which record and fuse
        (a large fused primitive, ``adam_update``, becomes one generated kernel rather than
        several NumPy passes on the inner backend)."""
        global _wrap
        if _wrap is None:
            from ...tensor.dispatch import wrap as _wrap
        ins = []
        for p in prims:
            if type(p) is FusionPrim:
                n = p.node
                ins.append(_wrap(p, device, n.shape, n.dtype))
            elif hasattr(p, "shape") and hasattr(p, "dtype"):
                ins.append(_wrap(p, device, tuple(p.shape), dt.from_numpy(p.dtype)))
            else:
                ins.append(p)             # a Python scalar
        out = op.decompose(*ins, **attrs)
        if op.nout == 1:
            return out._prim
        return tuple([t._prim for t in out])

    def _inner(self, op, prims, attrs, meta, device, eager=False):
        """Run ``op`` on the inner backend, materializing pending inputs (``eager``: a
        fusable op that runs there because a kernel would not pay)."""
        vals = _values(prims)
        dev = device.inner
        _OPS[EAGER if eager else INNER] += 1
        return dev._execute(op, vals, attrs, meta, dev)

    # -- data -----------------------------------------------------------------------------
    def from_numpy(self, array, device):
        return self.inner.from_numpy(array, device.inner)

    def to_numpy(self, prim):
        return self.inner.to_numpy(_read(prim) if type(prim) is FusionPrim else prim)

    def native(self, prim):
        return self.inner.native(_read(prim) if type(prim) is FusionPrim else prim)

    def dlpack_source(self, prim):
        return self.inner.dlpack_source(_read(prim) if type(prim) is FusionPrim else prim)

    def from_dlpack(self, obj, device):
        return self.inner.from_dlpack(obj, device.inner)

    def seed(self, device, seed):
        self.inner.seed(device.inner, seed)

    def sync(self, device):
        self.flush(device)
        self.inner.sync(device.inner)

    def flush(self, device):
        s = getattr(self._local, "stream", None)
        if s is not None and s.pending:
            s.flush_alive()
        self.inner.flush(device.inner)


def _read(p: FusionPrim):
    """The value of ``p`` for a read: the stream's pending work is flushed with it."""
    n = p.node
    v = n.value
    if v is None:
        v = n.stream.materialize(n, everything=True)
    return v


def _values(prims) -> tuple:
    """The values of an op's inputs: pending ones of one stream computed in one flush."""
    pending = None
    for p in prims:
        if type(p) is FusionPrim and p.node.value is None:
            if pending is None:
                pending = p
            elif pending is not True and p.node is not pending.node:
                pending = True          # two or more: flush them together
    if pending is True:
        nodes = [p.node for p in prims if type(p) is FusionPrim and p.node.value is None]
        streams = {n.stream for n in nodes}
        if len(streams) == 1:
            streams.pop().materialize_all(nodes)
    return tuple([_value(p) if type(p) is FusionPrim else p for p in prims])


def _value(p: FusionPrim):
    n = p.node
    v = n.value
    if v is None:
        v = n.stream.materialize(n)
    return v
