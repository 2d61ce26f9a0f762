"""Module ops: convolutions, pooling, resizing and embedding lookups (PyTorch layouts).

Layouts are channels-first: inputs ``[N, C, *spatial]`` with one (``1d``) or two (``2d``)
spatial dims. Conv weights are ``[out, in/groups, *kernel]``; transposed-conv weights
``[in, out/groups, *kernel]``. Every forward op has a backward *primitive* (weight gradient
of a conv, scatter of a pool, ...), so derivatives are ember ops on any backend, and the
families are closed under differentiation: the adjoint of each backward primitive is a
forward op (``conv`` <-> ``conv_transpose`` <-> ``conv_weight_backward``,
``avg_pool`` <-> ``avg_pool_backward``, ``embedding`` <-> ``embedding_backward``, ...).

Attributes are canonical: per-spatial-dim tuples of ints (``stride``, ``padding``,
``dilation``, ``kernel``), ``groups`` an int, flags as bools. The Tensor API
(``ember/tensor/nn_ops.py``) normalizes user arguments; biases are added there, as a
broadcast ``add``, so they need no op of their own.

NumPy implementations compute f16/bf16 in f32 (f64 in f64) and round once at the end;
they loop at most over kernel offsets, never over output pixels.
"""
from __future__ import annotations

import functools

import numpy as np

from .. import dtype as dt
from ..errors import DTypeError, IndexError_, ShapeError
from ._api import api, run_op
from ._xp import add_at, as_strided, check_indices, device_array, weighted_bincount
from .registry import declare
from .rules import require_kind, same_dtype

_run = run_op


def _ct(a):
    """The dtype NumPy computes in: f64 stays f64, every other float goes through f32."""
    return np.float64 if a.dtype == np.float64 else np.float32


def _layout(nd):
    return "[N, C, L]" if nd == 1 else "[N, C, H, W]"


def _check_input(op, x, nd, what="input"):
    if len(x._shape) != nd + 2:
        raise ShapeError(f"{op}: expects a {nd + 2}-d {what} {_layout(nd)}, got shape "
                         f"{x._shape}")
    if x._dtype.kind != "float":
        require_kind(op, x._dtype, "float", what)


# -- shared geometry ------------------------------------------------------------------------
def conv_out_size(op, n, k, s, p, d, what="input"):
    ext = d * (k - 1) + 1
    if n + 2 * p < ext:
        raise ShapeError(f"{op}: the kernel (size {k}, dilation {d}: {ext} positions) is larger "
                         f"than the padded {what} ({n} + 2*{p} = {n + 2 * p}); valid: "
                         f"dilation*(kernel-1)+1 <= size + 2*padding")
    return (n + 2 * p - ext) // s + 1


