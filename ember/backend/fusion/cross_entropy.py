"""Cross-entropy as generated kernels, for Fusion on the CPU.

NumPy's form of ``cross_entropy_rows`` (and of its backward) is some fifteen calls: ~16 µs on
a [32, 10] batch of logits (~27 inside a training step), however little the arithmetic. As
kernels of the IR it is four small launches each way (~10 µs; ~16 inside the step):

1. the row max (a reduction; its epilogue zeroes a non-finite max, as the NumPy form does, so
   a row of infinities gives no inf - inf);
2. the log-sum-exp (a reduction of ``exp(x - max)``, epilogue ``log(sum) + max``);
3. the target's logit (a sum over the row of the one position whose index, `ir.Index`, is
   the target: a gather without a gather);
4. per row the loss and the valid mask (0 where the target is ``ignore_index``), and a flag
   for a target out of range, which raises as on the inner backend.

The backward runs the first two, then the range flags alone, then a sweep of the rows:
``(softmax - onehot) * g`` where the target is not ignored. Everything computes in f32 (f64 in f64), as the NumPy form does. An empty
batch or class dim runs on the inner backend.
"""
from __future__ import annotations

import threading

import numpy as np

from ... import dtype as dt
from ...errors import IndexError_
from ...kernel import ir, mathlib
from ...kernel import lower_ops as L
from ...kernel.strides import element_strides
from ...ops.nn import ce_target_message
from .runtime import compile_counted, launcher_of
from .stats import counts as _counts

OPS = {"cross_entropy_rows": "forward", "cross_entropy_rows_backward": "backward"}
_I64 = dt.int64
_B = dt.bool_


class CrossEntropyKernels:
    """The cross-entropy kernels of one Fusion backend, compiled on its kernel ``runtime``
    and cached by shapes, strides, dtypes and ``ignore_index``."""

    def __init__(self, runtime):
        self.runtime = runtime
        self._launchers: dict = {}
        self._lock = threading.Lock()

    def run(self, op, prims, attrs, meta):
        """The op's outputs as the kernels compute them, or None (the inner backend runs
        it)."""
        backward = OPS[op.name] == "backward"
        g = None
        if backward:
            g, x, t = prims
            if type(g) is not np.ndarray:
                return None
        else:
            x, t = prims
        if type(x) is not np.ndarray or type(t) is not np.ndarray or x.ndim != 2 or \
                0 in x.shape or t.dtype.kind not in "iu":
            return None
        ignore = int(attrs["ignore_index"])
        key = (backward, x.shape, x.strides, x.dtype, t.strides, t.dtype, ignore,
               None if g is None else (g.strides, g.dtype))
        launch = self._launchers.get(key, False)
        if launch is False:
            launch = self._build(key, x, t, g, ignore)
        if launch is None:
            return None
        k_max, k_lse, k_pick, k_last = launch
        m = k_max([x])[0]
        lse = k_lse([x, m])[0]
        if backward:
            bad = k_pick([t])[0]
            dx = k_last([x, lse, t, g])[0]
            _counts().kernels += 4
            _check_targets(bad, t, x.shape[1], ignore)
            return dx
        picked = k_pick([x, t])[0]
        loss, valid, bad = k_last([lse, picked, t])
        _counts().kernels += 4
        _check_targets(bad, t, x.shape[1], ignore)
        return loss, valid

    def _build(self, key, x, t, g, ignore):
        launch = None
        xs, ts = element_strides(x), element_strides(t)
        gs = element_strides(g) if g is not None else (0,)
        if xs is not None and ts is not None and gs is not None:
            kernels = _kernels(x.shape, xs, dt.from_numpy(x.dtype), ts,
                               dt.from_numpy(t.dtype), ignore,
                               None if g is None else (gs, dt.from_numpy(g.dtype)))
            rt = self.runtime
            launch = tuple(launcher_of(rt, p) for p in compile_counted(rt, kernels))
        with self._lock:
            if len(self._launchers) >= 256:
                self._launchers.clear()
            self._launchers[key] = launch
        return launch


