"""Planning: a flushed part of a stream becomes a few kernels.

The input is the stream's structure (`PNode`s in recording order, external buffers and
scalar placeholders); the output is a `Plan`: kernels in dependency order (plus the rare
node the kernels cannot hold, run on the inner backend), cached by the stream's structure.

How nodes are grouped:

* every node whose value is needed afterwards (a live tensor, a later op) is a *target*;
  elementwise and view nodes between targets are inlined into the targets' expressions
  (views fold into the loads' strides), so dead intermediates never reach memory;
* a reduction is computed in the kernel of the one target that reads it as an epilogue:
  at the kept positions (``mean = sum * (1/n)``, a cast) or broadcast over the reduced axis
  (``exp(x - m) / sum``: reduce-then-broadcast), or else in its own kernel; when a target
  reads several unmaterialized reductions it takes the latest, and the others get kernels;
* targets of one shape that depend on the same finished kernels share one multi-output
  elementwise kernel (levels keep a kernel from reading what it writes);
* a reshape that cannot be folded (the linear index would carry between dims) materializes
  its input; an op whose expression cannot be built runs on the inner backend;
* a reshape target of another target runs on the inner backend too: a view of that
  target's buffer, where a kernel would copy it (`Planner._aliases`).

Planning retries with more materialized nodes until it succeeds; every retry only adds
materialized nodes, so it ends.
"""
from __future__ import annotations

import math

import os

from ... import dtype as dt
from ...kernel import ir
from . import lower as L

EW, VIEW, RED = "ew", "view", "red"
_HALF = (dt.float16, dt.bfloat16)


#: the tags of scalar placeholders: ``"s"`` a scalar, ``"r"`` the divisor of a float
#: division that is a power of two (the kernel multiplies by its exact reciprocal instead:
#: the same result, without a division's cost)
SCALAR_TAGS = ("s", "r")
_EXP_RANGE = {dt.float32: 126, dt.float64: 1022}


def scalar_tag(op_name: str, position: int, value, dtype) -> str:
    """``"r"`` for a division's scalar divisor ``value`` of the form +-2^k whose reciprocal
    is a normal number of the result's float ``dtype`` (then ``x / v == x * (1 / v)`` for
    every ``x``: both are the one rounding of the same value), else ``"s"``."""
    if op_name != "div" or position != 1 or type(value) is bool:
        return "s"
    limit = _EXP_RANGE.get(dtype)
    if limit is None:
        return "s"
    try:
        m, e = math.frexp(value)
    except (OverflowError, TypeError):
        return "s"
    return "r" if abs(m) == 0.5 and abs(e - 1) <= limit else "s"


def _reciprocal(v):
    return 1.0 / v


class PNode:
    """One recorded node as the planner sees it: ``ins`` are positions of earlier nodes
    (ints), ``("x", k)`` external buffers or ``("s", k)``/``("r", k)`` scalar placeholders
    (`SCALAR_TAGS`)."""
    __slots__ = ("kind", "op", "attrs", "shape", "dtype", "ins", "out")

    def __init__(self, kind, op, attrs, shape, dtype, ins, out):
        self.kind, self.op, self.attrs = kind, op, attrs
        self.shape, self.dtype, self.ins, self.out = shape, dtype, ins, out

    @property
    def name(self):
        return self.op if self.kind == RED else self.op.name


class _Restart(Exception):
    pass


class _Hit(Exception):
    def __init__(self, pos):
        self.pos = pos


class _Hard(Exception):
    def __init__(self, pos):
        self.pos = pos


class _Fallback(Exception):
    def __init__(self, pos):
        self.pos = pos


class _Ctx:
    """One kernel being built: its iteration shape, buffers, scalars and, for a reduction
    kernel, which reduction ``Acc`` stands for and where."""
    __slots__ = ("shape", "red", "views", "refs", "vidx", "args", "aidx", "memo", "loads",
                 "probe", "hits")

    def __init__(self, shape, red=None, probe=False):
        self.shape = shape
        self.red = red
        self.views, self.refs, self.vidx = [], [], {}
        self.args, self.aidx = [], {}
        self.memo = {}
        self.loads = set()
        self.probe = probe
        self.hits = {}


def _acc_dtype(node):
    return ir.compute_dtype(node.dtype)


