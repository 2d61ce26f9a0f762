"""Per-thread op streams: recording, liveness, flushing.

Each thread has its own stream per Fusion backend. An op recorded there becomes a `Node`
(op, inputs, static args, shape, dtype); the tensor gets a `FusionPrim`, a handle the node
watches through a weak reference. When a result is needed, the stream *flushes* the nodes it
depends on: the nodes whose values are still wanted afterwards (a live handle, a pending op
that reads them, the requested ones) are materialized; every other intermediate lives only
inside a kernel. A node pending in another thread's stream is flushed under that stream's
lock; recording never holds two stream locks, so streams cannot deadlock.
"""
from __future__ import annotations

import sys
import threading
import time
import warnings
import weakref

import numpy as np

from ... import dtype as dt
from ...ops.registry import OPS
from . import stats as S  # the module (the package re-exports stats() the function)
from .lower import split_broadcast
from .planner import RED, PNode, Planner, _KernelStep, strict_mode

MAX_PENDING = 256
_PY_SCALARS = (float, int, bool)


class Node:
    __slots__ = ("kind", "op", "attrs", "akey", "inputs", "shape", "dtype", "stream", "ref",
                 "value", "nusers", "seq", "dev", "__weakref__")

    def __init__(self, kind, op, attrs, akey, inputs, shape, dtype, stream, dev, seq):
        self.kind = kind
        self.op = op            # registry Op (ew, view) or "sum"/"prod"/"max"/"min" (red)
        self.attrs = attrs
        self.akey = akey        # hashable form of attrs
        self.inputs = inputs    # Node | inner primitive | Python scalar; None once flushed
        self.shape = shape
        self.dtype = dtype
        self.stream = stream
        self.ref = None         # weakref to the FusionPrim handle, if any
        self.value = None       # the inner primitive once materialized
        self.nusers = 0         # pending nodes reading this one
        self.seq = seq
        self.dev = dev          # the inner device

    @property
    def name(self):
        return self.op if self.kind == RED else self.op.name

    def __repr__(self):
        state = "ready" if self.value is not None else (
            "pending" if self.inputs is not None else "dropped")
        return f"<fusion node {self.name} {self.shape} {self.dtype.short} {state}>"


class FusionPrim:
    """A Fusion primitive: a handle on a recorded node (pending, or holding its value)."""
    __slots__ = ("node", "__weakref__")

    def __init__(self, node):
        self.node = node

    @property
    def shape(self):
        return self.node.shape

    @property
    def dtype(self):
        return self.node.dtype.np

    def __repr__(self):
        return f"FusionPrim({self.node!r})"


def _alive(n) -> bool:
    r = n.ref
    return r is not None and r() is not None


class Stream:
    def __init__(self, backend):
        self.backend = backend
        self.lock = threading.RLock()
        self.pending = {}     # Node -> None, in recording order
        self._seq = 0

    # -- recording (the caller holds self.lock) --------------------------------------------
    def record(self, kind, op, attrs, akey, inputs, shape, dtype, dev, handle=True):
        self._seq += 1
        node = Node(kind, op, attrs, akey, inputs, shape, dtype, self, dev, self._seq)
        for x in inputs:
            if type(x) is Node:
                x.nusers += 1
        self.pending[node] = None
        S.add("recorded_ops")
        if not handle:
            return node
        prim = FusionPrim(node)
        node.ref = weakref.ref(prim)
        if len(self.pending) > MAX_PENDING:
            self.flush_alive()
        return prim

    # -- flushing --------------------------------------------------------------------------
    def materialize(self, node, everything=False):
        """The value of ``node`` (of this stream), flushing what it needs -- or, for a read
        (``everything``), every pending node still wanted, so that values computed together
        share kernels."""
        with self.lock:
            if node.value is None:
                if node.inputs is None:
                    raise RuntimeError(f"fusion: {node!r} was dropped while still referenced")
                if everything:
                    self.flush_alive(node)
                else:
                    self.flush([node])
        return node.value

    def flush_alive(self, also=None):
        """Materialize every pending node still wanted (and ``also``); drop the dead rest."""
        with self.lock:
            targets = [n for n in self.pending if n is also or _alive(n)]
            if targets:
                self.flush(targets)
            for n in self.pending:
                n.inputs = None
            self.pending.clear()

    def flush(self, targets):
        # the pending nodes the targets depend on, in recording order
        sub, seen, stack = [], set(), list(targets)
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            sub.append(n)
            for x in n.inputs:
                if type(x) is Node and x.value is None:
                    stack.append(x)
        sub.sort(key=lambda n: n.seq)
        parts, ins_all, outs, ext_vals, ext_sig, scalars, raw = _describe(sub, targets)
        key = (parts, ext_sig)
        backend = self.backend
        S.add("flushes")
        try:
            plan = backend.plans.get(key)
            if plan is None:
                S.add("plan_cache_misses")
                t0 = time.perf_counter()
                pnodes = [PNode(n.kind, n.op, n.attrs, n.shape, n.dtype, ins_all[i], outs[i])
                          for i, n in enumerate(sub)]
                plan = Planner(pnodes, ext_sig, strict=strict_mode()).plan()
                S.add("plan_time_s", time.perf_counter() - t0)
                _compile(plan, backend.runtime)
                if S.log_enabled():
                    _log_plan(plan, sub, backend.runtime)
                backend.plans.put(key, plan)
            else:
                S.add("plan_cache_hits")
            vals = _run(plan, sub, ext_vals, scalars, backend.runtime, raw)
        except Exception as e:
            if strict_mode():
                raise
            _warn_once(e)
            vals = _run_unfused(sub, ins_all, ext_vals, scalars)
        for i, n in enumerate(sub):
            if outs[i]:
                n.value = vals[i]
            n.inputs = None
            self.pending.pop(n, None)