def _check_targets(bad, t, c, ignore):
    if bad.any():
        raise IndexError_(ce_target_message(int(t[bad][0]), c, ignore))


def _kernels(shape, xs, xd, ts, td, ignore, grad):
    """The four kernels: row max, log-sum-exp, then the target's logit and the per-row
    outputs (forward), or the range flags and the logits' gradient (backward, ``grad``:
    the gradient's strides and dtype)."""
    m_rows, c = shape
    ct = dt.float64 if xd is dt.float64 else dt.float32
    x_view = ir.BufferView(xd, xs, 0)
    row = ir.BufferView(ct, (1, 0), 0)               # a [M, 1] result, along each row
    t_row = ir.BufferView(td, (ts[0], 0), 0)

    def xval(b=0):
        v = L.w(ir.Load(b, xd))
        return v if v.dtype is ct else ir.Cast(v, ct)

    def target(b):
        v = ir.Load(b, td)
        return v if td is _I64 else ir.Cast(v, _I64)

    zero, inf = ir.Const(0.0, ct), ir.Const(float("inf"), ct)
    acc = ir.Acc(ct)
    finite = ir.Binary("lt", ir.Unary("abs", acc, ct), inf, _B)
    k_max = ir.Reduce(shape, 1, (x_view,), xval(), "max",
                      ir.Select(finite, acc, zero, ct), ct)
    shifted = ir.Binary("sub", xval(), ir.Load(1, ct), ct)
    k_lse = ir.Reduce(shape, 1, (x_view, row), mathlib.exp(shifted), "sum",
                      ir.Binary("add", mathlib.log(acc), ir.Load(1, ct), ct), ct)
    valid_of = lambda b: ir.Binary("ne", target(b), ir.Const(ignore, _I64), _B)  # noqa: E731

    def out_of_range(b):
        tv = target(b)
        return ir.Binary("and", valid_of(b), ir.Binary(
            "or", ir.Binary("lt", tv, ir.Const(0, _I64), _B),
            ir.Binary("ge", tv, ir.Const(c, _I64), _B), _B), _B)

    flat = lambda s: ir.BufferView(ct, (s,), 0)                            # noqa: E731
    if grad is None:
        is_target = ir.Binary("eq", ir.Index(1), target(1), _B)
        k_pick = ir.Reduce(shape, 1, (x_view, t_row), ir.Select(is_target, xval(), zero, ct),
                           "sum", acc, ct)
        valid = valid_of(2)
        loss = ir.Select(valid, ir.Binary("sub", ir.Load(0, ct), ir.Load(1, ct), ct), zero, ct)
        k_last = ir.Elementwise((m_rows,), (flat(1), flat(1), ir.BufferView(td, ts, 0)),
                                (loss, ir.Select(valid, ir.Const(1.0, ct), zero, ct),
                                 out_of_range(2)), (xd, xd, _B))
        return k_max, k_lse, k_pick, k_last
    gs, gd = grad
    k_bad = ir.Elementwise((m_rows,), (ir.BufferView(td, ts, 0),), (out_of_range(0),), (_B,))
    p = mathlib.exp(ir.Binary("sub", xval(), ir.Load(1, ct), ct))
    onehot = ir.Select(ir.Binary("eq", ir.Index(1), target(2), _B), ir.Const(1.0, ct), zero,
                       ct)
    gv = L.w(ir.Load(3, gd))
    gv = gv if gv.dtype is ct else ir.Cast(gv, ct)
    scale = ir.Select(valid_of(2), gv, zero, ct)
    dx = ir.Binary("mul", ir.Binary("sub", p, onehot, ct), scale, ct)
    k_grad = ir.Elementwise(shape, (x_view, row, t_row, ir.BufferView(gd, (gs[0], 0), 0)),
                            (dx,), (xd,))
    return k_max, k_lse, k_bad, k_grad