def _squeeze_map(from_shape, to_shape):
    """The map reading a node of ``to_shape`` at the same element order from an iteration
    over ``from_shape``, when the two differ only in size-1 dims; else None."""
    a = [d for d, s in enumerate(from_shape) if s != 1]
    b = [d for d, s in enumerate(to_shape) if s != 1]
    if len(a) != len(b) or any(from_shape[i] != to_shape[j] for i, j in zip(a, b)):
        return None
    K = len(from_shape)
    zero = (0,) * K
    rows = [(zero, 0)] * len(to_shape)
    for i, j in zip(a, b):
        rows[j] = (tuple(1 if k == i else 0 for k in range(K)), 0)
    return tuple(rows)


class Planner:
    def __init__(self, nodes, exts, strict=False):
        self.nodes = nodes          # [PNode]
        self.exts = exts            # [(shape, DType, strides)]
        self.strict = strict
        self.hard = set()
        self.targets = [i for i, n in enumerate(nodes) if n.out]
        self.fallback = self._aliases()

    def _aliases(self) -> set:
        """Reshape targets of another target: that target's buffer is contiguous, so the
        inner backend's reshape is a view of it, where a kernel would copy every element
        (the logits ``[batch, seq, vocab]`` kept for the caller and reshaped to
        ``[batch * seq, vocab]`` for the loss: a pass over the largest tensor of a language
        model's step). (A reshape of a materialized row-major tensor never reaches the
        planner: Fusion views it when it is issued.)"""
        targets = set(self.targets)
        return {t for t in self.targets
                if self.nodes[t].kind == VIEW and self.nodes[t].op.name == "reshape"
                and type(self.nodes[t].ins[0]) is int and self.nodes[t].ins[0] in targets}

    # -- shapes and dtypes of refs ---------------------------------------------------------
    def shape_of(self, ref):
        if type(ref) is int:
            return self.nodes[ref].shape
        return self.exts[ref[1]][0]

    def dtype_of(self, ref):
        if type(ref) is int:
            return self.nodes[ref].dtype
        return self.exts[ref[1]][1]

    # -- buffers ---------------------------------------------------------------------------
    def _view(self, ctx, key, dtype, strides, offset):
        k = (key, strides, offset)
        i = ctx.vidx.get(k)
        if i is None:
            i = len(ctx.views)
            ctx.views.append(ir.BufferView(dtype, strides, offset))
            ctx.refs.append(key)
            ctx.vidx[k] = i
            if type(key) is int:
                ctx.loads.add(key)
        return L.load_expr(i, dtype)

    def _load(self, ctx, ref, imap):
        if type(ref) is int:
            n = self.nodes[ref]
            shape, dtype, strides = n.shape, n.dtype, L.contiguous_strides(n.shape)
        else:
            shape, dtype, strides = self.exts[ref[1]]
        st, off = L.buffer_view_through(imap, strides, 0, len(ctx.shape))
        return self._view(ctx, ref, dtype, st, off)

    def _arg(self, ctx, j, dtype, reciprocal=False):
        key = (j, reciprocal)
        i = ctx.aidx.get(key)
        if i is None:
            i = ctx.aidx[key] = len(ctx.args)
            ctx.args.append((j, ir.compute_dtype(dtype), dtype, reciprocal))
        return ir.Arg(i, ir.compute_dtype(dtype))

    # -- lowering --------------------------------------------------------------------------
    def lower(self, ctx, ref, imap):
        if type(ref) is not int:
            return self._load(ctx, ref, imap)
        if ref in self.buf:
            return self._load(ctx, ref, imap)
        n = self.nodes[ref]
        if n.kind == RED:
            red = ctx.red
            if red is not None and red[0] == ref and imap == red[1]:
                return ir.Acc(_acc_dtype(n))
            if ctx.probe:
                ctx.hits.setdefault(ref, set()).add(imap)
                return ir.Const(0, ir.compute_dtype(n.dtype))
            raise _Hit(ref)
        key = (ref, imap)
        e = ctx.memo.get(key)
        if e is None:
            e = ctx.memo[key] = self.lower_root(ctx, ref, imap)
        return e

    def lower_root(self, ctx, pos, imap):
        """The expression of node ``pos`` itself (never a load of its own buffer)."""
        n = self.nodes[pos]
        K = len(ctx.shape)
        if n.kind == EW:
            ins = []
            sdt = None
            for x in n.ins:
                if type(x) is tuple and x[0] in SCALAR_TAGS:
                    if sdt is None:
                        sdt = n.dtype if n.op.name == "where" else next(
                            self.dtype_of(y) for y in n.ins
                            if not (type(y) is tuple and y[0] in SCALAR_TAGS))
                    ins.append(self._arg(ctx, x[1], sdt, x[0] == "r"))
                    continue
                xs = self.shape_of(x)
                xm = imap if xs == n.shape else L.compose(
                    L.broadcast_terms(xs, n.shape), imap, xs, K)
                ins.append(self.lower(ctx, x, xm))
            try:
                if type(n.ins[-1]) is tuple and n.ins[-1][0] == "r" and \
                        ins[0].dtype is ins[1].dtype is n.dtype:
                    e = ins[0] * ins[1]             # x / 2^k as x * 2^-k (see scalar_tag)
                else:
                    e = n.op.expr(*ins, **n.attrs)
            except Exception:
                if self.strict >= 2:
                    raise
                raise _Fallback(pos) from None
            # f16/bf16 results are rounded (ir.cast) as the unfused op rounds them, so fused
            # and unfused results agree
            return ir.cast(e, n.dtype)
        if n.kind == VIEW:
            x = n.ins[0]
            xs = self.shape_of(x)
            name = n.op.name
            if name == "reshape":
                if type(x) is not int or x in self.buf:
                    if type(x) is int:
                        xn = self.nodes[x]
                        strides, dtype = L.contiguous_strides(xn.shape), xn.dtype
                    else:
                        _, dtype, strides = self.exts[x[1]]
                    r = L.reshaped_buffer_view(imap, n.shape, xs, strides, 0, ctx.shape)
                    if r is None:
                        raise _Fallback(pos)
                    return self._view(ctx, x, dtype, r[0], r[1])
                xm = L.reshape_input_map(imap, n.shape, xs, ctx.shape)
                if xm is None:
                    raise _Hard(x)
                return self.lower(ctx, x, xm)
            terms = L.view_terms(name, n.attrs, xs, n.shape)
            return self.lower(ctx, x, L.compose(terms, imap, xs, K))
        raise AssertionError(f"lower_root: {n.kind}")

    # -- planning --------------------------------------------------------------------------
    def plan(self) -> "Plan":
        for _ in range(10 * len(self.nodes) + 10):
            try:
                return self._attempt()
            except _Restart:
                continue
        raise RuntimeError("fusion planner did not converge")

    def _handle(self, exc):
        if isinstance(exc, (_Hit, _Hard)):
            p = exc.pos
            if type(p) is not int:
                raise AssertionError("an external buffer cannot be materialized")
            self.hard.add(p)
        elif isinstance(exc, _Fallback):
            p = exc.pos
            self.fallback.add(p)
            for x in self.nodes[p].ins:
                if type(x) is int:
                    self.hard.add(x)
        raise _Restart()

    def _mode(self, npos, rpos, imap):
        """How target ``npos`` can hold reduction ``rpos`` read at ``imap``:
        ("b", iter shape) broadcast, ("k", ...) at the kept positions, or None."""
        n, r = self.nodes[npos], self.nodes[rpos]
        x = r.ins[0]
        xs = self.shape_of(x)
        axis = r.attrs["axis"]
        if n.shape == xs and imap == L.acc_map(xs, axis):
            return "b"
        sq = _squeeze_map(n.shape, r.shape)
        if sq is not None and imap == sq and \
                L.keep_map(n.shape, r.shape, xs, axis) is not None:
            return "k"
        return None

    def _attempt(self):
        nodes = self.nodes
        tset = set(self.targets) | self.hard
        order = sorted(tset - self.fallback)
        self.buf = set(self.fallback) | self.hard | {
            i for i in self.targets if nodes[i].kind == RED}
        claims = {}      # reduction pos -> (target pos, mode)
        # 1. which target holds which reduction
        for t in order:
            if nodes[t].kind == RED:
                continue
            ctx = _Ctx(nodes[t].shape, probe=True)
            try:
                self.lower_root(ctx, t, L.identity(nodes[t].shape))
            except (_Hit, _Hard, _Fallback) as e:
                self._handle(e)
            if not ctx.hits:
                continue
            chosen = None
            for r in sorted(ctx.hits, reverse=True):
                if r in claims or len(ctx.hits[r]) != 1:
                    continue
                mode = self._mode(t, r, next(iter(ctx.hits[r])))
                if mode is not None:
                    chosen = r
                    claims[r] = (t, mode)
                    self.buf.add(t)
                    break
            others = [r for r in ctx.hits if r != chosen]
            if others:
                self.hard.update(others)
                raise _Restart()
        # 2. build the kernels, each target in one step
        steps = {}       # output pos -> step
        for r, (t, mode) in claims.items():
            steps[t] = self._reduce_step(r, t, mode)
        for t in order:
            if nodes[t].kind == RED:
                steps[t] = self._reduce_step(t, None, None)
        ew = [t for t in order if t not in steps]
        for t in ew:
            ctx = _Ctx(nodes[t].shape)
            try:
                self.lower_root(ctx, t, L.identity(nodes[t].shape))
            except (_Hit, _Hard, _Fallback) as e:
                self._handle(e)
            steps[t] = ("ew", ctx)
        for f in self.fallback:
            steps[f] = ("fb", {x for x in nodes[f].ins if type(x) is int}, f)
        # 3. levels, then one multi-output kernel per (shape, level) of elementwise targets
        level = {}
        for t in sorted(steps):
            st = steps[t]
            loads = st[1].loads if st[0] != "fb" else st[1]
            lv = 0
            for p in loads:
                lv = max(lv, level[p])
            level[t] = lv + 1
        groups = {}
        out_steps = []
        for t in sorted(steps):
            st = steps[t]
            if st[0] == "ew":
                groups.setdefault((nodes[t].shape, level[t]), []).append(t)
            else:
                out_steps.append((level[t], t, st))
        for (shape, lv), members in groups.items():
            ctx = _Ctx(shape)
            exprs = []
            for t in members:
                exprs.append(self.lower_root(ctx, t, L.identity(shape)))
            out_steps.append((lv, members[0], ("ewk", ctx, members, exprs)))
        out_steps.sort(key=lambda s: (s[0], s[1]))
        return Plan(self, [s[2] for s in out_steps])

    def _reduce_step(self, r, t, mode):
        nodes = self.nodes
        rn = nodes[r]
        x = rn.ins[0]
        xs = self.shape_of(x)
        axis = rn.attrs["axis"]
        am = L.acc_map(xs, axis)
        ctx = _Ctx(xs, red=(r, am))
        acc_d = _acc_dtype(rn)
        try:
            pro = ir.cast(self.lower(ctx, x, L.identity(xs)), acc_d)
            if t is None:
                epi, out, broadcast = ir.Acc(acc_d), r, False
            elif mode == "b":
                epi, out, broadcast = self.lower_root(ctx, t, L.identity(xs)), t, True
            else:
                km = L.keep_map(nodes[t].shape, rn.shape, xs, axis)
                epi, out, broadcast = self.lower_root(ctx, t, km), t, False
        except (_Hit, _Hard, _Fallback) as e:
            self._handle(e)
        return ("red", ctx, r, out, pro, epi, broadcast)


