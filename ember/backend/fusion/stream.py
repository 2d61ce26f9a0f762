"""Per-thread op streams: recording, liveness, flushing.

Each thread has its own stream per Fusion backend. An op recorded there becomes a `Node`
(its interned `Sig` -- kind, op, static args, shape, dtype -- and its inputs); the tensor
gets a `FusionPrim`, a handle the node watches through a weak reference. When a result is
needed, the stream *flushes* the nodes it depends on: the nodes whose values are still
wanted afterwards (a live handle, a pending op that reads them, the requested ones) are
materialized; every other intermediate lives only inside a kernel. A flush builds the
plan-cache key (a flat tuple of ints, plus the external buffers' layouts), replays a cached
plan or plans a new one, and runs it. A node pending in another thread's stream is flushed
under that stream's lock; recording never holds two stream locks, so streams cannot
deadlock.
"""
from __future__ import annotations

import itertools
import math
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
from .memory_order import inverse, order_of, permuted
from .planner import EW, RED, PNode, Planner, _KernelStep, scalar_tag, strict_mode
from .runtime import compile_counted, launcher_of
from ...kernel.buffer_pool import default_pool
from ...kernel.strides import with_element_strides

# a kernel output in pooled memory: reusable in place when no other view reaches its block
_pool_sole_view = default_pool().owns_exclusively

MAX_PENDING = 256
_RECIPROCAL_KEY = 1 << 32     # marks a divisor planned as its reciprocal in a plan-cache key
_PY_SCALARS = (float, int, bool)

# A node's structure -- kind, op, static args, shape, dtype -- is interned as a `Sig` when it
# is recorded; its small int id stands for it in plan-cache keys, so that a key is a flat
# tuple of ints that hashes fast. Ids are never reused (the table is cleared when it grows
# large; keys made of old ids then simply miss).
_SIGS: dict = {}
_SIG_IDS = itertools.count(1)
MAX_SIGS = 1 << 16


class Sig:
    __slots__ = ("id", "kind", "op", "akey", "shape", "dtype", "attrs", "numel")

    def __init__(self, kind, op, akey, shape, dtype):
        self.id = next(_SIG_IDS)
        self.kind, self.op, self.akey, self.shape, self.dtype = kind, op, akey, shape, dtype
        self.attrs = dict(akey)
        self.numel = numel(shape)


def sig_of(kind, op, akey, shape, dtype) -> Sig:
    k = (kind, op, akey, shape, dtype)
    s = _SIGS.get(k)
    if s is None:
        if len(_SIGS) >= MAX_SIGS:
            _SIGS.clear()
        s = _SIGS.setdefault(k, Sig(kind, op, akey, shape, dtype))
    return s


_NUMELS: dict = {}


def numel(shape) -> int:
    n = _NUMELS.get(shape)
    if n is None:
        if len(_NUMELS) > 4096:
            _NUMELS.clear()
        n = _NUMELS[shape] = math.prod(shape)
    return n


class Node:
    """One recorded op: ``sig`` (its `Sig`), ``inputs`` (each a `Node`, an inner primitive
    or a Python scalar; None once flushed or dropped), ``value`` (the inner primitive once
    materialized), ``ref`` (a weak reference to its `FusionPrim` handle, if any), ``nusers``
    (pending nodes reading it), ``stream``, ``dev`` (the inner device) and ``seq`` (its
    place in the stream). Made by `Stream.record`."""
    __slots__ = ("sig", "inputs", "stream", "ref", "value", "nusers", "seq", "dev",
                 "__weakref__")

    kind = property(lambda self: self.sig.kind)
    op = property(lambda self: self.sig.op,
                  doc='registry Op (ew, view) or "sum"/"prod"/"max"/"min" (red)')
    akey = property(lambda self: self.sig.akey, doc="the static args, hashable")
    attrs = property(lambda self: self.sig.attrs)
    shape = property(lambda self: self.sig.shape)
    dtype = property(lambda self: self.sig.dtype)

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


_new = object.__new__
_wref = weakref.ref


def _seq_of(n):
    return n.seq


class _Entry:
    """A cached plan with what running it needs: per step a tuple for `_run`, the external
    buffers that must be copied first (strides not a multiple of the itemsize), and
    ``order``: None, or ``(perm, inverse, ndim)`` where the plan computes in the memory order
    of a transposed input (`_chain_order`)."""
    __slots__ = ("plan", "steps", "copies", "n_nodes", "unfused", "order")


