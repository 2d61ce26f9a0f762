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

A small *elementwise* op (one with an IR ``expr``) replays its one-op kernel where that
measured faster than the inner backend (`Replays.run_elementwise`): NumPy takes one fast pass
for most ops, but several, or a slow loop, for some -- ``maximum`` (relu) is NaN-aware and
scalar, a broadcast operand of a channels-last tensor is read in a strided loop, a bool mask
is cast before a multiply. The second call of a structure traces and compiles its kernel;
the next `PROBE_CALLS` calls alternate the two and are timed, and the faster one runs from
then on. The kernel computes in the memory order of the op's first full-shape input and
returns its result in that order (a channels-last conv output gives a channels-last result,
as NumPy's ufuncs do), so what comes next reads the same layout either way.
"""
from __future__ import annotations

import threading
import time
from functools import partial

import numpy as np

from ... import dtype as dt
from ...kernel import ir
from ...kernel.c_family import nodes
from .memory_order import inverse, memory_order, permuted
from .stats import EAGER, OP_COUNTS as _OPS, counts as _counts
from .stream import Node, Stream, _new_entry, plan_key

MAX_ENTRIES = 512
_SCALARS = (float, int)
#: calls of an elementwise structure timed, alternately on the inner backend and as its
#: kernel, before one of them is kept
PROBE_CALLS = 8
#: the kernel is kept where its best time is at most this share of the inner backend's
REPLAY_GAIN = 0.85
#: elementwise states: seen once (traced at the next call), not replayed (slower, or no
#: kernel); a list [calls, best inner ns, best kernel ns] while probing; a `_Replay` once
#: the kernel won
_SEEN, _INNER = 1, 2


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
        self._ew: dict = {}               # elementwise key -> its state (_SEEN ...)
        self._lock = threading.Lock()

    def key(self, op, prims, attrs, per_call=()):
        """A call's structure: its inputs' shapes, strides and dtypes, the types of its
        scalar operands, and its attrs' key (``per_call``: scalar operands bound per call,
        passed as attrs, which the key leaves out)."""
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
            if per_call:
                akey = _without([_SCALAR_ARGS[i] for i in per_call], **attrs)
            elif dk is None:
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
        return self._launch(r, op, prims, attrs)

    def run_elementwise(self, op, prims, attrs, meta, device):
        """A small elementwise op with ready inputs, as its one-op kernel where that measured
        faster than the inner backend for its structure, else on the inner backend. Returns
        (result, keep asking): False once this structure stays on the inner backend."""
        start = time.perf_counter_ns()
        given, op_attrs = prims, attrs
        perm = memory_order(prims, meta[0])
        if perm is not None:
            prims = permuted(prims, perm, len(meta[0]))
        # a float operand is a kernel argument bound per call (named as an attr: `_SCALAR_ARGS`);
        # an int or bool one (a 0 to compare with, a 2 to multiply by) is part of the key
        floats = ()
        consts = ()
        for i, p in enumerate(prims):
            if type(p) is float:
                floats += (i,)
            elif type(p) is int or type(p) is bool:
                consts += (i, p)
            elif type(p) is not np.ndarray:         # a NumPy scalar (a reduction's result)
                return _inner(op, given, op_attrs, meta, device), True
        if floats:
            attrs = {**attrs, **{_SCALAR_ARGS[i]: prims[i] for i in floats}}
        k = self.key(op, prims, attrs, floats)
        if k is not None and consts:
            k = (k, consts)
        state = self._ew.get(k) if k is not None else _INNER
        if state is None:                       # first call: no trace for a one-off op
            if len(self._ew) >= MAX_ENTRIES:
                self._ew.clear()
            exact = _exact(op, prims, op_attrs)
            self._ew[k] = _SEEN if exact else _INNER
            return _inner(op, given, op_attrs, meta, device), exact
        if state is _SEEN:
            r = self._entries.get(k, False)
            if r is False:
                per_call = [_SCALAR_ARGS[i] for i in floats]
                r = self._trace(k, op, prims, attrs, meta, device, per_call,
                                partial(_without, per_call), partial(_itself, op, floats))
            state = self._ew[k] = _INNER if r is None else [0, 1 << 62, 1 << 62, r]
        if state is _INNER:
            return _inner(op, given, op_attrs, meta, device), False
        if type(state) is list:                 # measuring: every other call on each side
            n = state[0]
            state[0] = n + 1
            on_inner = not n & 1
            if on_inner:        # the op alone (kept, it runs without asking here)
                t0 = time.perf_counter_ns()
                out = _inner(op, given, op_attrs, meta, device)
            else:               # the kernel with what asking here costs (key, layout)
                t0 = start
                out = self._launch(state[3], op, prims, attrs)
                if perm is not None:
                    out = out.transpose(inverse(perm))
            t = time.perf_counter_ns() - t0
            if t < state[2 - on_inner]:
                state[2 - on_inner] = t
            if n + 1 >= PROBE_CALLS:
                self._ew[k] = state[3] if state[2] <= state[1] * REPLAY_GAIN else _INNER
            return out, True
        else:
            out = self._launch(state, op, prims, attrs)
        if perm is not None:
            out = out.transpose(inverse(perm))
        return out, True

    @staticmethod
    def _launch(r, op, prims, attrs):
        """Launch ``r``'s kernel on the call's inputs and scalars; its outputs."""
        launch, ins_from, args_from, outs_from = r.direct
        res = launch([prims[i] for i in ins_from],
                     [attrs[a] if a is not None else c for a, c in args_from])
        _counts().kernels += 1
        if op.nout == 1:
            o, shape = outs_from[0]
            return res[o].reshape(shape)
        return tuple([res[o].reshape(shape) for o, shape in outs_from])


    # -- tracing ------------------------------------------------------------------------------
    def _trace(self, key, op, prims, attrs, meta, device, per_call=None, dk=None,
               decompose=None):
        """Trace ``op``'s decomposition for ``key``: with the call's per-call attrs, then with
        other values of the same key. The second trace must have the first's structure and
        constants, so that no scalar computed from a per-call attr in Python, nor a branch on
        one that the key does not hold, is baked into the kernels."""
        if per_call is None:
            dk = op.decompose_key
            per_call = [a for a, v in attrs.items() if dk is not None and type(v) is float]
        decompose = decompose or op.decompose
        other = _other_values(attrs, per_call, dk)
        r = None
        try:
            r = self._record(decompose, op, prims, attrs, per_call, device, self._build)
            if per_call:
                again = self._record(decompose, op, prims, other, per_call, device,
                                     self._scalars_of)
                if again != (r.key, r.scalar_from_attr):
                    raise _NotReplayable("the trace depends on a per-call attr's value")
        except _NotReplayable:
            r = None
        with self._lock:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = r
        return r

    def _record(self, decompose, op, prims, attrs, per_call, device, then):
        """Record ``decompose`` (``op``'s) on the tracer, in a stream of its own, with the
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
            out = decompose(*ins, **{**attrs, **fresh})
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
        if entry.unfused is not None or entry.copies or entry.order is not None or \
                any(step[0] == 3 for step in entry.steps):
            raise _NotReplayable("a step the kernels cannot hold, or dims in another order")
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


#: the names under which an elementwise op's float operands are passed as per-call attrs
_SCALAR_ARGS = tuple(f"#{i}" for i in range(8))


def _itself(op, floats, *ins, **attrs):
    """An elementwise op's trace: the op itself on the tracer's tensors, its float operands
    (positions ``floats``) taken from the attrs that carry them."""
    from ...ops._api import run_op
    ins = list(ins)
    for i in floats:
        ins[i] = attrs.pop(_SCALAR_ARGS[i])
    return run_op(op, ins, **attrs)


def _without(per_call, **attrs):
    """The key of ``attrs`` without the per-call scalar operands."""
    return tuple(sorted((a, v) for a, v in attrs.items() if a not in per_call))


_EXACT: dict = {}       # op -> `_exact`


def _exact(op, prims, attrs) -> bool:
    """Whether ``op``'s kernel computes NumPy's result bit for bit: IEEE operations only, no
    polynomial of the math library (within an ulp or two of NumPy's, not equal), so which
    of the two ran never shows in a result."""
    v = _EXACT.get(op)
    if v is None:
        try:
            e = op.expr(*[ir.Load(i, dt.float32) for i in range(len(prims))], **attrs)
            v = not any(isinstance(n, (ir.Fma, ir.Bitcast)) for n in nodes([e]))
        except Exception:   # noqa: BLE001  (an expr that needs other operands: not probed)
            v = False
        _EXACT[op] = v
    return v


def _inner(op, prims, attrs, meta, device):
    _OPS[EAGER] += 1
    dev = device.inner
    return dev._execute(op, prims, attrs, meta, dev)