# -- plans ----------------------------------------------------------------------------------
class _KernelStep:
    __slots__ = ("kernel", "programs", "in_refs", "arg_refs", "outs", "split", "reuse")

    def __init__(self, kernel, in_refs, arg_refs, outs):
        self.kernel = kernel
        self.in_refs = tuple(in_refs)
        self.arg_refs = tuple(arg_refs)
        self.outs = tuple(outs)       # (pos, node shape)
        self.programs = None
        self.split = None
        self.reuse = ()               # (output index, external buffer) it may overwrite


class _FallbackStep:
    __slots__ = ("pos", "node")

    def __init__(self, pos, node):
        self.pos = pos
        self.node = node


def _finish_ew(shape, views, exprs, out_dtypes, args):
    strides = [v.strides for v in views]
    cshape, cstrides, _ = L.collapse(shape, strides)
    views = tuple(ir.BufferView(v.dtype, s, v.offset) for v, s in zip(views, cstrides))
    return ir.Elementwise(cshape, views, tuple(exprs), tuple(out_dtypes), tuple(args))


def _finish_red(shape, axis, views, pro, op, epi, out_dtype, args, broadcast):
    strides = [v.strides for v in views]
    cshape, cstrides, caxis = L.collapse(shape, strides, axis)
    views = tuple(ir.BufferView(v.dtype, s, v.offset) for v, s in zip(views, cstrides))
    return ir.Reduce(cshape, caxis, views, pro, op, epi, out_dtype, tuple(args), broadcast)