class Stream:
    """One thread's pending ops for one Fusion backend. ``lock`` guards it: the owning
    thread records under it, and another thread that needs a pending value flushes under
    it."""

    def __init__(self, backend):
        self.backend = backend
        self.lock = threading.RLock()
        self.pending = {}     # Node -> None, in recording order
        self._seq = 0

    # -- recording (the caller holds self.lock) --------------------------------------------
    def record(self, sig, inputs, dev, handle=True, nodes=True):
        """Record a node; ``nodes=False`` promises that no input is a `Node`."""
        self._seq += 1
        node = _new(Node)
        node.sig = sig
        node.inputs = inputs
        node.stream = self
        node.dev = dev
        node.seq = self._seq
        node.value = node.ref = None
        node.nusers = 0
        if nodes:
            for x in inputs:
                if type(x) is Node:
                    x.nusers += 1
        pend = self.pending
        pend[node] = None
        if not handle:
            return node
        prim = _new(FusionPrim)
        prim.node = node
        node.ref = _wref(prim)
        if len(pend) > MAX_PENDING:
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

    def materialize_all(self, nodes):
        """`materialize` for several pending nodes of this stream at once: one flush, so an
        op reading them (attention's q, k and v) plans and launches their kernels together
        rather than a flush each."""
        with self.lock:
            targets = []
            for n in nodes:
                if n.value is None:
                    if n.inputs is None:
                        raise RuntimeError(f"fusion: {n!r} was dropped while still "
                                           f"referenced")
                    if n not in targets:
                        targets.append(n)
            if targets:
                self.flush(targets)

    def flush_alive(self, also=None):
        """Materialize every pending node still wanted (and ``also``); drop the dead rest."""
        with self.lock:
            pend = self.pending
            if not pend:
                return
            targets = [n for n in pend
                       if n is also or ((r := n.ref) is not None and r() is not None)]
            if targets:
                # every pending node: those no target needs are dead and get no kernel
                self.flush(targets, list(pend))
            if pend:
                S.counts().recorded_ops += len(pend)
                for n in pend:
                    n.inputs = None
                pend.clear()

    def needed(self, targets) -> list:
        """The pending nodes that computing ``targets`` needs, in recording order."""
        pend = self.pending
        seen, stack = set(), list(targets)
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            for x in n.inputs:
                if type(x) is Node and x.value is None:
                    stack.append(x)
        if len(seen) * 4 >= len(pend):
            return [n for n in pend if n in seen]
        return sorted(seen, key=_seq_of)

    def flush(self, targets, sub=None):
        """Compute the targets (pending nodes of this stream) and what they need, ``sub``
        (default: found from the targets), in recording order."""
        pend = self.pending
        if sub is None:
            sub = self.needed(targets)
        backend = self.backend
        c = S.counts()
        c.recorded_ops += len(sub)
        if len(sub) == 1 and sub[0].sig.numel < backend.single_below:
            # one small op: the inner backend runs it faster than a kernel launch, and
            # later ops of its structure with ready inputs go there at once
            n = sub[0]
            alone = backend.alone
            if len(alone) > 4096:
                alone.clear()
            alone.add(n.sig)
            n.value = _run_inner(n, [x.value if type(x) is Node else x for x in n.inputs],
                                 "eager_ops")
            n.inputs = None
            del pend[n]
            return
        key, ext_vals, scalars, raw, outs = plan_key(sub, targets, backend)
        c.flushes += 1
        E = len(ext_vals)
        try:
            entry = backend.plans.get(key)
            if entry is None:
                c.plan_cache_misses += 1
                entry = _new_entry(sub, targets, backend, ext_vals)
                backend.plans.put(key, entry)
            else:
                c.plan_cache_hits += 1
            if entry.unfused is not None:
                _run_inner_all(entry, sub, ext_vals, scalars)
            else:
                for k in entry.copies:
                    ext_vals[k] = backend.inner.ascontiguous(ext_vals[k])
                if entry.order is None:
                    _run(entry, sub, ext_vals, scalars, backend.runtime, raw, c)
                else:
                    _run_in_order(entry, sub, ext_vals, scalars, backend.runtime, outs, c)
            vals = ext_vals
        except Exception as e:
            if strict_mode():
                raise
            _warn_once(e)
            _, ins_all, _, exts, _, scalars, _ = _describe(sub, targets)
            vals = _run_unfused(sub, ins_all, exts, scalars)
            E = 0
        for j, n in enumerate(sub):
            if outs[j]:
                n.value = vals[E + j]
            n.inputs = None
            del pend[n]