def pool_out_size(op, n, k, s, p, d, ceil_mode):
    """PyTorch's pooling output size (a ceil-mode window must start inside the input or
    its left padding)."""
    ext = d * (k - 1) + 1
    num = n + 2 * p - ext
    if num < 0:
        raise ShapeError(f"{op}: the window (size {k}, dilation {d}: {ext} positions) is larger "
                         f"than the padded input ({n} + 2*{p} = {n + 2 * p})")
    o = (num + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (o - 1) * s >= n + p:
        o -= 1
    return o


def _transpose_out_size(n, k, s, p, op_, d):
    return (n - 1) * s - 2 * p + d * (k - 1) + op_ + 1


def _grad_output_padding(in_size, out_size, kernel, stride, padding, dilation):
    """The output_padding that makes conv_transpose of a conv's output grad as large as the
    conv's input (the rows a strided conv never read)."""
    try:    # (a pure function of tuples of ints, asked the same at every training step)
        return _grad_output_padding_cached(in_size, out_size, kernel, stride, padding,
                                           dilation)
    except TypeError:   # an unhashable argument (a list): computed as it is
        return _grad_output_padding_of(in_size, out_size, kernel, stride, padding, dilation)


def _grad_output_padding_of(in_size, out_size, kernel, stride, padding, dilation):
    return tuple(n + 2 * p - d * (k - 1) - 1 - (o - 1) * s
                 for n, o, k, s, p, d in zip(in_size, out_size, kernel, stride, padding,
                                              dilation))


_grad_output_padding_cached = functools.lru_cache(maxsize=1024)(_grad_output_padding_of)


def _pad(x, lo, hi, nd, value=0.0, xp=np):
    if not any(lo) and not any(hi):
        return x
    return xp.pad(x, ((0, 0), (0, 0)) + tuple(zip(lo, hi)), constant_values=value)


def _im2col(x, kernel, stride, padding, dilation, groups, nd, xp=np):
    """``[groups, N*P, K*C/groups]`` columns of a conv input (kernel-offset major, channel
    minor), and the output spatial size. The input is copied once, zero-padded with its
    channels innermost (so the column copy moves contiguous runs of kernel-width * channels),
    and the windows are a strided view of that copy."""
    n, c = x.shape[:2]
    size = x.shape[2:]
    cg = c // groups
    if cg * kernel[-1] < 8 and stride[-1] == 1:
        return _im2col_by_position(x, kernel, stride, padding, dilation, groups, nd, xp)
    xl = x.transpose((0,) + tuple(range(2, 2 + nd)) + (1,))
    if any(padding):
        xpad = xp.zeros((n,) + tuple(s_ + 2 * p for s_, p in zip(size, padding)) + (c,),
                        x.dtype)
        xpad[(slice(None),) + tuple(slice(p, p + s_) for p, s_ in zip(padding, size))] = xl
        xl = xpad
    osz = tuple(conv_out_size("conv", s_, k, st, p, d) for s_, k, st, p, d in
                zip(size, kernel, stride, padding, dilation))
    st = xl.strides
    win = as_strided(xl, (groups, n) + osz + tuple(kernel) + (cg,),
                     (cg * st[-1], st[0]) + tuple(st[1 + i] * stride[i] for i in range(nd))
                     + tuple(st[1 + i] * dilation[i] for i in range(nd)) + (st[-1],), xp)
    p = 1
    for o in osz:
        p *= o
    kp = 1
    for k in kernel:
        kp *= k
    return xp.ascontiguousarray(win).reshape(groups, n * p, kp * cg), osz


def _im2col_by_position(x, kernel, stride, padding, dilation, groups, nd, xp=np):
    """`_im2col`'s columns built as ``[groups, K*Cg, N*P]`` (output positions innermost) and
    returned transposed, a view of the same shape and values: for few channels per group
    (a first conv layer), where runs of kernel-width * channels are too short to copy fast
    and a row of output positions is a contiguous run of the input (stride 1)."""
    n, c = x.shape[:2]
    size = x.shape[2:]
    cg = c // groups
    xl = x.transpose((1, 0) + tuple(range(2, 2 + nd)))                 # [C, N, *S]
    if any(padding):
        xpad = xp.zeros((c, n) + tuple(s_ + 2 * p for s_, p in zip(size, padding)), x.dtype)
        xpad[(slice(None), slice(None)) + tuple(slice(p, p + s_) for p, s_ in
                                                zip(padding, size))] = xl
        xl = xpad
    osz = tuple(conv_out_size("conv", s_, k, st, p, d) for s_, k, st, p, d in
                zip(size, kernel, stride, padding, dilation))
    st = xl.strides
    win = as_strided(xl, (groups,) + tuple(kernel) + (cg, n) + osz,
                     (cg * st[0],) + tuple(st[2 + i] * dilation[i] for i in range(nd))
                     + (st[0], st[1]) + tuple(st[2 + i] * stride[i] for i in range(nd)), xp)
    p = 1
    for o in osz:
        p *= o
    kp = 1
    for k in kernel:
        kp *= k
    return xp.ascontiguousarray(win).reshape(groups, kp * cg, n * p).transpose(0, 2, 1), osz


def _w_cols(w, groups, nd, xp=np):
    """Conv weight ``[O, Cg, *K]`` as ``[g, K*Cg, F]`` (rows ordered like `_im2col`'s)."""
    o, cg = w.shape[:2]
    f = o // groups
    wg = w.reshape((groups, f, cg) + w.shape[2:])
    wg = wg.transpose((0,) + tuple(range(3, 3 + nd)) + (2, 1))
    return wg.reshape(groups, -1, f) if wg.size else xp.zeros((groups, 0, f), w.dtype)


def _to_nc(y, n, groups, osz, f, nd):
    """``[groups, N*P, F]`` -> ``[N, groups*F, *osz]``."""
    y = y.reshape((groups, n) + tuple(osz) + (f,))
    y = y.transpose((1, 0, 2 + nd) + tuple(range(2, 2 + nd)))
    return y.reshape((n, groups * f) + tuple(osz))


def _from_nc(g, groups, nd):
    """``[N, groups*F, *S]`` -> ``[groups, N*P, F]``."""
    n, c = g.shape[:2]
    f = c // groups
    g = g.reshape((n, groups, f) + g.shape[2:])
    g = g.transpose((1, 0) + tuple(range(3, 3 + nd)) + (2,))
    return g.reshape(groups, -1, f)


def _offsets(x, kernel, stride, padding, dilation, osz, nd, xp=np):
    """For each kernel offset, the strided view of the padded input it multiplies:
    ``[N, C, *osz]`` each."""
    xpad = _pad(x, padding, padding, nd, xp=xp)
    for off in np.ndindex(*kernel):
        yield xpad[(slice(None), slice(None)) + tuple(
            slice(o * d, o * d + s * (n - 1) + 1, s)
            for o, d, s, n in zip(off, dilation, stride, osz))]


def _depthwise(x, w, stride, padding, dilation, nd, xp=np):
    """A conv with one input channel per group: per kernel offset, a broadcast
    multiply-add (no columns, no GEMM)."""
    n, c = x.shape[:2]
    f = w.shape[0] // c
    kernel = w.shape[2:]
    osz = tuple(conv_out_size("conv", s_, k, st, p, d) for s_, k, st, p, d in
                zip(x.shape[2:], kernel, stride, padding, dilation))
    wk = w.reshape((c, f, -1))
    out = xp.zeros((n, c, f) + osz, x.dtype)
    tmp = xp.empty_like(out)
    expand = (slice(None), slice(None), None)
    wshape = (1, c, f) + (1,) * nd
    for ki, xs in enumerate(_offsets(x, kernel, stride, padding, dilation, osz, nd, xp)):
        xp.multiply(xs[expand], wk[:, :, ki].reshape(wshape), out=tmp)
        out += tmp
    return out.reshape((n, c * f) + osz)


def _depthwise_weight_backward(x, gy, kernel, stride, padding, dilation, nd, xp=np):
    n, c = x.shape[:2]
    f = gy.shape[1] // c
    osz = gy.shape[2:]
    g4 = gy.reshape((n, c, f, -1))
    dw = xp.empty((c, f) + tuple(kernel), x.dtype)
    dwk = dw.reshape(c, f, -1)
    for ki, xs in enumerate(_offsets(x, kernel, stride, padding, dilation, osz, nd, xp)):
        dwk[:, :, ki] = xp.einsum("ncfp,ncp->cf", g4, xs.reshape(n, c, -1))
    return dw.reshape((c * f, 1) + tuple(kernel))


# -- convolution ----------------------------------------------------------------------------
def _conv_np(nd):
    def conv(x, w, stride, padding, dilation, groups, *, xp=np):
        ct = _ct(x)
        xc, wc = x.astype(ct, copy=False), w.astype(ct, copy=False)
        o, cg = w.shape[:2]
        if cg == 1 and groups > 1:
            return _depthwise(xc, wc, stride, padding, dilation, nd, xp).astype(x.dtype,
                                                                                copy=False)
        cols, osz = _im2col(xc, w.shape[2:], stride, padding, dilation, groups, nd, xp)
        y = xp.matmul(cols, _w_cols(wc, groups, nd, xp))
        return _to_nc(y, x.shape[0], groups, osz, o // groups, nd).astype(x.dtype, copy=False)
    return conv


def _conv_transpose_np(nd):
    def conv_transpose(x, w, stride, padding, output_padding, dilation, groups, *, xp=np):
        ct = _ct(x)
        xc, wc = x.astype(ct, copy=False), w.astype(ct, copy=False)
        n, cin = x.shape[:2]
        size = x.shape[2:]
        f = w.shape[1]
        kernel = w.shape[2:]
        kp = 1
        for k in kernel:
            kp *= k
        cg = cin // groups
        full = tuple((s_ - 1) * st + d * (k - 1) + 1 + op_ for s_, st, d, k, op_ in
                     zip(size, stride, dilation, kernel, output_padding))
        osz = tuple(_transpose_out_size(s_, k, st, p, op_, d) for s_, k, st, p, op_, d in
                    zip(size, kernel, stride, padding, output_padding, dilation))
        crop = tuple(slice(p, p + o) for p, o in zip(padding, osz))
        if groups == 1 and all(st == 1 for st in stride) and all(
                d * (k - 1) >= p for d, k, p in zip(dilation, kernel, padding)):
            # stride 1: a convolution of x with the flipped, transposed weight (one im2col
            # and one matmul, where the general path adds a strided slice per kernel offset)
            wf = xp.ascontiguousarray(
                wc[(slice(None), slice(None)) + (slice(None, None, -1),) * nd].swapaxes(0, 1))
            pad = tuple(d * (k - 1) - p for d, k, p in zip(dilation, kernel, padding))
            cols, osz2 = _im2col(xc, kernel, (1,) * nd, pad, dilation, 1, nd, xp)
            y = xp.matmul(cols, _w_cols(wf, 1, nd, xp))
            return _to_nc(y, n, 1, osz2, f, nd).astype(x.dtype, copy=False)
        if cg == 1 and groups > 1:
            # one input channel per group: broadcast multiply-adds per kernel offset
            buf = xp.zeros((n, cin, f) + full, dtype=ct)
            wk = wc.reshape(cin, f, kp)
            xe = xc[:, :, None]
            for ki, off in enumerate(np.ndindex(*kernel)):
                sl = (slice(None),) * 3 + tuple(
                    slice(o * d, o * d + st * (s_ - 1) + 1, st)
                    for o, d, st, s_ in zip(off, dilation, stride, size))
                buf[sl] += xe * wk[:, :, ki].reshape((1, cin, f) + (1,) * nd)
            y = buf[(slice(None),) * 3 + crop]
            return y.reshape((n, cin * f) + osz).astype(x.dtype, copy=False)
        # [g, N*P, Cg] @ [g, Cg, K*F]: every input pixel's contribution to each kernel offset
        wm = wc.reshape(groups, cg, f, kp).transpose(0, 1, 3, 2).reshape(groups, cg, kp * f)
        cols = xp.matmul(_from_nc(xc, groups, nd), wm)
        cols = cols.reshape((groups, n) + tuple(size) + (kp, f))
        buf = xp.zeros((groups, n) + full + (f,), dtype=ct)
        for ki, off in enumerate(np.ndindex(*kernel)):
            sl = (slice(None), slice(None)) + tuple(
                slice(o * d, o * d + st * (s_ - 1) + 1, st)
                for o, d, st, s_ in zip(off, dilation, stride, size))
            v = buf[sl]
            xp.add(v, cols[..., ki, :], out=v)      # in place (``+=`` would copy back)
        y = buf[(slice(None), slice(None)) + crop]
        y = y.transpose((1, 0, 2 + nd) + tuple(range(2, 2 + nd)))
        return y.reshape((n, groups * f) + osz).astype(x.dtype, copy=False)
    return conv_transpose


def _conv_weight_backward_np(nd):
    def conv_weight_backward(x, gy, kernel, stride, padding, dilation, groups, *, xp=np):
        ct = _ct(x)
        xc, gc = x.astype(ct, copy=False), gy.astype(ct, copy=False)
        o, c = gy.shape[1], x.shape[1]
        cg = c // groups
        if cg == 1 and groups > 1:
            dw = _depthwise_weight_backward(xc, gc, kernel, stride, padding, dilation, nd, xp)
            return dw.astype(x.dtype, copy=False)
        cols, _ = _im2col(xc, kernel, stride, padding, dilation, groups, nd, xp)
        gm = _from_nc(gc, groups, nd)                      # [g, N*P, F]
        dw = xp.matmul(gm.transpose(0, 2, 1), cols)       # [g, F, K*Cg]
        dw = dw.reshape((o,) + tuple(kernel) + (cg,))
        dw = dw.transpose((0, 1 + nd) + tuple(range(1, 1 + nd)))
        return xp.ascontiguousarray(dw).astype(x.dtype, copy=False)
    return conv_weight_backward


def _check_groups(op, groups, c, o, what_c="input channels", what_o="output channels"):
    if not isinstance(groups, int) or groups < 1:
        raise ShapeError(f"{op}: groups must be a positive int, got {groups!r}")
    if c % groups:
        raise ShapeError(f"{op}: groups={groups} does not divide the {c} {what_c}")
    if o % groups:
        raise ShapeError(f"{op}: groups={groups} does not divide the {o} {what_o}")


def _conv_infer(op, nd):
    def infer(x, w, stride, padding, dilation, groups):
        _check_input(op, x, nd)
        _check_input(op, w, nd, "weight")
        same_dtype(op, x._dtype, w._dtype)
        n, c = x._shape[:2]
        o, wc = w._shape[:2]
        kernel = w._shape[2:]
        _check_groups(op, groups, c, o, what_o="output channels (weight dim 0)")
        if wc * groups != c:
            want = (o, c // groups) + kernel
            raise ShapeError(
                f"{op}: weight {w._shape} does not fit input {x._shape}: the input has {c} "
                f"channels, the weight takes {wc}*groups={wc * groups}; expected a weight of "
                f"shape {want} ([out, in/groups, *kernel], groups={groups})")
        osz = tuple(conv_out_size(op, s_, k, st, p, d) for s_, k, st, p, d in
                    zip(x._shape[2:], kernel, stride, padding, dilation))
        return ((n, o) + osz, x._dtype)
    return infer


def _conv_transpose_infer(op, nd):
    def infer(x, w, stride, padding, output_padding, dilation, groups):
        _check_input(op, x, nd)
        _check_input(op, w, nd, "weight")
        same_dtype(op, x._dtype, w._dtype)
        n, c = x._shape[:2]
        wi, f = w._shape[:2]
        kernel = w._shape[2:]
        _check_groups(op, groups, c, c)
        if wi != c:
            want = (c, f) + kernel
            raise ShapeError(
                f"{op}: weight {w._shape} does not fit input {x._shape}: the input has {c} "
                f"channels, the weight's dim 0 takes {wi}; expected a weight of shape {want} "
                f"([in, out/groups, *kernel], groups={groups})")
        for op_, st in zip(output_padding, stride):
            if op_ >= st:
                raise ShapeError(f"{op}: output_padding {output_padding} must be smaller than "
                                 f"the stride {stride} in every dim")
        osz = tuple(_transpose_out_size(s_, k, st, p, op_, d) for s_, k, st, p, op_, d in
                    zip(x._shape[2:], kernel, stride, padding, output_padding, dilation))
        if any(o < 1 for o in osz):
            raise ShapeError(f"{op}: input {x._shape} with kernel {kernel}, stride {stride}, "
                             f"padding {padding}, dilation {dilation} gives output size {osz}; "
                             f"every size must be >= 1 (reduce the padding)")
        return ((n, f * groups) + osz, x._dtype)
    return infer


def _conv_weight_backward_infer(op, nd):
    def infer(x, gy, kernel, stride, padding, dilation, groups):
        _check_input(op, x, nd)
        _check_input(op, gy, nd, "output gradient")
        same_dtype(op, x._dtype, gy._dtype)
        n, c = x._shape[:2]
        o = gy._shape[1]
        _check_groups(op, groups, c, o)
        osz = tuple(conv_out_size(op, s_, k, st, p, d) for s_, k, st, p, d in
                    zip(x._shape[2:], kernel, stride, padding, dilation))
        if gy._shape != (n, o) + osz:
            raise ShapeError(f"{op}: output gradient {gy._shape} does not match the conv of "
                             f"input {x._shape} with kernel {kernel}: expected "
                             f"{(n, o) + osz}")
        return ((o, c // groups) + tuple(kernel), x._dtype)
    return infer


def _declare_conv(nd):
    name, tname, wname = f"conv{nd}d", f"conv_transpose{nd}d", f"conv{nd}d_weight_backward"
    ops = {}

    # Each gradient is a conv as large as the forward one: only wanted ones are computed
    # (``needs``; a first layer's images, say, need none).
    def conv_vjp(g, i, o, stride, padding, dilation, groups, needs):
        x, w = i
        kernel = w._shape[2:]
        gx = gw = None
        if needs[0]:
            opad = _grad_output_padding(x._shape[2:], g._shape[2:], kernel, stride, padding,
                                        dilation)
            gx = _run(ops["t"], (g, w), stride=stride, padding=padding, output_padding=opad,
                      dilation=dilation, groups=groups)
        if needs[1]:
            gw = _run(ops["w"], (x, g), kernel=kernel, stride=stride, padding=padding,
                      dilation=dilation, groups=groups)
        return gx, gw

    def conv_transpose_vjp(g, i, o, stride, padding, output_padding, dilation, groups, needs):
        x, w = i
        gx = gw = None
        if needs[0]:
            gx = _run(ops["c"], (g, w), stride=stride, padding=padding, dilation=dilation,
                      groups=groups)
        if needs[1]:
            gw = _run(ops["w"], (g, x), kernel=w._shape[2:], stride=stride, padding=padding,
                      dilation=dilation, groups=groups)
        return gx, gw

    def weight_backward_vjp(g, i, o, kernel, stride, padding, dilation, groups, needs):
        x, gy = i
        gx = ggy = None
        if needs[0]:
            opad = _grad_output_padding(x._shape[2:], gy._shape[2:], kernel, stride, padding,
                                        dilation)
            gx = _run(ops["t"], (gy, g), stride=stride, padding=padding, output_padding=opad,
                      dilation=dilation, groups=groups)
        if needs[1]:
            ggy = _run(ops["c"], (x, g), stride=stride, padding=padding, dilation=dilation,
                       groups=groups)
        return gx, ggy

    ops["c"] = declare(
        name, "conv", nin=2, attrs=("stride", "padding", "dilation", "groups"),
        infer=_conv_infer(name, nd), numpy=_conv_np(nd), vjp=conv_vjp, vjp_needs=True,
        doc=f"{nd}-d cross-correlation of [N, C, *S] with weight [O, C/groups, *K] (no bias)")
    ops["t"] = declare(
        tname, "conv", nin=2,
        attrs=("stride", "padding", "output_padding", "dilation", "groups"),
        infer=_conv_transpose_infer(tname, nd), numpy=_conv_transpose_np(nd),
        vjp=conv_transpose_vjp, vjp_needs=True,
        doc=f"{nd}-d transposed conv of [N, C, *S] with weight [C, O/groups, *K] (no bias): "
            f"the adjoint of {name} in its input")
    ops["w"] = declare(
        wname, "conv", nin=2, attrs=("kernel", "stride", "padding", "dilation", "groups"),
        infer=_conv_weight_backward_infer(wname, nd), numpy=_conv_weight_backward_np(nd),
        vjp=weight_backward_vjp, vjp_needs=True,
        doc=f"the weight gradient of {name}: (input, output grad) -> [O, C/groups, *K]")
    return ops["c"], ops["t"], ops["w"]


CONV1D, CONV_TRANSPOSE1D, CONV1D_WEIGHT_BACKWARD = _declare_conv(1)
CONV2D, CONV_TRANSPOSE2D, CONV2D_WEIGHT_BACKWARD = _declare_conv(2)


# -- max pooling ----------------------------------------------------------------------------
def _pool_check(op, x, nd, kernel, stride, padding, dilation, ceil_mode):
    _check_input(op, x, nd)
    for k, p in zip(kernel, padding):
        if p > k // 2:
            raise ShapeError(f"{op}: padding {padding} must be at most half the kernel "
                             f"{kernel} in every dim")
    osz = tuple(pool_out_size(op, n, k, s, p, d, ceil_mode) for n, k, s, p, d in
                zip(x._shape[2:], kernel, stride, padding, dilation))
    if any(o < 1 for o in osz):
        raise ShapeError(f"{op}: input {x._shape} gives output size {osz}; sizes must be >= 1")
    return osz


def pool_channels_last(a) -> bool:
    """The pooling ops' layout rule: their results (and max pooling's gradient) keep
    channels innermost where ``a``'s are (a conv's output), so what follows reads one
    layout; any other layout gives [N, C, *S]. Every backend's form follows it."""
    return a.ndim > 2 and a.shape[1] > 1 and a.strides[1] == a.itemsize and a.size > 0


def _max_windows(x, kernel, stride, padding, dilation, ceil_mode, nd, xp=np):
    """The output size, whether the input was padded, the pooling windows as one contiguous
    array ``[K, *out_shape]`` (kernel offset first, so the reductions below are elementwise
    over contiguous rows) of the input padded with -inf (ceil mode pads the far side as far
    as the last window), and the order of ``[N, C, *out]`` in which the windows are laid
    out: the input's own (channels innermost when the input is, as a conv's output is, so
    the copy moves contiguous runs; else ``[N, C, *out]``)."""
    size = x.shape[2:]
    osz = tuple(pool_out_size("max_pool", n, k, s, p, d, ceil_mode) for n, k, s, p, d in
                zip(size, kernel, stride, padding, dilation))
    hi = tuple(max(0, (o - 1) * s + d * (k - 1) + 1 - n - p) for o, s, d, k, n, p in
               zip(osz, stride, dilation, kernel, size, padding))
    padded = any(padding) or any(hi)
    cl = pool_channels_last(x)
    order = (0,) + tuple(range(2, 2 + nd)) + (1,) if cl else tuple(range(2 + nd))
    if padded:
        full = x.shape[:2] + tuple(n + p + h for n, p, h in zip(size, padding, hi))
        xpad = xp.full(tuple(full[i] for i in order), -np.inf,
                       x.dtype).transpose(tuple(int(i) for i in np.argsort(order)))
        xpad[(slice(None), slice(None)) + tuple(slice(p, p + n) for p, n in
                                                zip(padding, size))] = x
    else:
        xpad = x
    st = xpad.strides
    wst = st[:2] + tuple(st[2 + i] * stride[i] for i in range(nd))
    out = x.shape[:2] + osz
    win = as_strided(xpad, tuple(kernel) + tuple(out[i] for i in order),
                     tuple(st[2 + i] * dilation[i] for i in range(nd))
                     + tuple(wst[i] for i in order), xp)
    kp = 1
    for k in kernel:
        kp *= k
    return osz, padded, xp.ascontiguousarray(win).reshape((kp,) + win.shape[nd:]), order


_CL_INV = {}


def _logical(a, order):
    """An array laid out in ``order`` (see `_max_windows`) as its ``[N, C, *S]`` view."""
    if order[-1] != 1:
        return a
    inv = _CL_INV.get(len(order))
    if inv is None:
        inv = _CL_INV[len(order)] = tuple(int(i) for i in np.argsort(order))
    return a.transpose(inv)


@functools.lru_cache(maxsize=256)
def _max_geometry(size, osz, kernel, stride, padding, dilation, order, padded):
    """Per output position, the flat plane index of its window's start (and of its first
    in-bounds position, when padded), broadcastable in ``order``; per kernel offset, the
    flat plane delta it adds."""
    nd = len(size)
    plane_strides = [1] * nd
    for i in range(nd - 2, -1, -1):
        plane_strides[i] = plane_strides[i + 1] * size[i + 1]
    base, first = 0, 0
    for i in range(nd):
        shape = [1] * (nd + 2)   # [N, C, *out] broadcast, laid out like the windows
        shape[2 + i] = osz[i]
        shape = tuple(shape[j] for j in order)
        start = np.arange(osz[i]) * stride[i] - padding[i]
        base = base + (start * plane_strides[i]).reshape(shape)
        if padded:   # the window's first in-bounds position along this dim
            f = np.where(start < 0, start + (-start + dilation[i] - 1) // dilation[i]
                         * dilation[i], start)
            first = first + (f * plane_strides[i]).reshape(shape)
    delta = np.array([sum(o * d * st for o, d, st in zip(off, dilation, plane_strides))
                      for off in np.ndindex(*kernel)], np.int64)
    for a in (base, first, delta):
        if isinstance(a, np.ndarray):
            a.flags.writeable = False
    return base, first, delta


def _max_pool_np(nd):
    def max_pool(x, kernel, stride, padding, dilation, ceil_mode, *, xp=np):
        _, _, win, order = _max_windows(x, kernel, stride, padding, dilation, ceil_mode, nd,
                                        xp)
        # propagates NaN (PyTorch)
        return _logical(np.maximum.reduce(win, axis=0) if xp is np else xp.amax(win, axis=0),
                        order)
    return max_pool


def _max_pool_idx_np(nd):
    def max_pool_with_indices(x, kernel, stride, padding, dilation, ceil_mode, *, xp=np):
        osz, padded, win, order = _max_windows(x, kernel, stride, padding, dilation,
                                               ceil_mode, nd, xp)
        # plane index = (window start's index) + (the offset's delta), both flat
        base, first, delta = _max_geometry(x.shape[2:], osz, kernel, stride, padding,
                                           dilation, order, padded)
        # PyTorch's scan: the first strictly larger value wins, and any NaN does (a NaN
        # anywhere makes the max NaN, so one reduction tells whether to look for them)
        kp = len(delta)
        # (a device takes the NaN-aware scan always: asking whether there is a NaN would
        # synchronize)
        if xp is not np or (win.size and np.isnan(np.maximum.reduce(win, axis=None))):
            best = win[0].copy()
            arg = xp.zeros(best.shape, np.intp)
            for k in range(1, kp):
                v = win[k]
                upd = (v > best) | xp.isnan(v)
                xp.copyto(best, v, where=upd)
                xp.copyto(arg, k, where=upd)
        else:
            # branch-free: the running max only grows, so the last offset that raised it
            # is the first position of the window's max
            run = win[0]
            arg = np.zeros(run.shape, np.uint8 if kp < 256 else np.intp)
            for k in range(1, kp):
                v = win[k]
                upd = np.greater(v, run)
                np.maximum(arg, np.multiply(upd, k, dtype=arg.dtype), out=arg)
                run = np.maximum(run, v)
            m = run.size
            pick = arg.astype(np.intp)
            pick *= m
            pick += np.arange(m).reshape(run.shape)
            best = win.reshape(kp * m).take(pick)
        idx = device_array(delta, xp).take(arg)
        idx += device_array(base, xp)
        if padded:
            none = best == -np.inf       # a window of -inf reports its first in-bounds place
            if xp is not np or none.any():
                idx = xp.where(none, device_array(first, xp), idx)
        return _logical(best, order), _logical(idx, order)
    return max_pool_with_indices


def _max_pool_backward_np(g, indices, input_size, disjoint=False, *, xp=np):
    n, c = g.shape[:2]
    nd = g.ndim - 2
    plane = 1
    for s_ in input_size:
        plane *= s_
    # The gradient is laid out as the pooled input was (the indices are): channels innermost
    # after a conv, so the elementwise backward ops upstream (relu's mask) and the conv's
    # own backward read matching layouts (mixed layouts cost NumPy several times the pass)
    cl = pool_channels_last(indices)
    if cl:   # flat position in an [N, *S, C] buffer: (n * plane + p) * C + c
        base = (xp.arange(0, n * plane * c, plane * c, dtype=np.int64).reshape(
            (n, 1) + (1,) * nd) + xp.arange(c, dtype=np.int64).reshape((1, c) + (1,) * nd))
        flat = (indices * c + base).reshape(-1)
        shape = (n,) + tuple(input_size) + (c,)
        back = (0, nd + 1) + tuple(range(1, nd + 1))
    else:
        base = xp.arange(0, n * c * plane, plane, dtype=np.int64).reshape(
            (n, c) + (1,) * nd)
        flat = (indices + base).reshape(-1)
        shape = (n, c) + tuple(input_size)
        back = None
    if disjoint:
        # windows that do not overlap: each input position gets at most one gradient
        out = xp.zeros(n * c * plane, g.dtype)
        out[flat] = g.reshape(-1)
    else:
        # scatter-add in f64 (bincount converts the weights)
        out = weighted_bincount(flat, g.reshape(-1), n * c * plane, xp).astype(
            g.dtype, copy=False)
    out = out.reshape(shape)
    return out if back is None else out.transpose(back)


def _disjoint_windows(kernel, stride, dilation) -> bool:
    """Whether pooling windows never overlap (each stride at least the window's extent)."""
    try:    # (asked with the same tuples of ints at every training step)
        return _disjoint_windows_cached(kernel, stride, dilation)
    except TypeError:   # an unhashable argument (a list)
        return _disjoint_windows_of(kernel, stride, dilation)


def _disjoint_windows_of(kernel, stride, dilation) -> bool:
    return all(s >= d * (k - 1) + 1 for k, s, d in zip(kernel, stride, dilation))


_disjoint_windows_cached = functools.lru_cache(maxsize=1024)(_disjoint_windows_of)


def _declare_max_pool(nd):
    name = f"max_pool{nd}d"
    iname, bname = f"{name}_with_indices", f"{name}_backward"
    attrs = ("kernel", "stride", "padding", "dilation", "ceil_mode")
    ops = {}

    def infer(x, kernel, stride, padding, dilation, ceil_mode):
        osz = _pool_check(name, x, nd, kernel, stride, padding, dilation, ceil_mode)
        return (x._shape[:2] + osz, x._dtype)

    def infer_idx(x, kernel, stride, padding, dilation, ceil_mode):
        osz = _pool_check(iname, x, nd, kernel, stride, padding, dilation, ceil_mode)
        return [(x._shape[:2] + osz, x._dtype), (x._shape[:2] + osz, dt.int64)]

    def infer_bwd(g, indices, input_size, disjoint=False):
        _check_input(bname, g, nd, "output gradient")
        if indices._shape != g._shape:
            raise ShapeError(f"{bname}: indices {indices._shape} must have the output "
                             f"gradient's shape {g._shape}")
        if indices._dtype.kind != "int":
            require_kind(bname, indices._dtype, "int", "indices")
        return (g._shape[:2] + tuple(input_size), g._dtype)

    def vjp(g, i, o, **attrs):
        x = i[0]
        idx = _run(ops["i"], (x,), **attrs)[1]
        return (_run(ops["b"], (g, idx), input_size=x._shape[2:],
                     disjoint=_disjoint_windows(attrs["kernel"], attrs["stride"],
                                                attrs["dilation"])),)

    def vjp_idx(g, i, o, **attrs):
        return (_run(ops["b"], (g, o[1]), input_size=i[0]._shape[2:],
                     disjoint=_disjoint_windows(attrs["kernel"], attrs["stride"],
                                                attrs["dilation"])),)

    def vjp_bwd(gg, i, o, input_size, disjoint=False):
        g, idx = i
        n, c = g._shape[:2]
        picked = api.gather(gg.reshape(n, c, -1), 2, idx.reshape(n, c, -1))
        return (picked.reshape(g._shape), None)

    ops["m"] = declare(name, "pool", nin=1, attrs=attrs, infer=infer, numpy=_max_pool_np(nd),
                       vjp=vjp, doc=f"{nd}-d max pooling")
    ops["i"] = declare(iname, "pool", nin=1, attrs=attrs, infer=infer_idx,
                       numpy=_max_pool_idx_np(nd), vjp=vjp_idx, nout=2,
                       doc=f"{nd}-d max pooling and the argmax of each window as a flat "
                           f"position in its input plane (i64)")
    ops["b"] = declare(bname, "pool", nin=2, attrs=("input_size", "disjoint"),
                       infer=infer_bwd, numpy=_max_pool_backward_np, vjp=vjp_bwd,
                       doc=f"the input gradient of {name}: scatter-add to the argmax indices "
                           f"(``disjoint``: the windows do not overlap, a plain scatter)")
    return ops["m"], ops["i"], ops["b"]


MAX_POOL1D, MAX_POOL1D_WITH_INDICES, MAX_POOL1D_BACKWARD = _declare_max_pool(1)
MAX_POOL2D, MAX_POOL2D_WITH_INDICES, MAX_POOL2D_BACKWARD = _declare_max_pool(2)


# -- average pooling ------------------------------------------------------------------------
@functools.lru_cache(maxsize=512)
def _avg_divisors(n, k, s, p, o, count_include_pad):
    """Per output position along one dim: 1 / the number of positions averaged (PyTorch:
    padding counts, positions past the padding never do)."""
    start = np.arange(o) * s - p
    end = np.minimum(start + k, n + p)
    if count_include_pad:
        cnt = end - start
    else:
        cnt = np.minimum(end, n) - np.maximum(start, 0)
    out = 1.0 / np.maximum(cnt, 1)
    out.flags.writeable = False
    return out


def _along(v, axis, ndim):
    shape = [1] * ndim
    shape[axis] = v.shape[0]
    return v.reshape(shape)


def _window_sum_axis(x, axis, k, s, p, o, xp=np):
    """Sums of ``k`` consecutive (zero-padded) positions every ``s``, along ``axis``."""
    n = x.shape[axis]
    hi = max(0, (o - 1) * s + k - n - p)
    if p or hi:
        pads = [(0, 0)] * x.ndim
        pads[axis] = (p, hi)
        x = xp.pad(x, pads)
    pre = (slice(None),) * axis
    out = x[pre + (slice(0, s * (o - 1) + 1, s),)].copy()
    for j in range(1, k):
        out += x[pre + (slice(j, j + s * (o - 1) + 1, s),)]
    return out


def _window_sum_axis_T(g, axis, k, s, p, n, xp=np):
    """The adjoint of `_window_sum_axis`: spread each output over its window."""
    o = g.shape[axis]
    total = max(n + p, (o - 1) * s + k)
    shape = list(g.shape)
    shape[axis] = total
    buf = xp.zeros(shape, g.dtype)
    pre = (slice(None),) * axis
    for j in range(k):
        buf[pre + (slice(j, j + s * (o - 1) + 1, s),)] += g
    return buf[pre + (slice(p, p + n),)]


def _avg_pool_np(nd):
    def avg_pool(x, kernel, stride, padding, ceil_mode, count_include_pad, *, xp=np):
        ct = _ct(x)
        y = x.astype(ct, copy=False)
        for i in range(nd):
            n = x.shape[2 + i]
            o = pool_out_size("avg_pool", n, kernel[i], stride[i], padding[i], 1, ceil_mode)
            y = _window_sum_axis(y, 2 + i, kernel[i], stride[i], padding[i], o, xp)
            y *= _along(device_array(_avg_divisors(n, kernel[i], stride[i], padding[i], o,
                                                   count_include_pad).astype(ct), xp),
                        2 + i, y.ndim)
        return y.astype(x.dtype, copy=False)
    return avg_pool


def _avg_pool_backward_np(nd):
    def avg_pool_backward(g, input_size, kernel, stride, padding, ceil_mode, count_include_pad,
                          *, xp=np):
        ct = _ct(g)
        y = g.astype(ct, copy=True)
        for i in range(nd):
            n, o = input_size[i], g.shape[2 + i]
            y = y * _along(device_array(_avg_divisors(n, kernel[i], stride[i], padding[i], o,
                                                      count_include_pad).astype(ct), xp),
                           2 + i, y.ndim)
            y = _window_sum_axis_T(y, 2 + i, kernel[i], stride[i], padding[i], n, xp)
        return y.astype(g.dtype, copy=False)
    return avg_pool_backward


def _declare_avg_pool(nd):
    name, bname = f"avg_pool{nd}d", f"avg_pool{nd}d_backward"
    attrs = ("kernel", "stride", "padding", "ceil_mode", "count_include_pad")
    ops = {}

    def infer(x, kernel, stride, padding, ceil_mode, count_include_pad):
        osz = _pool_check(name, x, nd, kernel, stride, padding, (1,) * nd, ceil_mode)
        return (x._shape[:2] + osz, x._dtype)

    def infer_bwd(g, input_size, kernel, stride, padding, ceil_mode, count_include_pad):
        _check_input(bname, g, nd, "output gradient")
        osz = tuple(pool_out_size(bname, n, k, s, p, 1, ceil_mode) for n, k, s, p in
                    zip(input_size, kernel, stride, padding))
        if g._shape[2:] != osz:
            raise ShapeError(f"{bname}: output gradient {g._shape} does not match pooling an "
                             f"input of size {input_size}: expected spatial size {osz}")
        return (g._shape[:2] + tuple(input_size), g._dtype)

    def vjp(g, i, o, **attrs):
        return (_run(ops["b"], (g,), input_size=i[0]._shape[2:], **attrs),)

    def vjp_bwd(gg, i, o, input_size, **attrs):
        return (_run(ops["a"], (gg,), **attrs),)

    ops["a"] = declare(name, "pool", nin=1, attrs=attrs, infer=infer, numpy=_avg_pool_np(nd),
                       vjp=vjp, doc=f"{nd}-d average pooling (PyTorch's divisor rules)")
    ops["b"] = declare(bname, "pool", nin=1, attrs=("input_size",) + attrs, infer=infer_bwd,
                       numpy=_avg_pool_backward_np(nd), vjp=vjp_bwd,
                       doc=f"the input gradient of {name}")
    return ops["a"], ops["b"]


AVG_POOL1D, AVG_POOL1D_BACKWARD = _declare_avg_pool(1)
AVG_POOL2D, AVG_POOL2D_BACKWARD = _declare_avg_pool(2)


# -- adaptive average pooling ---------------------------------------------------------------
@functools.lru_cache(maxsize=512)
def _adaptive_matrix(n, o):
    """``[o, n]``: row i averages input positions floor(i*n/o) .. ceil((i+1)*n/o)-1."""
    i = np.arange(o)
    start = (i * n) // o
    end = -((-(i + 1) * n) // o)
    j = np.arange(n)
    m = ((j >= start[:, None]) & (j < end[:, None])) / np.maximum(end - start, 1)[:, None]
    m.flags.writeable = False
    return m


def _apply_axis(y, m, axis, xp=np):
    """``m @ y`` along ``axis`` (``m`` is ``[out, in]``)."""
    y = xp.moveaxis(y, axis, -1)
    y = y @ device_array(m, xp).T
    return xp.moveaxis(y, -1, axis)


def _adaptive_np(nd):
    def adaptive_avg_pool(x, output_size, *, xp=np):
        ct = _ct(x)
        y = x.astype(ct, copy=False)
        for i in range(nd):
            y = _apply_axis(y, _adaptive_matrix(x.shape[2 + i], output_size[i]).astype(ct),
                            2 + i, xp)
        return xp.ascontiguousarray(y).astype(x.dtype, copy=False)
    return adaptive_avg_pool


def _adaptive_backward_np(nd):
    def adaptive_avg_pool_backward(g, input_size, *, xp=np):
        ct = _ct(g)
        y = g.astype(ct, copy=False)
        for i in range(nd):
            m = _adaptive_matrix(input_size[i], g.shape[2 + i]).astype(ct)
            y = _apply_axis(y, m.T, 2 + i, xp)
        return xp.ascontiguousarray(y).astype(g.dtype, copy=False)
    return adaptive_avg_pool_backward


def _declare_adaptive(nd):
    name, bname = f"adaptive_avg_pool{nd}d", f"adaptive_avg_pool{nd}d_backward"
    ops = {}

    def infer(x, output_size):
        _check_input(name, x, nd)
        if any(s_ == 0 for s_ in x._shape[2:]):
            raise ShapeError(f"{name}: input {x._shape} has an empty spatial dim; sizes must "
                             f"be >= 1")
        return (x._shape[:2] + tuple(output_size), x._dtype)

    def infer_bwd(g, input_size):
        _check_input(bname, g, nd, "output gradient")
        return (g._shape[:2] + tuple(input_size), g._dtype)

    def vjp(g, i, o, output_size):
        return (_run(ops["b"], (g,), input_size=i[0]._shape[2:]),)

    def vjp_bwd(gg, i, o, input_size):
        return (_run(ops["a"], (gg,), output_size=i[0]._shape[2:]),)

    ops["a"] = declare(name, "pool", nin=1, attrs=("output_size",), infer=infer,
                       numpy=_adaptive_np(nd), vjp=vjp,
                       doc=f"{nd}-d adaptive average pooling to a fixed output size")
    ops["b"] = declare(bname, "pool", nin=1, attrs=("input_size",), infer=infer_bwd,
                       numpy=_adaptive_backward_np(nd), vjp=vjp_bwd,
                       doc=f"the input gradient of {name}")
    return ops["a"], ops["b"]


ADAPTIVE_AVG_POOL1D, ADAPTIVE_AVG_POOL1D_BACKWARD = _declare_adaptive(1)
ADAPTIVE_AVG_POOL2D, ADAPTIVE_AVG_POOL2D_BACKWARD = _declare_adaptive(2)


# -- interpolation --------------------------------------------------------------------------
@functools.lru_cache(maxsize=512)
def _interp_plan(n, o, scale, mode, align_corners):
    """Source positions along one dim, PyTorch's formulas: ``nearest`` -> (index,),
    ``linear`` -> (i0, i1, weight of i1). ``scale`` is the user's scale factor (positions
    step by 1/scale) or None (then by n/o)."""
    dst = np.arange(o)
    if mode == "nearest":
        if o == n:
            idx = dst
        else:  # PyTorch computes this scale in f32; so do we, for identical indices
            sc = np.float32(1.0 / scale) if scale else np.float32(n) / np.float32(o)
            idx = np.minimum(np.floor(dst.astype(np.float32) * sc).astype(np.int64), n - 1)
        idx = idx.astype(np.int64)
        idx.flags.writeable = False
        return (idx,)
    if align_corners:
        sc = (n - 1) / (o - 1) if o > 1 else 0.0
        src = dst * sc
    else:
        sc = 1.0 / scale if scale else n / o
        src = np.maximum((dst + 0.5) * sc - 0.5, 0.0)
    i0 = np.minimum(src.astype(np.int64), n - 1)
    lam = np.clip(src - i0, 0.0, 1.0)
    i1 = np.where(i0 < n - 1, i0 + 1, i0)
    for a in (i0, lam, i1):
        a.flags.writeable = False
    return (i0, i1, lam)


def _index_add(g, axis, idx, n, xp=np):
    """The adjoint of ``take(idx, axis)`` for a non-decreasing ``idx``: segment sums
    (another namespace: an atomic scatter-add, which needs no order)."""
    shape = list(g.shape)
    shape[axis] = n
    out = xp.zeros(shape, g.dtype)
    if idx.size == 0 or g.size == 0:
        return out
    if xp is not np:
        return add_at(out, (slice(None),) * axis + (device_array(idx, xp),), g, xp)
    starts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
    sums = np.add.reduceat(g, starts, axis=axis)
    out[(slice(None),) * axis + (idx[starts],)] = sums
    return out


def _interp_np(nd):
    def interpolate(x, size, scales, mode, align_corners, *, xp=np):
        ct = _ct(x)
        y = x if mode == "nearest" else x.astype(ct, copy=False)
        for i in range(nd):
            ax = 2 + i
            plan = _interp_plan(x.shape[ax], size[i], scales[i] if scales else None, mode,
                                align_corners)
            if mode == "nearest":
                y = y.take(device_array(plan[0], xp), axis=ax)
            else:
                i0, i1, lam = (device_array(a, xp) for a in plan)
                lam = _along(lam.astype(ct), ax, y.ndim)
                y = y.take(i0, axis=ax) * (1 - lam) + y.take(i1, axis=ax) * lam
        return y.astype(x.dtype, copy=False)
    return interpolate


def _interp_backward_np(nd):
    def interpolate_backward(g, input_size, scales, mode, align_corners, *, xp=np):
        ct = _ct(g)
        y = g.astype(ct, copy=False)
        for i in range(nd - 1, -1, -1):
            ax = 2 + i
            n = input_size[i]
            plan = _interp_plan(n, g.shape[ax], scales[i] if scales else None, mode,
                                align_corners)
            if mode == "nearest":
                y = _index_add(y, ax, plan[0], n, xp)
            else:
                i0, i1, lam = plan
                lam = _along(device_array(lam.astype(ct), xp), ax, y.ndim)
                y = (_index_add(y * (1 - lam), ax, i0, n, xp)
                     + _index_add(y * lam, ax, i1, n, xp))
        return y.astype(g.dtype, copy=False)
    return interpolate_backward


INTERP_MODES = ("nearest", "linear")


def _interp_checks(op, x, size, scales, mode):
    if len(x._shape) not in (3, 4):
        raise ShapeError(f"{op}: expects a 3-d [N, C, L] or 4-d [N, C, H, W] input, got shape "
                         f"{x._shape}")
    if x._dtype.kind != "float":
        require_kind(op, x._dtype, "float")
    if mode not in INTERP_MODES:
        raise ValueError(f"{op}: mode must be one of {INTERP_MODES}, got {mode!r}")
    if len(size) != len(x._shape) - 2:
        raise ShapeError(f"{op}: size {size} must give one size per spatial dim of "
                         f"{x._shape}")
    if scales is not None and len(scales) != len(size):
        raise ShapeError(f"{op}: scales {scales} must give one scale per spatial dim")


def _interp_infer(x, size, scales, mode, align_corners):
    _interp_checks("interpolate", x, size, scales, mode)
    if any(s_ < 1 for s_ in size):
        raise ShapeError(f"interpolate: output size {size} must be >= 1 in every dim")
    if any(s_ < 1 for s_ in x._shape[2:]):
        raise ShapeError(f"interpolate: input {x._shape} has an empty spatial dim")
    return (x._shape[:2] + tuple(size), x._dtype)


def _interp_backward_infer(g, input_size, scales, mode, align_corners):
    _interp_checks("interpolate_backward", g, input_size, scales, mode)
    return (g._shape[:2] + tuple(input_size), g._dtype)


def _interp_vjp(g, i, o, size, scales, mode, align_corners):
    return (_run(INTERPOLATE_BACKWARD, (g,), input_size=i[0]._shape[2:], scales=scales,
                 mode=mode, align_corners=align_corners),)


def _interp_backward_vjp(gg, i, o, input_size, scales, mode, align_corners):
    return (_run(INTERPOLATE, (gg,), size=i[0]._shape[2:], scales=scales, mode=mode,
                 align_corners=align_corners),)


_INTERP_NP = {1: _interp_np(1), 2: _interp_np(2)}
_INTERP_BWD_NP = {1: _interp_backward_np(1), 2: _interp_backward_np(2)}

INTERPOLATE = declare(
    "interpolate", "pool", nin=1, attrs=("size", "scales", "mode", "align_corners"),
    infer=_interp_infer,
    numpy=lambda x, size, *, xp=np, **a: _INTERP_NP[len(size)](x, size, xp=xp, **a),
    vjp=_interp_vjp,
    doc="resize [N, C, L] or [N, C, H, W] to ``size`` (nearest, or (bi)linear); ``scales`` "
        "holds the user's scale factor per dim (PyTorch's index formulas) or None")
INTERPOLATE_BACKWARD = declare(
    "interpolate_backward", "pool", nin=1, attrs=("input_size", "scales", "mode",
                                                  "align_corners"),
    infer=_interp_backward_infer,
    numpy=lambda g, input_size, *, xp=np, **a: _INTERP_BWD_NP[len(input_size)](
        g, input_size, xp=xp, **a),
    vjp=_interp_backward_vjp,
    doc="the input gradient of interpolate")


# -- embedding ------------------------------------------------------------------------------
def _check_indices(op, indices, n, xp=np):
    check_indices(indices, n, lambda bad: f"{op}: index {bad} is out of range for {n} "
                                          f"embeddings; valid: 0..{n - 1}", xp)


def _embedding_np(weight, indices, *, xp=np):
    _check_indices("embedding", indices, weight.shape[0], xp)
    return weight.take(indices, axis=0)


def _embedding_backward_np(g, indices, num_weights, *, xp=np):
    _check_indices("embedding_backward", indices, num_weights, xp)
    d = g.shape[-1]
    ct = _ct(g)
    idx = indices.reshape(-1)
    rows = g.reshape(-1, d).astype(ct, copy=False)
    if xp is not np:                                  # a scatter-add needs no sorting
        return _index_add(rows, 0, idx, num_weights, xp).astype(g.dtype, copy=False)
    order = np.argsort(idx, kind="stable")
    out = _index_add(rows[order], 0, idx[order], num_weights)
    return out.astype(g.dtype, copy=False)


def _embedding_infer(weight, indices):
    if len(weight._shape) != 2:
        raise ShapeError(f"embedding: weight must be 2-d [num_embeddings, dim], got shape "
                         f"{weight._shape}")
    if weight._dtype.kind != "float":
        require_kind("embedding", weight._dtype, "float", "weight")
    if indices._dtype.kind != "int":
        require_kind("embedding", indices._dtype, "int", "indices")
    return (indices._shape + weight._shape[1:], weight._dtype)


def _embedding_backward_infer(g, indices, num_weights):
    if g._dtype.kind != "float":
        require_kind("embedding_backward", g._dtype, "float", "output gradient")
    if indices._dtype.kind != "int":
        require_kind("embedding_backward", indices._dtype, "int", "indices")
    if g._shape[:-1] != indices._shape or not g._shape:
        raise ShapeError(f"embedding_backward: output gradient {g._shape} must be the indices' "
                         f"shape {indices._shape} plus the embedding dim")
    return ((num_weights, g._shape[-1]), g._dtype)


EMBEDDING = declare(
    "embedding", "index", nin=2, infer=_embedding_infer, numpy=_embedding_np,
    vjp=lambda g, i, o: (_run(EMBEDDING_BACKWARD, (g, i[1]), num_weights=i[0]._shape[0]),
                         None),
    doc="rows of weight [V, D] at int indices of any shape -> [*indices, D]")
EMBEDDING_BACKWARD = declare(
    "embedding_backward", "index", nin=2, attrs=("num_weights",),
    infer=_embedding_backward_infer, numpy=_embedding_backward_np,
    vjp=lambda gg, i, o, num_weights: (_run(EMBEDDING, (gg, i[1])), None),
    doc="the weight gradient of embedding: rows of g summed into [num_weights, D]")


# -- cross entropy of int targets -----------------------------------------------------------
# One primitive for the common loss (logits [M, C], int class per row): the composite form
# (log_softmax, masking, gather, weights) costs about twenty ops forward and as many
# backward, a large share of a small model's training step. Its backward is a primitive too.
def _ce_check(op, x, t):
    if len(x._shape) != 2:
        raise ShapeError(f"{op}: expects logits [rows, classes], got shape {x._shape}")
    if x._dtype.kind != "float":
        require_kind(op, x._dtype, "float", "logits")
    if t._dtype.kind != "int":
        require_kind(op, t._dtype, "int", "target")
    if t._shape != x._shape[:1]:
        raise ShapeError(f"{op}: target {t._shape} must have one class per row of logits "
                         f"{x._shape}: shape {x._shape[:1]}")


def ce_target_message(bad: int, classes: int, ignore_index) -> str:
    """The error of a target class out of range (every backend's check says this)."""
    return (f"cross_entropy: target class {bad} is out of range for {classes} classes; "
            f"valid: 0 .. {classes - 1}, or ignore_index {ignore_index}")


def _ce_rows(x, t, ignore_index, xp):
    """(the target rows' valid mask, safe class per row, log-sum-exp per row, x in the
    compute dtype): shared by the forward and the backward."""
    valid = t != ignore_index
    if xp is np and valid.any():
        c = x.shape[1]
        bad = valid & ((t < 0) | (t >= c))
        if bad.any():
            raise IndexError_(ce_target_message(int(t[bad][0]), c, ignore_index))
    xc = x.astype(_ct(x), copy=False)
    safe = xp.where(valid, t, 0)
    m = xc.max(axis=1, keepdims=True) if xc.shape[1] else xp.zeros((xc.shape[0], 1), xc.dtype)
    m = xp.where(xp.isfinite(m), m, 0)        # rows of -inf / inf: no NaN from inf - inf
    lse = xp.log(xp.exp(xc - m).sum(axis=1, keepdims=True)) + m
    return valid, safe, lse, xc


def _ce_numpy(x, t, *, ignore_index, xp=np):
    valid, safe, lse, xc = _ce_rows(x, t, ignore_index, xp)
    picked = xc[xp.arange(xc.shape[0]), safe]
    loss = xp.where(valid, lse.reshape(-1) - picked, 0)
    return loss.astype(x.dtype), valid.astype(x.dtype)


def _ce_infer(x, t, ignore_index):
    _ce_check("cross_entropy_rows", x, t)
    meta = (x._shape[:1], x._dtype)
    return [meta, meta]


def _ce_vjp(g, inputs, out, ignore_index):
    x, t = inputs
    return (_run(CROSS_ENTROPY_ROWS_BACKWARD, (g, x, t), ignore_index=ignore_index), None)


def _ce_bwd_numpy(g, x, t, *, ignore_index, xp=np):
    valid, safe, lse, xc = _ce_rows(x, t, ignore_index, xp)
    p = xp.exp(xc - lse)                                  # softmax of each row
    rows = xp.arange(xc.shape[0])
    p[rows, safe] -= 1.0
    p *= xp.where(valid, g.astype(xc.dtype, copy=False), 0).reshape(-1, 1)
    return p.astype(x.dtype, copy=False)


def _ce_bwd_infer(g, x, t, ignore_index):
    op = "cross_entropy_rows_backward"
    _ce_check(op, x, t)
    if g._shape != x._shape[:1]:
        raise ShapeError(f"{op}: gradient {g._shape} must have one value per row of logits "
                         f"{x._shape}")
    same_dtype(op, g._dtype, x._dtype)
    return (x._shape, x._dtype)


def _ce_bwd_vjp(gg, inputs, out, ignore_index, needs):
    """The backward is ``g * valid * (softmax(x) - onehot(t))`` per row: linear in ``g``,
    and in ``x`` the softmax's Jacobian ``s * (gg - sum(s * gg))`` scaled by ``g``."""
    g, x, t = inputs
    validf = (t != ignore_index).cast(x._dtype)
    s = api.softmax(x, 1)
    onehot = api.one_hot(api.where(t != ignore_index, t, 0), x._shape[1]).cast(x._dtype)
    dg = ((s - onehot) * gg).sum(1) * validf if needs[0] else None
    if needs[1]:
        sg = s * gg
        dx = (sg - s * sg.sum(1, keepdim=True)) * (g * validf).reshape(-1, 1)
    else:
        dx = None
    return (dg, dx, None)


CROSS_ENTROPY_ROWS = declare(
    "cross_entropy_rows", "other", nin=2, attrs=("ignore_index",), infer=_ce_infer,
    numpy=_ce_numpy, vjp=_ce_vjp, nout=2,
    doc="per row of logits [M, C] with int target [M]: -log_softmax(row)[target] (0 where "
        "target == ignore_index), and the valid mask as a float (for the mean)")
CROSS_ENTROPY_ROWS_BACKWARD = declare(
    "cross_entropy_rows_backward", "other", nin=3, attrs=("ignore_index",),
    infer=_ce_bwd_infer, numpy=_ce_bwd_numpy, vjp=_ce_bwd_vjp, vjp_needs=True,
    doc="the logits' gradient of cross_entropy_rows: g * (softmax(row) - onehot(target)), "
        "0 on ignored rows")


# -- softmax and log_softmax along a dim ----------------------------------------------------
# One primitive each way for what the Tensor API's composite spelled as about seven ops
# forward and a dozen backward (max, subtract, exp, sum, divide or log, casts): on small
# tensors each of those costs more in dispatch than in arithmetic. The backward primitives
# take the forward's *output* (``softmax_backward(g, out)``, ``log_softmax_backward(g, out)``)
# and have derivatives of their own, so gradients of gradients are ember ops too. Every op
# declares ``decompose``, its formula with Tensor ops, which Fusion runs for large tensors so
# the max / sum and the elementwise ops around them fuse into reduce-then-broadcast kernels.
#
# f16/bf16 are computed in f32 and rounded once (f64 in f64), as the composite did. The max
# subtracted first is that of the row as NumPy gives it: a row of -inf, a row holding +inf or
# a NaN gives NaN throughout (``inf - inf``), as in the composite; a -inf among finite values
# gives 0 (softmax) or -inf (log_softmax) there.
_quiet_sm = np.errstate(divide="ignore", invalid="ignore", over="ignore")
_HALF_DT = (dt.float16, dt.bfloat16)


def _float_tensor(op, x):
    """(shape, dtype) of ``x``, a float Tensor (else the DTypeError naming ``op``)."""
    try:
        shape, d = x._shape, x._dtype
    except AttributeError:
        raise DTypeError(f"{op}: expects a Tensor, got {type(x).__name__}") from None
    if d.kind != "float":
        require_kind(op, d, "float")
    return shape, d


def _sm_infer_for(op):
    def infer(x, dim):
        shape, d = _float_tensor(op, x)
        _sm_check_dim(op, shape, dim)
        return (shape, d)
    return infer


def _sm_check_dim(op, shape, dim):
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise DTypeError(f"{op}: dim must be an int, got {type(dim).__name__} {dim!r}")
    if not shape:
        raise ShapeError(f"{op}: needs at least 1 dim, got a 0-d tensor (the Tensor API views "
                         f"a 0-d input as 1-d)")
    if not 0 <= dim < len(shape):
        raise IndexError_(f"{op}: dim {dim} is out of range for shape {shape}; valid: 0.."
                          f"{len(shape) - 1} (the Tensor API canonicalizes negative dims)")


def _sm_bwd_infer_for(op):
    def infer(g, out, dim):
        for v, what in ((g, "gradient"), (out, "output")):
            if not hasattr(v, "_shape"):
                raise DTypeError(f"{op}: expects a Tensor as the {what}, got "
                                 f"{type(v).__name__}")
            if v._dtype.kind != "float":
                require_kind(op, v._dtype, "float", f"the {what}")
        if g._shape != out._shape:
            raise ShapeError(f"{op}: the gradient {g._shape} and the forward's output "
                             f"{out._shape} must have one shape")
        same_dtype(op, g._dtype, out._dtype)
        _sm_check_dim(op, out._shape, dim)
        return (out._shape, out._dtype)
    return infer


def _rmax(a, dim, xp):
    """The max along ``dim``, kept (NaN propagates); NumPy's ufunc ``reduce`` skips the
    method's Python-level dispatch."""
    if xp is np:
        return np.maximum.reduce(a, axis=dim, keepdims=True)
    return a.max(axis=dim, keepdims=True)


def _rsum(a, dim, xp):
    if xp is np:
        return np.add.reduce(a, axis=dim, keepdims=True)
    return a.sum(axis=dim, keepdims=True)


def _sm_up(x):
    """``x`` as it is computed: f16/bf16 as f32 (a Tensor; the decompositions)."""
    return x.cast(dt.float32) if x._dtype in _HALF_DT else x


def _sm_down(x, dtype):
    return x if x._dtype is dtype else x.cast(dtype)


@_quiet_sm
def _softmax_numpy(x, *, dim, xp=np):
    src = x.dtype
    if x.size == 0:
        return x.astype(src, copy=True)
    xc = x.astype(_ct(x), copy=False)
    e = xp.subtract(xc, _rmax(xc, dim, xp))
    xp.exp(e, out=e)
    xp.divide(e, _rsum(e, dim, xp), out=e)
    return e.astype(src, copy=False)


@_quiet_sm
def _log_softmax_numpy(x, *, dim, xp=np):
    src = x.dtype
    if x.size == 0:
        return x.astype(src, copy=True)
    xc = x.astype(_ct(x), copy=False)
    s = xp.subtract(xc, _rmax(xc, dim, xp))
    lse = _rsum(xp.exp(s), dim, xp)
    xp.log(lse, out=lse)
    xp.subtract(s, lse, out=s)
    return s.astype(src, copy=False)


@_quiet_sm
def _softmax_bwd_numpy(g, out, *, dim, xp=np):
    src = out.dtype
    ct = _ct(out)
    gc = g.astype(ct, copy=False)
    oc = out.astype(ct, copy=False)
    r = xp.multiply(gc, oc)
    xp.subtract(gc, _rsum(r, dim, xp), out=r)
    xp.multiply(r, oc, out=r)
    return r.astype(src, copy=False)


@_quiet_sm
def _log_softmax_bwd_numpy(g, out, *, dim, xp=np):
    src = out.dtype
    ct = _ct(out)
    gc = g.astype(ct, copy=False)
    r = xp.exp(out.astype(ct, copy=False))
    xp.multiply(r, _rsum(gc, dim, xp), out=r)
    xp.subtract(gc, r, out=r)
    return r.astype(src, copy=False)


def _softmax_decompose(x, *, dim):
    """What ``Tensor.softmax`` computed before the primitive: ``exp(x - max) / sum``."""
    src = x._dtype
    if x.numel() == 0:
        return x * 1.0
    x = _sm_up(x)
    e = (x - x.max(dim, keepdim=True)).exp()
    return _sm_down(e / e.sum(dim, keepdim=True), src)


def _log_softmax_decompose(x, *, dim):
    """What ``Tensor.log_softmax`` computed before the primitive:
    ``(x - max) - log(sum(exp(x - max)))``."""
    src = x._dtype
    if x.numel() == 0:
        return x * 1.0
    x = _sm_up(x)
    s = x - x.max(dim, keepdim=True)
    return _sm_down(s - s.exp().sum(dim, keepdim=True).log(), src)


def _softmax_bwd_decompose(g, out, *, dim):
    src = out._dtype
    if out.numel() == 0:
        return g * 1.0
    g, o = _sm_up(g), _sm_up(out)
    return _sm_down(o * (g - (g * o).sum(dim, keepdim=True)), src)


def _log_softmax_bwd_decompose(g, out, *, dim):
    src = out._dtype
    if out.numel() == 0:
        return g * 1.0
    g, o = _sm_up(g), _sm_up(out)
    return _sm_down(g - o.exp() * g.sum(dim, keepdim=True), src)


def _softmax_vjp(g, inputs, out, dim):
    return (_run(SOFTMAX_BACKWARD, (g, out), dim=dim),)


def _log_softmax_vjp(g, inputs, out, dim):
    return (_run(LOG_SOFTMAX_BACKWARD, (g, out), dim=dim),)


def _softmax_bwd_vjp(gg, inputs, out, dim, needs):
    """``y = o * (g - sum(g * o))``: linear in ``g`` with the same (symmetric) Jacobian, so
    ``dg = softmax_backward(gg, o)``; and ``do = gg * (g - sum(g * o)) - g * sum(gg * o)``."""
    g, o = inputs
    src = o._dtype
    dg = _run(SOFTMAX_BACKWARD, (gg, o), dim=dim) if needs[0] else None
    if needs[1]:
        g32, o32, gg32 = _sm_up(g), _sm_up(o), _sm_up(gg)
        do = _sm_down(gg32 * (g32 - (g32 * o32).sum(dim, keepdim=True))
                      - g32 * (gg32 * o32).sum(dim, keepdim=True), src)
    else:
        do = None
    return (dg, do)


def _log_softmax_bwd_vjp(gg, inputs, out, dim, needs):
    """``y = g - exp(o) * sum(g)``: ``dg = gg - sum(gg * exp(o))`` and
    ``do = -gg * exp(o) * sum(g)``."""
    g, o = inputs
    src = o._dtype
    e = _sm_up(o).exp()
    gg32 = _sm_up(gg)
    dg = _sm_down(gg32 - (gg32 * e).sum(dim, keepdim=True), src) if needs[0] else None
    do = _sm_down(-(gg32 * e) * _sm_up(g).sum(dim, keepdim=True), src) if needs[1] else None
    return (dg, do)


SOFTMAX = declare(
    "softmax", "norm", nin=1, attrs=("dim",), infer=_sm_infer_for("softmax"),
    numpy=_softmax_numpy, vjp=_softmax_vjp, decompose=_softmax_decompose,
    doc="exp(x - max) / sum(exp(x - max)) along dim (f16/bf16 computed in f32)")
LOG_SOFTMAX = declare(
    "log_softmax", "norm", nin=1, attrs=("dim",), infer=_sm_infer_for("log_softmax"),
    numpy=_log_softmax_numpy, vjp=_log_softmax_vjp, decompose=_log_softmax_decompose,
    doc="(x - max) - log(sum(exp(x - max))) along dim (f16/bf16 computed in f32)")
SOFTMAX_BACKWARD = declare(
    "softmax_backward", "norm", nin=2, attrs=("dim",),
    infer=_sm_bwd_infer_for("softmax_backward"), numpy=_softmax_bwd_numpy,
    vjp=_softmax_bwd_vjp, vjp_needs=True, decompose=_softmax_bwd_decompose,
    doc="the input's gradient of softmax from its output: out * (g - sum(g * out, dim))")
LOG_SOFTMAX_BACKWARD = declare(
    "log_softmax_backward", "norm", nin=2, attrs=("dim",),
    infer=_sm_bwd_infer_for("log_softmax_backward"), numpy=_log_softmax_bwd_numpy,
    vjp=_log_softmax_bwd_vjp, vjp_needs=True, decompose=_log_softmax_bwd_decompose,
    doc="the input's gradient of log_softmax from its output: g - exp(out) * sum(g, dim)")


# -- layer norm over the trailing dims ------------------------------------------------------
# ``layer_norm(x, [weight], [bias], ndim, eps, has_weight, has_bias)``: x normalized over its
# last ``ndim`` dims (zero mean, unit biased variance), then scaled and shifted; weight and
# bias (each optional, of the normalized shape, any dtype: cast to the compute dtype) are
# the tensor inputs after x, as the flags say. The steps are those of the composite the
# Tensor API used before (``decompose``): mean = sum * (1/n), xc = x - mean, var =
# sum(xc * xc) * (1/n), y = xc * (1 / sqrt(var + eps)), then * weight, + bias; f16/bf16
# computed in f32 and rounded once, f64 in f64. Fusion decomposes it into its
# reduce-then-broadcast kernels, unless the backend below runs it as one kernel of its own
# (``Backend.fused_ops``: the Cuda backend, `ember/backend/cuda/norm.py`).
_quiet_ln = np.errstate(divide="ignore", invalid="ignore", over="ignore")


def _ln_parts(wb, has_weight, has_bias):
    """(weight or None, bias or None) from the inputs after x."""
    return (wb[0] if has_weight else None), (wb[-1] if has_bias else None)


def _ln_check_attrs(op, shape, ndim, eps):
    if not isinstance(ndim, int) or isinstance(ndim, bool) or not 1 <= ndim <= len(shape):
        raise ShapeError(f"{op}: ndim {ndim!r} must be the number of trailing dims of input "
                         f"{shape} normalized (1..{len(shape)})")
    if not isinstance(eps, float):
        raise DTypeError(f"{op}: eps must be a float, got {type(eps).__name__} {eps!r}")


def _ln_check_param(op, t, what, ns):
    """A weight or bias input: a Tensor of the normalized shape ``ns``."""
    if not hasattr(t, "_shape"):
        raise DTypeError(f"{op}: expects a Tensor as {what}, got {type(t).__name__}")
    if t._shape != ns:
        raise ShapeError(f"{op}: {what} {t._shape} must have the normalized shape {ns}")


def _ln_infer(x, *wb, ndim, eps, has_weight, has_bias):
    op = "layer_norm"
    shape, d = _float_tensor(op, x)
    _ln_check_attrs(op, shape, ndim, eps)
    want = int(bool(has_weight)) + int(bool(has_bias))
    if len(wb) != want:
        raise ShapeError(f"{op}: has_weight={has_weight}, has_bias={has_bias} ask for {want} "
                         f"tensor input{'s' if want != 1 else ''} after x, got {len(wb)}")
    ns = shape[len(shape) - ndim:]
    names = ("weight",) * bool(has_weight) + ("bias",) * bool(has_bias)
    for t, what in zip(wb, names):
        _ln_check_param(op, t, what, ns)
    return (shape, d)


@_quiet_ln
def _layer_norm_numpy(x, *wb, ndim, eps, has_weight, has_bias, xp=np):
    src = x.dtype
    if x.size == 0:
        return x.astype(src, copy=True)
    ct = _ct(x)
    axes = tuple(range(x.ndim - ndim, x.ndim))
    d, r, _ = _ln_centered_numpy(x.astype(ct, copy=False), axes, eps, xp)
    y = xp.multiply(d, r, out=d)
    w, b = _ln_parts(wb, has_weight, has_bias)
    if w is not None:
        xp.multiply(y, w.astype(ct, copy=False), out=y)
    if b is not None:
        xp.add(y, b.astype(ct, copy=False), out=y)
    return y.astype(src, copy=False)


def _ln_centered_numpy(xf, axes, eps, xp):
    """(x - mean, 1 / sqrt(biased var + eps), 1 / n) over ``axes`` of the compute-dtype
    ``xf``: the forward's steps, which its backward repeats for the same bits."""
    ct = xf.dtype.type
    n = 1
    for a in axes:
        n *= xf.shape[a]
    inv = ct(1.0 / n)
    d = xp.subtract(xf, xp.multiply(_rsum_axes(xf, axes, xp), inv))
    var = xp.multiply(_rsum_axes(xp.multiply(d, d), axes, xp), inv)
    xp.add(var, ct(eps), out=var)
    return d, xp.divide(ct(1.0), xp.sqrt(var)), inv


def _rsum_axes(a, axes, xp):
    if xp is np:
        return np.add.reduce(a, axis=axes, keepdims=True)
    return a.sum(axis=axes, keepdims=True)


def _ln_centered(xf, ndim, eps):
    """(x - mean, 1 / sqrt(biased var + eps), the normalized dims) of the compute-dtype
    ``xf``, in the composite's steps (the decomposition's and the derivative's)."""
    n = len(xf._shape)
    dims = tuple(range(n - ndim, n))
    xc = xf - xf.mean(dims, keepdim=True)
    return xc, ((xc * xc).mean(dims, keepdim=True) + eps).rsqrt(), dims


def _layer_norm_decompose(x, *wb, ndim, eps, has_weight, has_bias):
    """What ``em.layer_norm`` computed before the primitive (and what Fusion fuses)."""
    src = x._dtype
    xc, rstd, _ = _ln_centered(_sm_up(x), ndim, eps)
    y = xc * rstd
    w, b = _ln_parts(wb, has_weight, has_bias)
    if w is not None:
        y = y * w.cast(y._dtype)
    if b is not None:
        y = y + b.cast(y._dtype)
    return y.cast(src)


def _layer_norm_vjp(g, inputs, out, ndim, eps, has_weight, has_bias, needs):
    """One ``layer_norm_backward`` op (below) for the gradients asked for: dbias alone is
    ``sum(g)`` over the leading dims; otherwise the primitive gives dx (and dweight, dbias
    where the flags ask: dweight whenever there is a weight, since dx reads it)."""
    x = inputs[0]
    w, b = _ln_parts(inputs[1:], has_weight, has_bias)
    need_w = w is not None and needs[1]
    need_b = b is not None and needs[-1]
    tail = ((None,) if w is not None else ()) + ((None,) if b is not None else ())
    if not (needs[0] or need_w):
        if not need_b:
            return (None,) + tail
        lead = tuple(range(len(x._shape) - ndim))
        gf = _sm_up(g)
        db = _sm_down(gf.sum(lead) if lead else gf, b._dtype)
        return (None,) + ((None,) if w is not None else ()) + (db,)
    if g._dtype is not x._dtype:
        g = g.cast(x._dtype)
    res = _run(LAYER_NORM_BACKWARD, (g, x) if w is None else (g, x, w), ndim=ndim, eps=eps,
               has_weight=w is not None, has_bias=need_b)
    grads = (res[0] if needs[0] else None,)
    if w is not None:
        grads += (res[1] if need_w else None,)
    if b is not None:
        grads += (_sm_down(res[-1], b._dtype) if need_b else None,)
    return grads


LAYER_NORM = declare(
    "layer_norm", "norm", nin=3, attrs=("ndim", "eps", "has_weight", "has_bias"),
    infer=_ln_infer, numpy=_layer_norm_numpy, vjp=_layer_norm_vjp, vjp_needs=True,
    decompose=_layer_norm_decompose,
    doc="(x - mean) / sqrt(biased var + eps) over the last ndim dims, then * weight + bias "
        "(each optional: tensor inputs after x as has_weight / has_bias say; f16/bf16 "
        "computed in f32)")


# ``layer_norm_backward(g, x, [weight], ndim, eps, has_weight, has_bias)``: layer_norm's
# gradients as one op (its derivative was ~20 Tensor ops, each a Python call through the
# backend stack). With ``xhat = (x - mean) * rstd`` recomputed from x (the forward's steps)
# and ``gw = g * weight`` (``g`` without a weight), per row over the normalized dims:
# ``dx = rstd * ((gw - mean(gw)) - xhat * mean(gw * xhat))``; over the leading dims
# ``dweight = sum(g * xhat)`` (present when has_weight) and ``dbias = sum(g)`` (when
# has_bias). The bias itself is no input: dbias is given in the compute dtype (f32 for
# f16/bf16) and rounded to the bias's dtype by the caller; dx has x's dtype, dweight the
# weight's. f16/bf16 computed in f32, f64 in f64. ``decompose`` is the composite the
# derivative was, so Fusion fuses it as before where the backend has no kernel of its own
# (``Backend.fused_ops``: the Cuda backend, `ember/backend/cuda/norm_backward.py`).
def _lnb_infer(g, x, *w, ndim, eps, has_weight, has_bias):
    op = "layer_norm_backward"
    for v, what in ((g, "the gradient"), (x, "the input x")):
        if not hasattr(v, "_shape"):
            raise DTypeError(f"{op}: expects a Tensor as {what}, got {type(v).__name__}")
        if v._dtype.kind != "float":
            require_kind(op, v._dtype, "float", what)
    shape, d = x._shape, x._dtype
    if g._shape != shape:
        raise ShapeError(f"{op}: the gradient {g._shape} and the input x {shape} must have "
                         f"one shape")
    same_dtype(op, g._dtype, d)
    _ln_check_attrs(op, shape, ndim, eps)
    if len(w) != int(bool(has_weight)):
        raise ShapeError(f"{op}: has_weight={has_weight} asks for {int(bool(has_weight))} "
                         f"tensor input{'' if has_weight else 's'} after g and x (the weight; "
                         f"the bias is no input), got {len(w)}")
    ns = shape[len(shape) - ndim:]
    metas = [(shape, d)]
    if has_weight:
        wt = w[0]
        _ln_check_param(op, wt, "weight", ns)
        if wt._dtype.kind != "float":
            require_kind(op, wt._dtype, "float", "weight")
        metas.append((ns, wt._dtype))
    if has_bias:
        metas.append((ns, d if d is dt.float64 or d is dt.float32 else dt.float32))
    return metas


def _rsum_lead(a, lead, xp):
    """``a`` summed over the leading dims ``lead`` (a copy of ``a`` when there are none)."""
    if not lead:
        return a.copy()
    if xp is np:
        return np.add.reduce(a, axis=lead)
    return a.sum(axis=lead)


@_quiet_ln
def _layer_norm_backward_numpy(g, x, *w, ndim, eps, has_weight, has_bias, xp=np):
    ct = _ct(x)
    k = x.ndim - ndim
    ns, lead = x.shape[k:], tuple(range(k))
    wt = w[0] if has_weight else None
    if x.size == 0:
        out = (x.astype(x.dtype, copy=True),)
        if has_weight:
            out += (xp.zeros(ns, wt.dtype),)
        if has_bias:
            out += (xp.zeros(ns, ct),)
        return out
    axes = tuple(range(k, x.ndim))
    gf = g.astype(ct, copy=False)
    # the steps of the decomposition (so NdArray gives its bits)
    xc, rstd, inv = _ln_centered_numpy(x.astype(ct, copy=False), axes, eps, xp)
    xhat = xp.multiply(xc, rstd, out=xc)
    gw = xp.multiply(gf, wt.astype(ct, copy=False)) if has_weight else gf
    m1 = xp.multiply(_rsum_axes(gw, axes, xp), inv)
    m2 = xp.multiply(_rsum_axes(xp.multiply(gw, xhat), axes, xp), inv)
    dx = xp.subtract(gw, m1)
    xp.subtract(dx, xp.multiply(xhat, m2), out=dx)
    xp.multiply(rstd, dx, out=dx)
    out = (dx.astype(x.dtype, copy=False),)
    if has_weight:
        out += (_rsum_lead(xp.multiply(gf, xhat), lead, xp).astype(wt.dtype, copy=False),)
    if has_bias:
        out += (_rsum_lead(gf, lead, xp),)
    return out


def _layer_norm_backward_decompose(g, x, *w, ndim, eps, has_weight, has_bias):
    """The composite ``layer_norm``'s derivative was (what Fusion fuses)."""
    wt = w[0] if has_weight else None
    gf = _sm_up(g)
    xc, rstd, dims = _ln_centered(_sm_up(x), ndim, eps)
    lead = tuple(range(len(x._shape) - ndim))
    xhat = xc * rstd
    gw = gf * wt.cast(gf._dtype) if wt is not None else gf
    dx = _sm_down(rstd * (gw - gw.mean(dims, keepdim=True)
                          - xhat * (gw * xhat).mean(dims, keepdim=True)), x._dtype)
    out = (dx,)
    if wt is not None:
        t = gf * xhat
        out += (_sm_down(t.sum(lead) if lead else t, wt._dtype),)
    if has_bias:
        out += (gf.sum(lead) if lead else gf * 1.0,)    # (a new tensor, not the input)
    return out


def _layer_norm_backward_vjp(gg, inputs, out, ndim, eps, has_weight, has_bias, needs):
    """The derivative of dx (the first output: only that one is differentiated, as for
    every op of several outputs). dx is linear in ``gw`` through the symmetric
    ``rstd * (I - 1/n - xhat xhat^T / n)``, so ``d(gw) = layer_norm_backward(gg, x)`` (no
    weight), ``dg = d(gw) * weight``, ``dweight = sum(d(gw) * g)``. Through x: with
    ``p = mean(gg * xhat)``, ``q = mean(gw * xhat)``, ``u = -rstd * (gg * q + gw * p)``
    (the gradient reaching xhat) and ``s = mean(gg * (gw - mean(gw)))`` (reaching rstd),
    ``dx = layer_norm_backward(u, x) - rstd^2 * xhat * (s - p * q)``."""
    g, x = inputs[0], inputs[1]
    w = inputs[2] if has_weight else None
    gg32, g32, x32 = _sm_up(gg), _sm_up(g), _sm_up(x)
    ct = x32._dtype
    plain = dict(ndim=ndim, eps=eps, has_weight=False, has_bias=False)
    lead = tuple(range(len(x._shape) - ndim))
    wc = w.cast(ct) if w is not None else None
    dg = dxx = dw = None
    if needs[0] or (w is not None and needs[2]):
        d_gw = _run(LAYER_NORM_BACKWARD, (gg32, x32), **plain)[0]
        if needs[0]:
            dg = _sm_down(d_gw * wc if wc is not None else d_gw, g._dtype)
        if w is not None and needs[2]:
            t = d_gw * g32
            dw = _sm_down(t.sum(lead) if lead else t, w._dtype)
    if needs[1]:
        xc, rstd, dims = _ln_centered(x32, ndim, eps)
        xhat = xc * rstd
        gw = g32 * wc if wc is not None else g32
        p = (gg32 * xhat).mean(dims, keepdim=True)
        q = (gw * xhat).mean(dims, keepdim=True)
        u = -(rstd * (gg32 * q + gw * p))
        s = (gg32 * (gw - gw.mean(dims, keepdim=True))).mean(dims, keepdim=True)
        proj = _run(LAYER_NORM_BACKWARD, (u, x32), **plain)[0]
        dxx = _sm_down(proj - rstd * rstd * xhat * (s - p * q), x._dtype)
    return (dg, dxx) + ((dw,) if w is not None else ())


LAYER_NORM_BACKWARD = declare(
    "layer_norm_backward", "norm", nin=3, attrs=("ndim", "eps", "has_weight", "has_bias"),
    infer=_lnb_infer, numpy=_layer_norm_backward_numpy, vjp=_layer_norm_backward_vjp,
    vjp_needs=True, decompose=_layer_norm_backward_decompose, nout=3,
    doc="layer_norm's gradients from g (the output's) and x: dx = rstd * (gw - mean(gw) - "
        "xhat * mean(gw * xhat)) with gw = g * weight, then dweight = sum(g * xhat) and "
        "dbias = sum(g) over the leading dims, as has_weight / has_bias say (up to 3 "
        "outputs; dbias in the compute dtype; f16/bf16 computed in f32)")