def _arg_refs(args):
    """(scalar index, rounding type or None) per kernel arg: a scalar of an f16 op is rounded
    to f16 first, as NumPy does with a weak scalar; a bf16 op's to f32 only (NumPy computes
    ``bf16_array * python_float`` in f32: ml_dtypes takes no part in weak promotion)."""
    return [(j, _reciprocal if recip else _SCALAR_ROUND.get(d)) for j, _, d, recip in args]


_SCALAR_ROUND = {dt.float16: dt.float16.np.type, dt.bfloat16: dt.float32.np.type}


class Plan:
    """Kernels (and inner-backend steps) in an order that respects their dependencies."""

    def __init__(self, planner, raw_steps):
        nodes = planner.nodes
        self.steps = []
        self.n_nodes = len(nodes)
        self.outs = tuple(i for i, n in enumerate(nodes) if n.out)
        for st in raw_steps:
            if st[0] == "fb":
                self.steps.append(_FallbackStep(st[2], nodes[st[2]]))
            elif st[0] == "red":
                _, ctx, r, out, pro, epi, broadcast = st
                rn = nodes[r]
                k = _finish_red(ctx.shape, rn.attrs["axis"], ctx.views, pro, rn.op, epi,
                                nodes[out].dtype, [a[1] for a in ctx.args], broadcast)
                self.steps.append(_KernelStep(k, ctx.refs, _arg_refs(ctx.args),
                                              [(out, nodes[out].shape)]))
            else:
                _, ctx, members, exprs = st
                k = _finish_ew(ctx.shape, ctx.views,
                               [ir.cast(e, nodes[t].dtype) for e, t in zip(exprs, members)],
                               [nodes[t].dtype for t in members],
                               [a[1] for a in ctx.args])
                self.steps.append(_KernelStep(k, ctx.refs, _arg_refs(ctx.args),
                                              [(t, nodes[t].shape) for t in members]))
        self._check_order()
        self._find_reuse(planner)

    def _find_reuse(self, planner):
        """Outputs that may go into an external buffer read at exactly the written positions
        by this kernel alone, and by no later step (whether nothing else holds the buffer is
        checked when the plan runs)."""
        later = set()
        for s in reversed(self.steps):
            if isinstance(s, _FallbackStep):
                later.update(x[1] for x in s.node.ins if type(x) is tuple and x[0] == "x")
                continue
            k = s.kernel
            if isinstance(k, ir.Elementwise):
                views = {}
                for v, r in zip(k.inputs, s.in_refs):
                    if type(r) is tuple:
                        views.setdefault(r[1], []).append(v)
                cs = L.contiguous_strides(k.shape)
                reuse, used = [], set()
                for o, ((pos, shape), od) in enumerate(zip(s.outs, k.out_dtypes)):
                    for e, vs in views.items():
                        eshape, edt, est = planner.exts[e]
                        if e in later or e in used or len(vs) != 1 or edt is not od or \
                                eshape != shape or est != L.contiguous_strides(eshape) or \
                                vs[0].offset != 0 or vs[0].strides != cs:
                            continue
                        reuse.append((o, e))
                        used.add(e)
                        break
                s.reuse = tuple(reuse)
            later.update(r[1] for r in s.in_refs if type(r) is tuple)

    def _check_order(self):
        done = set()
        for s in self.steps:
            if isinstance(s, _FallbackStep):
                need = [x for x in s.node.ins if type(x) is int]
                outs = [s.pos]
            else:
                need = [r for r in s.in_refs if type(r) is int]
                outs = [p for p, _ in s.outs]
            for p in need:
                if p not in done:
                    raise AssertionError(f"fusion plan: step reads node {p} before it is "
                                         f"computed")
            done.update(outs)

    @property
    def n_kernels(self):
        return sum(1 for s in self.steps if isinstance(s, _KernelStep))

    def describe(self, nodes=None) -> str:
        lines = [f"fusion plan: {self.n_kernels} kernel(s), "
                 f"{sum(1 for s in self.steps if isinstance(s, _FallbackStep))} inner op(s)"]
        for s in self.steps:
            if isinstance(s, _FallbackStep):
                lines.append(f"  inner {s.node.name} -> node {s.pos}")
            else:
                k = s.kernel
                kind = ("reduce-broadcast" if getattr(k, "broadcast", False) else "reduce") \
                    if isinstance(k, ir.Reduce) else "elementwise"
                lines.append(f"  {kind} shape={k.shape} inputs={len(k.inputs)} "
                             f"args={len(k.args)} -> nodes {[p for p, _ in s.outs]}")
        return "\n".join(lines)


def strict_mode() -> int:
    """``EMBER_FUSION_STRICT``: 1 raises when a fused plan fails (instead of running the ops
    unfused); 2 also raises when an op's expression cannot be built (instead of running that
    op on the inner backend). For tests."""
    v = os.environ.get("EMBER_FUSION_STRICT", "")
    return int(v) if v.isdigit() else 0


__all__ = ["PNode", "Planner", "Plan", "EW", "VIEW", "RED", "strict_mode"]