def plan_key(sub, targets, backend):
    """The plan-cache key of flushing ``sub`` (pending nodes, in recording order) for
    ``targets``, with the external buffers, the scalars, per external buffer how many
    pending-node inputs hold it directly (-1: reached through a node's value), and per node
    whether its value is wanted afterwards."""
    # the plan-cache key: per node its structure id, its number of inputs and each as a
    # relative id (earlier nodes by position >= 0, external buffers -1-2k, scalars
    # -2-2j), and whether it is needed afterwards; per external buffer its shape, dtype
    # and strides
    pos = {}
    flat = []
    internal = [0] * len(sub)
    ext_vals, ext_key, ext_ids, scalars, raw = [], [], {}, [], []
    i = 0
    for n in sub:
        pos[n] = i
        i += 1
        ins = n.inputs
        flat.append(n.sig.id)
        flat.append(len(ins))
        for x in ins:
            t = type(x)
            if t is Node:
                p = pos.get(x)
                if p is not None:
                    internal[p] += 1
                    flat.append(p)
                    continue
                v = x.value
                direct = False
            elif t is float or t is int or t is bool:
                j = -2 - 2 * len(scalars)
                sig = n.sig
                if sig.op.name == "div" and x is ins[1] and \
                        scalar_tag("div", 1, x, sig.dtype) == "r":
                    j -= _RECIPROCAL_KEY        # planned as a multiply (`scalar_tag`)
                flat.append(j)
                scalars.append(x)
                continue
            else:
                v = x
                direct = True
            k = ext_ids.get(id(v))
            if k is None:
                k = len(ext_vals)
                ext_ids[id(v)] = k
                if type(v) is not np.ndarray:
                    v = backend.inner.as_array(v)   # NdArray: NumPy scalars -> arrays
                ext_vals.append(v)
                ext_key.append((v.shape, v.dtype, v.strides))
                raw.append(1 if direct else -1)
            elif direct and raw[k] >= 0:
                raw[k] += 1
            else:
                # a buffer reached through a node's value is never reused in place
                raw[k] = -1
            flat.append(-1 - 2 * k)
    tset = targets if len(targets) < 4 else set(targets)
    outs = tuple([n in tset or ((r := n.ref) is not None and r() is not None)
                  or n.nusers > internal[j] for j, n in enumerate(sub)])
    key = (tuple(flat), outs, tuple(ext_key))
    return key, ext_vals, scalars, raw, outs


def _plan(sub, ins_all, outs, ext_sig, order):
    """The plan of ``sub`` over the nodes' shapes, or (``order``) over their dims permuted
    into a transposed input's memory order, every external buffer's dims with them."""
    t0 = time.perf_counter()
    if order is None:
        shapes = [n.shape for n in sub]
    else:
        perm, _, nd = order
        shapes = [tuple(n.shape[d] for d in perm) for n in sub]
        ext_sig = tuple(_permuted_sig(sig, perm, nd) for sig in ext_sig)
    pnodes = [PNode(n.kind, n.op, n.attrs, shapes[i], n.dtype, ins_all[i], outs[i])
              for i, n in enumerate(sub)]
    plan = Planner(pnodes, ext_sig, strict=strict_mode()).plan()
    S.add("plan_time_s", time.perf_counter() - t0)
    return plan


def _permuted_sig(sig, perm, nd):
    """An external buffer's signature ``(shape, dtype, element strides)`` with the dims of
    ``perm`` (fewer dims first get leading 1s of stride 0, as broadcasting reads them)."""
    shape, dtype, strides = sig
    pad = nd - len(shape)
    shape, strides = (1,) * pad + tuple(shape), (0,) * pad + tuple(strides)
    return tuple(shape[d] for d in perm), dtype, tuple(strides[d] for d in perm)


