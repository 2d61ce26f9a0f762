"""Fusion(inner): records ops lazily and runs them as generated kernels (DESIGN.md §5).

``Fusion.execute`` records what kernels can hold -- elementwise ops (those with an IR
``expr``), views (reshape, expand, permute, slice, unfold) and the reductions sum, prod, max
and min -- and returns `FusionPrim` handles. Any other op (matmul, conv, sort, indexing,
creation, random ...) first materializes the inputs it needs and runs on the inner backend.
Reads (``to_numpy``, ``native``, DLPack), ``sync`` and a bound on the stream's length flush.

A reduction over several dims is recorded as one single-dim reduction per dim (innermost
first, keeping dims), then a reshape and a cast; f16/bf16 sums and products accumulate in
f32 and bool ones in i64, as on NdArray.

Without a kernel runtime (no C compiler) the backend is a pass-through: primitives are the
inner backend's own, and results are those of the inner backend.
"""
from __future__ import annotations

import threading
import weakref

from ... import dtype as dt
from ...errors import AutodiffError
from ...ops.registry import OPS
from ..base import Backend
from . import runtime as _rt
from .cache import PlanCache
from .stats import add as _stat_add
from .planner import EW, RED, VIEW
from .stream import FusionPrim, Node, Stream

_EW_CATEGORIES = frozenset({"unary", "binary", "cast", "other"})
_VIEWS = frozenset({"reshape", "expand", "permute", "slice", "unfold"})
_REDUCTIONS = frozenset({"sum", "prod", "max", "min"})
_HALF = (dt.float16, dt.bfloat16)


def _akey(attrs):
    return tuple(attrs.items()) if attrs else ()


class Fusion(Backend):
    """``Fusion(inner)``: lazy recording and generated kernels over ``inner``'s kernel
    runtime. ``runtime`` picks it: ``"auto"`` (``inner.kernel_runtime``, overridable with
    ``EMBER_FUSION_RUNTIME``), ``"interpret"`` (the IR interpreter, for tests) or ``"none"``.
    """

    def __init__(self, inner: Backend, runtime: str = "auto"):
        if inner.is_autodiff:
            raise AutodiffError(f"Fusion: wrap the backend before Autodiff, as "
                                f"Autodiff(Fusion({inner.inner.describe()})); "
                                f"Fusion({inner.describe()}) would record no gradients")
        super().__init__()
        self.inner = inner
        self.kind = inner.kind
        self.runtime = _rt.resolve(inner, runtime)
        self.plans = PlanCache()
        self._local = threading.local()
        self._kinds = {}
        self.execute = self._execute_fused if self.runtime is not None else self._passthrough

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
        self._kinds[op] = k
        return k

    def _execute_fused(self, op, prims, attrs, meta, device):
        kind = self._kinds.get(op)
        if kind is None:
            kind = self._classify(op)
        if not kind or 0 in meta[0]:
            return self._inner(op, prims, attrs, meta, device)
        stream = self._stream()
        # values pending in another thread's stream are materialized first, under that
        # stream's lock (never while holding ours)
        for p in prims:
            if type(p) is FusionPrim:
                n = p.node
                if n.value is None and n.stream is not stream:
                    n.stream.materialize(n)
        if kind is RED:
            p = prims[0]
            if type(p) is FusionPrim:
                shape, xd = p.node.shape, p.node.dtype
            else:
                shape, xd = tuple(getattr(p, "shape", ())), dt.from_numpy(p.dtype)
            name = op.name
            if name in ("sum", "prod") and (xd in _HALF or xd is dt.bool_):
                acc = dt.float32 if xd in _HALF else dt.int64
            else:
                acc = xd
            if 0 in shape or (name in ("max", "min") and xd is dt.bool_) or (
                    (acc is not xd or acc is not meta[1]) and OPS["cast"].expr is None):
                return self._inner(op, prims, attrs, meta, device)
        elif kind is VIEW:
            p = prims[0]
            if type(p) is not FusionPrim or p.node.value is not None or 0 in p.node.shape:
                # a view of a ready value is the inner backend's own view: no kernel, no copy
                dev = device.inner
                return dev._execute(op, (_value(p) if type(p) is FusionPrim else p,), attrs,
                                    meta, dev)
        with stream.lock:
            ins = []
            for p in prims:
                if type(p) is FusionPrim:
                    n = p.node
                    ins.append(n if n.value is None else n.value)
                else:
                    ins.append(p)
            if kind is RED:
                return self._record_reduce(stream, op, ins[0], shape, xd, acc, attrs, meta,
                                           device)
            return stream.record(kind, op, attrs, _akey(attrs), tuple(ins), meta[0], meta[1],
                                 device.inner)

    def _record_reduce(self, stream, op, x, shape, xd, acc, attrs, meta, device):
        name = op.name
        cast = OPS["cast"]
        dev = device.inner
        cur = x
        recorded = False
        if acc is not xd:
            a = {"dtype": acc}
            cur = stream.record(EW, cast, a, _akey(a), (cur,), shape, acc, dev, handle=False)
            recorded = True
        cur_shape = shape
        for d in reversed(attrs["dims"]):
            if cur_shape[d] == 1:
                continue
            cur_shape = cur_shape[:d] + (1,) + cur_shape[d + 1:]
            a = {"axis": d}
            cur = stream.record(RED, name, a, (("axis", d),), (cur,), cur_shape, acc, dev,
                                handle=False)
            recorded = True
        out_shape, out_dtype = meta
        reshape = OPS["reshape"]
        if cur_shape != out_shape or not recorded:
            a = {"shape": out_shape}
            cur = stream.record(VIEW, reshape, a, _akey(a), (cur,), out_shape, acc, dev,
                                handle=False)
        if acc is not out_dtype:
            a = {"dtype": out_dtype}
            cur = stream.record(EW, cast, a, _akey(a), (cur,), out_shape, out_dtype, dev,
                                handle=False)
        prim = FusionPrim(cur)
        cur.ref = weakref.ref(prim)
        return prim

    def _inner(self, op, prims, attrs, meta, device):
        """Run ``op`` on the inner backend, materializing pending inputs."""
        vals = tuple(_value(p) if type(p) is FusionPrim else p for p in prims)
        dev = device.inner
        _stat_add("inner_ops")
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
        s = getattr(self._local, "stream", None)
        if s is not None:
            s.flush_alive()
        self.inner.sync(device.inner)


def _read(p: FusionPrim):
    """The value of ``p`` for a read: the stream's pending work is flushed with it."""
    n = p.node
    v = n.value
    if v is None:
        v = n.stream.materialize(n, everything=True)
    return v


def _value(p: FusionPrim):
    n = p.node
    v = n.value
    if v is None:
        v = n.stream.materialize(n)
    return v
