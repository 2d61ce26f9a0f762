"""Max pooling as generated kernels, for Fusion on the CPU.

NumPy pools in several passes over a copied array of windows (~75 µs for the [32, 16, 8, 8]
output of a conv; its backward, a scatter, ~30 µs). One elementwise kernel of the IR does
either in a few: the pooling ops have no IR ``expr`` (a window is no elementwise
neighbourhood of one position), but their common geometries are elementwise kernels over
views, built here.

- Forward (``max_pool{n}d``, ``max_pool{n}d_with_indices``), no padding, every window inside
  the input: the iteration space is the output in the input's memory order (channels
  innermost after a conv, as the NumPy form lays its result out); each window offset is a
  view of the input (its strides times the pooling stride, offset by the dilated offset);
  PyTorch's scan -- the first strictly larger value wins, and any NaN does -- is a chain of
  selects, and the argmax's flat plane index comes from the position (`ir.Index`).
- Backward (``max_pool{n}d_backward``) where the windows tile the input exactly (stride =
  kernel, no dilation, sizes divisible) and the indices are ones this module computed: the
  iteration space is the input with each dim split into [out, offset] (which is the input's
  own order), and a position takes its window's gradient where the window's argmax is that
  position. Indices from elsewhere may point outside their window; the inner backend's
  scatter takes them as they are.

Any other geometry (padding, ceil mode past the edge, overlapping or gapped windows, more
than `MAX_OFFSETS` offsets, bool or empty tensors) returns None: the inner backend runs it.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np

from ... import dtype as dt
from ...kernel import ir
from ...kernel import lower_ops as L
from ...kernel.strides import element_strides
from ...ops.nn import pool_channels_last
from .runtime import compile_counted, launcher_of
from .stats import counts as _counts

#: windows of more offsets run on the inner backend (a load and three selects each)
MAX_OFFSETS = 64
#: op name -> (spatial dims, what it computes)
OPS = {f"max_pool{n}d{suffix}": (n, kind) for n in (1, 2)
       for suffix, kind in (("", "values"), ("_with_indices", "indices"),
                            ("_backward", "backward"))}


class PoolKernels:
    """The pooling kernels of one Fusion backend, compiled on its kernel ``runtime`` and
    cached by geometry (input shape, strides, dtype, window)."""

    def __init__(self, runtime):
        self.runtime = runtime
        self._launchers: dict = {}     # key -> launcher, or None: not a kernel's geometry
        self._ours: dict = {}          # id(indices) -> (weakref to them, tiles: `_remember`)
        self._lock = threading.Lock()

    def run(self, op, prims, attrs, meta):
        """The op's outputs as a kernel computes them, or None (the inner backend runs it)."""
        nd, kind = OPS[op.name]
        if kind == "backward":
            return self._backward(nd, prims, attrs)
        x = prims[0]
        if type(x) is not np.ndarray or x.ndim != nd + 2 or x.size == 0 or \
                x.dtype == np.bool_ or any(attrs["padding"]):
            return None
        out_shape = meta[0][0] if kind == "indices" else meta[0]
        key = (kind, x.shape, x.strides, x.dtype, tuple(attrs["kernel"]),
               tuple(attrs["stride"]), tuple(attrs["dilation"]), out_shape)
        launch = self._launchers.get(key, False)
        if launch is False:
            launch = self._build(key, _forward_kernel, x, attrs, out_shape, kind)
        if launch is None:
            return None
        run, order, n_views = launch
        outs = run([x] * n_views)
        _counts().kernels += 1
        inv = _inverse(order)
        if kind == "values":
            return outs[0].transpose(inv)
        best, idx = outs[0].transpose(inv), outs[1].transpose(inv)
        self._remember(idx, attrs, x.shape[2:], out_shape[2:])
        return best, idx

    def _backward(self, nd, prims, attrs):
        g, idx = prims
        made = self._ours.get(id(idx))
        if made is None or made[0]() is not idx or type(g) is not np.ndarray or \
                g.size == 0 or g.dtype == np.bool_:
            return None
        tiles = made[1]           # windows that tile the input: their extents
        size = tuple(attrs["input_size"])
        if tiles is None or size != tuple(o * k for o, k in zip(g.shape[2:], tiles)):
            return None
        key = ("backward", g.shape, g.strides, g.dtype, idx.strides, idx.dtype, size)
        launch = self._launchers.get(key, False)
        if launch is False:
            launch = self._build(key, _backward_kernel, (g, idx), attrs, None, "backward")
        if launch is None:
            return None
        run, order, shape = launch
        out = run([g, idx])[0]
        _counts().kernels += 1
        return out.reshape(shape).transpose(_inverse(order))

    def _build(self, key, make, x, attrs, out_shape, kind):
        made = make(x, attrs, out_shape, kind)
        launch = None
        if made is not None:
            kernel, order, extra = made
            (program,) = compile_counted(self.runtime, (kernel,))
            launch = (launcher_of(self.runtime, program), order, extra)
        with self._lock:
            if len(self._launchers) >= 512:
                self._launchers.clear()
            self._launchers[key] = launch
        return launch

    def _remember(self, idx, attrs, size, osz):
        """Note an index array made here, and whether its windows tile the input exactly
        (then the backward kernel may take it); forgotten when the array is collected."""
        kernel = tuple(attrs["kernel"])
        tiles = kernel if tuple(attrs["stride"]) == kernel and \
            all(d == 1 for d in attrs["dilation"]) and \
            all(o * k == n for o, k, n in zip(osz, kernel, size)) else None
        k = id(idx)
        ours = self._ours

        def gone(_, k=k):
            ours.pop(k, None)
        ours[k] = (weakref.ref(idx, gone), tiles)