def _chain_order(sub, raw_vals, min_numel):
    """``(perm, inverse, ndim)`` where ``sub`` is elementwise over one shape and reads a large
    input laid out densely in another order than row-major (a channels-last conv output): its
    kernel then runs over the dims in that input's memory order, reading it straight, and its
    results lie as it does; else None."""
    shape = sub[0].shape
    nd = len(shape)
    if nd < 2 or any(n.kind != EW or n.shape != shape for n in sub):
        return None
    if any(getattr(v, "ndim", 0) > nd for v in raw_vals):
        return None
    for v in raw_vals:
        if getattr(v, "shape", None) == shape and _transposed(v, min_numel):
            perm = order_of(shape, v.strides, v.itemsize)
            return None if perm is None else (perm, inverse(perm), nd)
    return None


def _new_entry(sub, targets, backend, raw_vals) -> _Entry:
    """Plan ``sub`` (a plan-cache miss) and compile its kernels; ``raw_vals`` are its
    external buffers as the key saw them."""
    parts, ins_all, outs, ext_vals, ext_sig, scalars, raw = _describe(sub, targets)
    # a kernel writes row-major: reading a large input laid out otherwise (a conv output in
    # channels-last order, say) it would copy it transposed. An elementwise chain over one
    # shape then runs in that input's memory order (`_chain_order`); other parts run on the
    # inner backend, which keeps the input's order -- unless they reduce: a
    # reduce-then-broadcast kernel (layer norm after swap_dims) reads the input once in its
    # own layout, where the inner ops make a pass each.
    transposed = bool(backend.min_numel) and not any(n.kind == RED for n in sub) and \
        any(_transposed(v, backend.min_numel) for v in raw_vals)
    order = _chain_order(sub, raw_vals, backend.min_numel) if transposed else None
    plan = None
    if order is not None:
        try:
            plan = _plan(sub, ins_all, outs, ext_sig, order)
        except Exception:  # noqa: BLE001  (then planned over the logical shapes, below)
            plan = None
        if plan is not None and any(type(s) is not _KernelStep for s in plan.steps):
            plan = None                 # (a node the kernels cannot hold: not permuted)
        if plan is None:
            order = None
    if plan is None:
        plan = _plan(sub, ins_all, outs, ext_sig, None)
    _compile(plan, backend.runtime)
    if S.log_enabled():
        _log_plan(plan, sub, backend.runtime)
    e = _Entry()
    e.plan = plan
    e.order = order
    e.n_nodes = n = len(sub)
    E = len(ext_sig)
    e.unfused = None
    if transposed and order is None:
        e.unfused = tuple(tuple(E + x if type(x) is int else
                                (x[1] if x[0] == "x" else -1 - x[1]) for x in ins_all[i])
                          for i in range(n))
    e.copies = tuple(k for k, v in enumerate(raw_vals)
                     if any(x % v.itemsize for x in v.strides))
    runtime = backend.runtime
    steps = []
    for s in plan.steps:
        if type(s) is _KernelStep:
            idx = tuple(E + r if type(r) is not tuple else r[1] for r in s.in_refs)
            code = 1 if len(s.programs) == 2 else (2 if s.reuse else 0)
            # a launcher per program: the key pins the inputs' layouts, so the runtime
            # checks them once
            runs = tuple(launcher_of(runtime, p) for p in s.programs)
            steps.append((code, runs, idx, s.arg_refs,
                          tuple((E + p, shape) for p, shape in s.outs), s))
        else:
            idx = tuple(E + x if type(x) is int else (x[1] if x[0] == "x" else -1 - x[1])
                        for x in s.node.ins)
            steps.append((3, None, idx, None, s.pos, s))
    e.steps = tuple(steps)
    return e


def _transposed(a, min_numel) -> bool:
    """Whether ``a`` is a large array (``min_numel`` elements or more) that is not laid out
    row-major, broadcast dims aside."""
    if a.ndim < 2 or a.size < min_numel or a.flags.c_contiguous:
        return False
    st = [abs(s) for s, n in zip(a.strides, a.shape) if n > 1 and s != 0]
    return any(x < y for x, y in zip(st, st[1:]))


def _run_inner_all(entry, sub, env, scalars):
    """Run every node of ``sub`` on the inner backend (``entry.unfused`` holds its inputs as
    indices into ``env``, scalars as ``-1 - j``); values are appended to ``env``."""
    E = len(env)
    env.extend([None] * entry.n_nodes)
    for i, idx in enumerate(entry.unfused):
        env[E + i] = _run_inner(sub[i], [env[j] if j >= 0 else scalars[-1 - j] for j in idx],
                                "eager_ops")