def _describe(sub, targets):
    """The structure of ``sub`` (the plan-cache key's parts), each node's inputs as relative
    ids, which nodes are needed afterwards, the external buffers (values and signatures),
    the scalars, and per external buffer how many pending-node inputs hold it directly."""
    pos = {n: i for i, n in enumerate(sub)}
    tset = set(targets)
    internal = [0] * len(sub)
    ext_vals, ext_sig, ext_ids, scalars, raw = [], [], {}, [], []
    ins_all = []
    for n in sub:
        ins = []
        for x in n.inputs:
            t = type(x)
            direct = 1
            if t is Node:
                p = pos.get(x)
                if p is not None:
                    internal[p] += 1
                    ins.append(p)
                    continue
                v = x.value
                direct = 0
            elif t in _PY_SCALARS:
                ins.append(("s", len(scalars)))
                scalars.append(x)
                continue
            else:
                v = x
            k = ext_ids.get(id(v))
            if k is None:
                k = len(ext_vals)
                ext_ids[id(v)] = k
                arr, sig = _ext(v)
                ext_vals.append(arr)
                ext_sig.append(sig)
                raw.append(0)
            # a buffer reached through a node's value is never reused in place
            raw[k] = raw[k] + direct if direct and raw[k] >= 0 else -1
            ins.append(("x", k))
        ins_all.append(tuple(ins))
    outs = [n in tset or _alive(n) or n.nusers > internal[i] for i, n in enumerate(sub)]
    parts = tuple((n.kind, n.op, n.akey, n.shape, n.dtype, ins_all[i], outs[i])
                  for i, n in enumerate(sub))
    return parts, ins_all, outs, ext_vals, tuple(ext_sig), scalars, raw