def _inverse(order):
    return tuple(int(i) for i in np.argsort(order))


def _forward_kernel(x, attrs, out_shape, kind):
    """(the kernel, the iteration order of the output's dims, the number of input views)."""
    kernel, stride = tuple(attrs["kernel"]), tuple(attrs["stride"])
    dilation = tuple(attrs["dilation"])
    size, osz = x.shape[2:], out_shape[2:]
    nd = len(size)
    if any((o - 1) * s + d * (k - 1) + 1 > n
           for o, s, d, k, n in zip(osz, stride, dilation, kernel, size)):
        return None                      # a window past the edge (ceil mode)
    n_off = int(np.prod(kernel))
    est = element_strides(x)
    if n_off > MAX_OFFSETS or est is None:
        return None
    order = (0,) + tuple(range(2, 2 + nd)) + (1,) if pool_channels_last(x) else \
        tuple(range(2 + nd))
    shape = tuple(out_shape[i] for i in order)
    pos = {d: i for i, d in enumerate(order)}          # logical dim -> iteration dim
    # per logical dim, the input element stride of one output step
    step = (est[0], est[1]) + tuple(est[2 + j] * stride[j] for j in range(nd))
    view_strides = tuple(step[d] for d in order)
    plane = [1] * nd
    for j in range(nd - 2, -1, -1):
        plane[j] = plane[j + 1] * size[j + 1]
    dtype = dt.from_numpy(x.dtype)
    views, best, idx = [], None, None
    i64 = dt.int64
    base = None
    for j in range(nd):
        t = ir.Binary("mul", ir.Index(pos[2 + j]), ir.Const(stride[j] * plane[j], i64), i64)
        base = t if base is None else ir.Binary("add", base, t, i64)
    for b, off in enumerate(np.ndindex(*kernel)):
        views.append(ir.BufferView(dtype, view_strides,
                                   sum(o * d * est[2 + j] for j, (o, d) in
                                       enumerate(zip(off, dilation)))))
        v = L.w(ir.Load(b, dtype))
        delta = sum(o * d * plane[j] for j, (o, d) in enumerate(zip(off, dilation)))
        at = ir.Binary("add", base, ir.Const(delta, i64), i64) if delta else base
        if best is None:
            best, idx = v, at
            continue
        upd = ir.Binary("gt", v, best, dt.bool_)
        if dtype.is_float:
            upd = ir.Binary("or", upd, ir.Binary("ne", v, v, dt.bool_), dt.bool_)
        best = ir.Select(upd, v, best, v.dtype)
        if kind == "indices":
            idx = ir.Select(upd, at, idx, i64)
    if kind == "indices":
        k = ir.Elementwise(shape, tuple(views), (best, idx), (dtype, i64))
    else:
        k = ir.Elementwise(shape, tuple(views), (best,), (dtype,))
    return k, order, n_off


def _backward_kernel(prims, attrs, _out_shape, _kind):
    """(the kernel, the iteration order of the input's dims, the input-order shape)."""
    g, idx = prims
    size = tuple(attrs["input_size"])
    nd = len(size)
    osz = g.shape[2:]
    win = tuple(n // o for o, n in zip(osz, size))      # (exact: checked by the caller)
    gst, ist = element_strides(g), element_strides(idx)
    if gst is None or ist is None or idx.dtype.kind not in "iu":
        return None
    cl = pool_channels_last(idx)
    order = (0,) + tuple(range(2, 2 + nd)) + (1,) if cl else tuple(range(2 + nd))
    # iteration dims: N, then per spatial dim (out, offset), and C first or last
    dims, g_str, i_str = [], [], []

    def add(extent, gs, is_):
        dims.append(extent)
        g_str.append(gs)
        i_str.append(is_)
    spatial_pos = {}
    for d in order:
        if d < 2:
            add(g.shape[d], gst[d], ist[d])
            continue
        j = d - 2
        spatial_pos[j] = len(dims)
        add(osz[j], gst[d], ist[d])
        add(win[j], 0, 0)
    plane = [1] * nd
    for j in range(nd - 2, -1, -1):
        plane[j] = plane[j + 1] * size[j + 1]
    i64 = dt.int64
    here = None
    for j in range(nd):
        p = spatial_pos[j]
        row = ir.Binary("add", ir.Binary("mul", ir.Index(p), ir.Const(win[j], i64), i64),
                        ir.Index(p + 1), i64)
        t = ir.Binary("mul", row, ir.Const(plane[j], i64), i64) if plane[j] != 1 else row
        here = t if here is None else ir.Binary("add", here, t, i64)
    gd, idd = dt.from_numpy(g.dtype), dt.from_numpy(idx.dtype)
    gv = L.w(ir.Load(0, gd))
    iv = ir.Load(1, idd)
    if idd is not i64:
        iv = ir.Cast(iv, i64)
    e = ir.Select(ir.Binary("eq", iv, here, dt.bool_), gv, L.k(0, gv), gv.dtype)
    kernel = ir.Elementwise(tuple(dims), (ir.BufferView(gd, tuple(g_str), 0),
                                          ir.BufferView(idd, tuple(i_str), 0)),
                            (e,), (gd,))
    in_order = tuple(g.shape[d] if d < 2 else size[d - 2] for d in order)
    return kernel, order, in_order