def _describe(sub, targets):
    """The structure of ``sub`` (the plan-cache key's parts), each node's inputs as relative
    ids, which nodes are needed afterwards, the external buffers (values and signatures),
    the scalars, and per external buffer how many pending-node inputs hold it directly."""
    pos = {n: i for i, n in enumerate(sub)}
    inner = sub[0].dev.backend
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
                ins.append((scalar_tag(n.op.name, len(ins), x, n.dtype), len(scalars)))
                scalars.append(x)
                continue
            else:
                v = x
            k = ext_ids.get(id(v))
            if k is None:
                k = len(ext_vals)
                ext_ids[id(v)] = k
                arr, sig = _ext(v, inner)
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


def _ext(v, inner):
    """An external buffer as an array the kernels can read, and its signature (``inner``:
    the inner backend, which owns the array library)."""
    arr, st = with_element_strides(v if type(v) is np.ndarray else inner.as_array(v),
                                   inner.ascontiguous)
    return arr, (arr.shape, dt.from_numpy(arr.dtype), st)


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
        s.programs = compile_counted(runtime, ks)


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
    if type(a) is not np.ndarray or not (a.flags.c_contiguous and a.flags.writeable and
                                         (a.flags.owndata or _pool_sole_view(a))):
        return False
    n_ins = sum(1 for x in ins if x is a)
    # references: ext_vals, the local ``a``, getrefcount's argument, the pending nodes'
    # inputs, and this step's input list
    return sys.getrefcount(a) == 3 + raw[k] + n_ins


def _run(entry, sub, env, scalars, runtime, raw, c):
    """Run a cached plan. ``env`` holds the external buffers; the nodes' values are appended
    after them (node ``i`` at ``len(externals) + i``)."""
    E = len(env)
    env.extend([None] * entry.n_nodes)
    for code, runs, idx, arg_refs, outs, s in entry.steps:
        if code == 3:             # a node the kernels cannot hold, on the inner backend
            ins = [env[i] if i >= 0 else scalars[-1 - i] for i in idx]
            n = sub[outs]
            env[E + outs] = n.dev.backend.ascontiguous(_run_inner(n, ins))
            continue
        ins = [env[i] for i in idx]
        args = [scalars[j] if r is None else float(r(scalars[j])) for j, r in arg_refs] \
            if arg_refs else ()
        if code == 0:
            res = runs[0](ins, args)
            c.kernels += 1
        elif code == 1:           # a broadcast reduction split in two
            (mid,) = runs[0](ins, args)
            res = runs[1](ins + [mid], args)
            c.kernels += 2
        else:                     # outputs may go into dead input buffers
            launch_into = getattr(runtime, "launch_into", None)
            for _, k in s.reuse:
                if raw[k] > 0 and launch_into is not None and _reusable(env, k, raw, ins):
                    res = _launch_in_place(s, s.programs[0], ins, args, env, raw,
                                           launch_into, c)
                    break
            else:
                res = runs[0](ins, args)
            c.kernels += 1
        for (p, shape), o in zip(outs, res):
            env[p] = o if o.shape == shape else o.reshape(shape)


def _run_in_order(entry, sub, env, scalars, runtime, outs, c):
    """`_run` of a plan over permuted dims (``entry.order``): the external buffers given
    with their dims permuted (views), the wanted values permuted back (views: they lie in
    memory as the transposed input does). No output goes into an input's buffer."""
    perm, inv, nd = entry.order
    E = len(env)
    env[:] = permuted(env, perm, nd)
    _run(entry, sub, env, scalars, runtime, (-1,) * E, c)
    for j, wanted in enumerate(outs):
        if wanted:
            env[E + j] = env[E + j].transpose(inv)


def _launch_in_place(s, prog, ins, args, env, raw, launch_into, c):
    """Launch ``s`` writing outputs into dead input buffers read at the same positions."""
    kshape = s.kernel.shape
    outs = [None] * len(s.outs)
    for o, k in s.reuse:
        if outs[o] is None and _reusable(env, k, raw, ins):
            outs[o] = env[k]
            c.buffers_reused += 1
    for o, (p, shape) in enumerate(s.outs):
        if outs[o] is None:   # only NumPy buffers are reused (`_reusable`): NumPy's empty
            outs[o] = np.empty(shape, s.kernel.out_dtypes[o].np)
    launch_into(prog, ins, args, [a.reshape(kshape) for a in outs])
    return outs


def _run_inner(n, ins, counter="inner_ops"):
    dev = n.dev
    S.add(counter)
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