def _ext(v):
    """An external buffer as an array the kernels can read, and its signature."""
    arr = v if type(v) is np.ndarray else np.asarray(v)
    isz = arr.itemsize
    st = arr.strides
    if any(s % isz for s in st):
        arr = np.ascontiguousarray(arr)
        st = arr.strides
    return arr, (arr.shape, dt.from_numpy(arr.dtype), tuple(s // isz for s in st))


_warned = set()


def _warn_once(e):
    k = type(e).__name__
    if k in _warned:
        return
    _warned.add(k)
    warnings.warn(f"ember.fusion: a fused plan failed ({type(e).__name__}: {e}); running "
                  f"these ops unfused (set EMBER_FUSION_STRICT=1 to raise)", RuntimeWarning,
                  stacklevel=3)


def _compile(plan, runtime):
    features = getattr(runtime, "features", ())
    for s in plan.steps:
        if not isinstance(s, _KernelStep):
            continue
        k = s.kernel
        if getattr(k, "broadcast", False) and "broadcast_reduce" not in features:
            s.split = split_broadcast(k)
            ks = s.split
        else:
            ks = (k,)
        t0 = time.perf_counter()
        s.programs = tuple(runtime.compile(x) for x in ks)
        S.add("compile_time_s", time.perf_counter() - t0)
        S.add("compiles", len(ks))


def _log_plan(plan, sub, runtime):
    lines = [plan.describe(), "  nodes: " + ", ".join(
        f"{i}:{n.name}{list(n.shape)}" for i, n in enumerate(sub))]
    src = getattr(runtime, "source", None)
    for s in plan.steps:
        if isinstance(s, _KernelStep) and src is not None:
            for p in s.programs:
                try:
                    lines.append(src(p))
                except Exception as e:  # logging must never break a run
                    lines.append(f"(no source: {e})")
        elif isinstance(s, _KernelStep):
            for p in s.programs:
                lines.append(str(getattr(p, "source", None) or repr(p)))
    S.log("\n".join(lines))


def _reusable(ext_vals, k, raw, ins) -> bool:
    """Whether external buffer ``k`` may be overwritten: an array owning its memory, held by
    nothing but this flush (no tensor, no view, no node outside it)."""
    if raw[k] <= 0:
        return False
    a = ext_vals[k]
    if type(a) is not np.ndarray or not (a.flags.c_contiguous and a.flags.owndata and
                                         a.flags.writeable):
        return False
    n_ins = sum(1 for x in ins if x is a)
    # references: ext_vals, the local ``a``, getrefcount's argument, the pending nodes'
    # inputs, and this step's input list
    return sys.getrefcount(a) == 3 + raw[k] + n_ins


def _run(plan, sub, ext_vals, scalars, runtime, raw=None):
    vals = [None] * len(sub)
    launch = runtime.launch
    launch_into = getattr(runtime, "launch_into", None) if raw is not None else None
    for s in plan.steps:
        if type(s) is _KernelStep:
            ins = [ext_vals[r[1]] if type(r) is tuple else vals[r] for r in s.in_refs]
            args = [scalars[j] if r is None else float(r(scalars[j])) for j, r in s.arg_refs]
            progs = s.programs
            if len(progs) == 2:       # a broadcast reduction split in two
                (mid,) = launch(progs[0], ins, args)
                outs = launch(progs[1], ins + [mid], args)
                S.add("kernels", 2)
            elif s.reuse and launch_into is not None and any(
                    _reusable(ext_vals, k, raw, ins) for _, k in s.reuse):
                outs = _launch_in_place(s, progs[0], ins, args, ext_vals, raw, launch_into)
                S.add("kernels")
            else:
                outs = launch(progs[0], ins, args)
                S.add("kernels")
            for (p, shape), o in zip(s.outs, outs):
                vals[p] = o if o.shape == shape else o.reshape(shape)
        else:
            n = sub[s.pos]
            ins = []
            for x in s.node.ins:
                if type(x) is int:
                    ins.append(vals[x])
                elif x[0] == "x":
                    ins.append(ext_vals[x[1]])
                else:
                    ins.append(scalars[x[1]])
            vals[s.pos] = np.ascontiguousarray(_run_inner(n, ins))
    return vals


def _launch_in_place(s, prog, ins, args, ext_vals, raw, launch_into):
    """Launch ``s`` writing outputs into dead input buffers read at the same positions."""
    kshape = s.kernel.shape
    outs = [None] * len(s.outs)
    for o, k in s.reuse:
        if outs[o] is None and _reusable(ext_vals, k, raw, ins):
            outs[o] = ext_vals[k]
            S.add("buffers_reused")
    for o, (p, shape) in enumerate(s.outs):
        if outs[o] is None:
            outs[o] = np.empty(shape, s.kernel.out_dtypes[o].np)
    launch_into(prog, ins, args, [a.reshape(kshape) for a in outs])
    return outs


def _run_inner(n, ins):
    dev = n.dev
    S.add("inner_ops")
    if n.kind == RED:
        op = OPS[n.op]
        attrs = {"dims": (n.attrs["axis"],), "keepdim": True}
    else:
        op, attrs = n.op, n.attrs
    return dev._execute(op, tuple(ins), attrs, (n.shape, n.dtype), dev)


def _run_unfused(sub, ins_all, ext_vals, scalars):
    vals = [None] * len(sub)
    for i, n in enumerate(sub):
        ins = []
        for x in ins_all[i]:
            if type(x) is int:
                ins.append(vals[x])
            elif x[0] == "x":
                ins.append(ext_vals[x[1]])
            else:
                ins.append(scalars[x[1]])
        vals[i] = _run_inner(n, ins)
    return vals


__all__ = ["Node", "FusionPrim", "Stream"]
