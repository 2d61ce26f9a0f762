"""Small fused primitives as one cached kernel: a decomposition traced once, replayed.

A primitive that declares a ``decompose`` (``adam_update``, softmax ...) is a dozen
elementwise and reduction ops. On large tensors Fusion records that decomposition like any
other ops and fuses it into a kernel or two. On small ones recording a dozen ops costs more
than the inner backend's dozen NumPy passes, so those ran on the inner backend -- and on the
small models of a training loop they are where the time goes (Adam's update of a 64x256
weight is ~12 NumPy calls, ~14 µs, where one kernel takes ~3 µs).

`Replays` traces the decomposition once per *structure* -- the op, its inputs' shapes, dtypes
and strides, and the attrs that steer the decomposition's Python code (the op's
``decompose_key``; all attrs when it has none) -- into the kernel Fusion would generate for
it, and launches that kernel directly for every later call of that structure: no
recording, no planning, no Tensor ops. Attrs outside the key (Adam's learning-rate-dependent
``step``, ``eps`` ...) are the kernel's scalar arguments, bound per call. The results are
those of the decomposition on Fusion, bit for bit.

Only a decomposition that plans into one kernel reading the op's inputs and writing all its
outputs is replayed (Adam's update is; softmax, a max and then a reduce-and-sweep, is not:
on small tensors two launches and their row loops cost more than NumPy's passes). A trace
that cannot be replayed -- more kernels, a step the kernels cannot hold, an input that must
be copied first, a buffer that is no input, a per-call scalar the trace cannot attribute to
one attr -- is remembered, and its calls run on the inner backend as before.
"""
from __future__ import annotations

import threading

from .stats import counts as _counts
from .stream import Node, Stream, _new_entry, plan_key

MAX_ENTRIES = 512
_SCALARS = (float, int)


class _Replay:
    """One traced structure: the cached plan entry, where its external buffers and scalars
    come from, which nodes are the op's outputs, and ``direct``: what launching its one
    kernel takes (`_direct`)."""
    __slots__ = ("key", "scalar_from_attr", "entry", "ext_from", "scalar_from", "out_pos",
                 "n_ext", "direct")


def _fresh(v):
    """A float equal to ``v`` (sign of zero and NaN payload kept) that is a new object, so
    the trace can tell the attr's uses from other equal scalars by identity."""
    return float.fromhex(v.hex())


class Replays:
    """The replay cache of one Fusion backend; ``tracer`` is a Fusion backend over the same
    inner backend and kernel runtime that records every op (``min_numel=0``): the
    decompositions are traced, planned and compiled there."""

    def __init__(self, tracer):
        self.tracer = tracer
        self._entries: dict = {}          # key -> _Replay, or None: not replayable
        self._lock = threading.Lock()

    def key(self, op, prims, attrs):
        sigs = []
        for p in prims:
            try:
                sigs.append(p.shape)
                sigs.append(p.strides)
                sigs.append(p.dtype)
            except AttributeError:
                if type(p) in _SCALARS or type(p) is bool:
                    sigs.append(type(p))
                else:
                    return None
        dk = op.decompose_key
        try:
            if dk is None:
                akey = tuple(sorted(attrs.items()))
            else:       # the key's predicates, and every attr that is not a float exactly
                akey = dk(**attrs)
            hash(akey)
        except TypeError:              # an unhashable attr: no caching
            return None
        return (op, tuple(sigs), akey)

    def run(self, op, prims, attrs, meta, device):
        """The op's outputs, computed by its replayed kernels; None: run it some other way."""
        k = self.key(op, prims, attrs)
        if k is None:
            return None
        r = self._entries.get(k, False)
        if r is False:
            r = self._trace(k, op, prims, attrs, meta, device)
        if r is None:
            return None
        launch, ins_from, args_from, outs_from = r.direct
        res = launch([prims[i] for i in ins_from],
                     [attrs[a] if a is not None else c for a, c in args_from])
        _counts().kernels += 1
        if op.nout == 1:
            o, shape = outs_from[0]
            return res[o].reshape(shape)
        return tuple([res[o].reshape(shape) for o, shape in outs_from])

    # -- tracing ------------------------------------------------------------------------------
    def _trace(self, key, op, prims, attrs, meta, device):
        """Trace ``op``'s decomposition for ``key``: with the call's per-call attrs, then with
        other values of the same key. The second trace must have the first's structure and
        constants, so that no scalar computed from a per-call attr in Python, nor a branch on
        one that the key does not hold, is baked into the kernels."""
        dk = op.decompose_key
        per_call = [a for a, v in attrs.items() if dk is not None and type(v) is float]
        other = _other_values(attrs, per_call, dk)
        r = None
        try:
            r = self._record(op, prims, attrs, per_call, device, self._build)
            if per_call:
                again = self._record(op, prims, other, per_call, device, self._scalars_of)
                if again != (r.key, r.scalar_from_attr):
                    raise _NotReplayable("the trace depends on a per-call attr's value")
        except _NotReplayable:
            r = None
        with self._lock:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = r
        return r

    def _record(self, op, prims, attrs, per_call, device, then):
        """Record ``op.decompose`` on the tracer, in a stream of its own, with the
        ``per_call`` attrs as fresh objects (found by identity among the recorded scalars);
        returns ``then(stream, output nodes, prims, {attr: object})``."""
        from ... import dtype as dt
        from ...tensor.dispatch import wrap
        tracer = self.tracer
        tdev = tracer.device(device.index)
        fresh = {a: _fresh(attrs[a]) for a in per_call}
        local = tracer._local
        saved = getattr(local, "stream", None)
        stream = local.stream = Stream(tracer)
        try:
            ins = [wrap(p, tdev, tuple(p.shape), dt.from_numpy(p.dtype))
                   if hasattr(p, "shape") else p for p in prims]
            out = op.decompose(*ins, **{**attrs, **fresh})
            outs = (out,) if op.nout == 1 else tuple(out)
            nodes = []
            for t in outs:
                n = getattr(t._prim, "node", None)
                if type(n) is not Node or n.stream is not stream or n.value is not None:
                    raise _NotReplayable("an output is not computed by the trace's kernels")
                nodes.append(n)
            with stream.lock:
                return then(stream, nodes, prims, fresh)
        finally:
            for n in stream.pending:
                n.inputs = None
            stream.pending.clear()
            if saved is None:
                del local.stream
            else:
                local.stream = saved

    def _parts(self, stream, nodes, fresh):
        """(the trace's nodes, its plan key, its external buffers, per recorded scalar its
        per-call attr or value)."""
        sub = stream.needed(nodes)
        key, ext_vals, scalars, _, _ = plan_key(sub, nodes, self.tracer)
        names = {id(v): a for a, v in fresh.items()}
        for n in sub:
            if n.name == "div" and len(n.inputs) > 1 and id(n.inputs[1]) in names:
                # a division by a per-call scalar is planned by the scalar's value
                raise _NotReplayable("a division by a per-call scalar")
        return sub, key, ext_vals, tuple(names.get(id(x), _Const(x)) for x in scalars)

    def _scalars_of(self, stream, nodes, prims, fresh):
        """The plan key of a trace, and per recorded scalar its per-call attr or value."""
        _, key, _, scalar_from_attr = self._parts(stream, nodes, fresh)
        return key, scalar_from_attr

    def _build(self, stream, nodes, prims, fresh):
        sub, key, ext_vals, scalar_from_attr = self._parts(stream, nodes, fresh)
        pos = {n: i for i, n in enumerate(sub)}
        by_id = {id(p): i for i, p in enumerate(prims) if hasattr(p, "shape")}
        ext_from = []
        for v in ext_vals:
            i = by_id.get(id(v))
            if i is None:
                raise _NotReplayable("the decomposition reads a buffer that is no input")
            ext_from.append(i)
        backend = self.tracer
        entry = backend.plans.get(key)
        if entry is None:
            entry = _new_entry(sub, nodes, backend, ext_vals)
            backend.plans.put(key, entry)
        if entry.unfused is not None or entry.copies or \
                any(step[0] == 3 for step in entry.steps):
            raise _NotReplayable("a step the kernels cannot hold")
        r = _Replay()
        r.key = key
        r.scalar_from_attr = scalar_from_attr
        r.entry = entry
        r.ext_from = tuple(ext_from)
        r.scalar_from = tuple((None, s.value) if type(s) is _Const else (s, None)
                              for s in scalar_from_attr)
        r.out_pos = tuple(pos[n] for n in nodes)
        r.n_ext = len(ext_vals)
        r.direct = _direct(entry, r)
        if r.direct is None:
            # several kernels (softmax: a max, then a reduce-and-sweep): on small tensors
            # their launches and row loops cost more than NumPy's passes (32 x 10: 12 µs
            # against 7)
            raise _NotReplayable("not one kernel computing every output from the inputs")
        return r


class _Const:
    """A recorded scalar that is no per-call attr: equal when the values are (NaN too)."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        if type(other) is not _Const or type(other.value) is not type(self.value):
            return False
        a, b = self.value, other.value
        return a == b or (a != a and b != b)

    def __hash__(self):
        return 0


def _other_values(attrs, per_call, dk):
    """``attrs`` with each per-call attr changed where that keeps ``dk``'s key (an attr no
    change keeps the key of, ``decay == 1.0`` say, has its one value under that key)."""
    want = dk(**attrs) if per_call else None
    other = dict(attrs)
    for a in per_call:
        v = attrs[a]
        for f in (lambda v: v * 1.375 + 0.25, lambda v: v * 0.625 - 0.125, lambda v: v + 1.0):
            trial = {**other, a: f(v)}
            if trial[a] != v and dk(**trial) == want:
                other = trial
                break
    return other


def _direct(entry, r):
    """For a plan of one kernel that reads only the op's inputs and computes every output:
    (launch, the prims each kernel input is, where each scalar arg comes from, per output
    the kernel output and its shape); else None."""
    if len(entry.steps) != 1:
        return None
    code, runs, idx, arg_refs, outs, _ = entry.steps[0]
    E = r.n_ext
    if code not in (0, 2) or any(i >= E for i in idx):
        return None
    if arg_refs and any(conv is not None for _, conv in arg_refs):
        return None
    where = {p: o for o, (p, _) in enumerate(outs)}      # (env positions: E + node)
    shapes = dict(outs)
    try:
        outs_from = tuple((where[E + p], shapes[E + p]) for p in r.out_pos)
    except KeyError:
        return None
    args_from = tuple(r.scalar_from[j] for j, _ in arg_refs) if arg_refs else ()
    return (runs[0], tuple(r.ext_from[i] for i in idx), args_from, outs_from)


class _NotReplayable(Exception):
    pass
