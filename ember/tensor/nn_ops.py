"""Module ops of the Tensor API (PyTorch's ``torch.nn.functional`` signatures and layouts):
convolutions, pooling, interpolation, embedding, and the normalizations layer_norm (a
registry primitive that decomposes into the composite), group_norm and batch_norm
(composites of primitives).

Arguments are normalized here (ints to per-dim tuples, defaults filled in) so the registry
ops get canonical attributes. Conv and pool functions also take unbatched inputs
``[C, *spatial]``.
"""
from __future__ import annotations

import builtins
import math

from .. import dtype as dt
from ..errors import DTypeError, ShapeError
from ..ops import nn as N
from ..ops import view as V
from .dispatch import apply, unary

__all__ = [
    "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d",
    "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "interpolate", "embedding",
    "layer_norm", "group_norm", "batch_norm",
]

_CONV = {1: N.CONV1D, 2: N.CONV2D}
_CONV_T = {1: N.CONV_TRANSPOSE1D, 2: N.CONV_TRANSPOSE2D}
_MAX = {1: N.MAX_POOL1D, 2: N.MAX_POOL2D}
_MAX_IDX = {1: N.MAX_POOL1D_WITH_INDICES, 2: N.MAX_POOL2D_WITH_INDICES}
_AVG = {1: N.AVG_POOL1D, 2: N.AVG_POOL2D}
_ADAPTIVE = {1: N.ADAPTIVE_AVG_POOL1D, 2: N.ADAPTIVE_AVG_POOL2D}


# -- argument normalization -----------------------------------------------------------------
def _tensor(op, x, what="input"):
    if not hasattr(x, "_shape"):
        raise DTypeError(f"{op}: expects a Tensor as {what}, got {type(x).__name__}")
    return x


def _ints(op, name, v, nd, minimum):
    """An int or a sequence of ``nd`` ints, each >= ``minimum``, as a tuple."""
    if isinstance(v, int) and not isinstance(v, bool):
        t = (v,) * nd
    else:
        try:
            t = tuple(v)
        except TypeError:
            raise DTypeError(f"{op}: {name} must be an int or a sequence of {nd} ints, got "
                             f"{v!r}") from None
        if len(t) == 1 and nd > 1:
            t = t * nd
        if not builtins.all(isinstance(i, int) and not isinstance(i, bool) for i in t):
            raise DTypeError(f"{op}: {name} must be an int or a sequence of {nd} ints, got "
                             f"{v!r}")
        if len(t) != nd:
            raise ShapeError(f"{op}: {name} {t} must give {nd} sizes, one per spatial dim")
    if builtins.any(i < minimum for i in t):
        raise ShapeError(f"{op}: {name} {t} must be >= {minimum} in every dim")
    return t


# Normalized attrs of conv and pool calls, by the identity of the arguments as given: a layer
# passes the same tuple objects on every call (and literals such as ``stride=1`` are shared
# objects too), so a call after the first skips normalizing them. An entry keeps its
# arguments alive, so an id in a key cannot be reused by another object while the entry
# lives; only immutable arguments (ints, bools, None and tuples, which normalized fine, so
# hold ints) are cached, and only normalizations that succeeded: a bad argument raises on
# every call. The attrs dicts are shared by the calls that hit (ops never mutate attrs).
_ATTRS: dict = {}
_ATTRS_MAX = 1024
_IMMUTABLE = frozenset({int, bool, tuple, type(None)})


def _cached_attrs(key, args, build, *build_args):
    """The attrs ``build(*build_args)`` normalizes from ``args``, cached under ``key`` (the
    ids of ``args``) as described above."""
    hit = _ATTRS.get(key)
    if hit is not None:
        return hit[1]
    attrs = build(*build_args)
    if len(_ATTRS) >= _ATTRS_MAX:
        _ATTRS.clear()          # a workload that builds its arguments anew on every call
    for a in args:
        if type(a) not in _IMMUTABLE:
            return attrs
    _ATTRS[key] = (args, attrs)
    return attrs


def _batched(op, x, nd):
    """``x`` with a batch dim (unbatched ``[C, *S]`` inputs get one), and whether it was
    added."""
    _tensor(op, x)
    if len(x._shape) == nd + 1:
        return x.reshape((1,) + x._shape), True
    return x, False


def _unbatch(out, added):
    if not added:
        return out
    if isinstance(out, tuple):
        return tuple(o.reshape(o._shape[1:]) for o in out)
    return out.reshape(out._shape[1:])


def _add_bias(op, out, bias, nd):
    if bias is None:
        return out
    _tensor(op, bias, "bias")
    c = out._shape[1]
    if bias._shape != (c,):
        raise ShapeError(f"{op}: bias {bias._shape} must have shape ({c},), one value per "
                         f"output channel")
    if bias._dtype is not out._dtype:
        raise DTypeError(f"{op}: bias is {bias._dtype.short} but input and weight are "
                         f"{out._dtype.short}; cast it first")
    # (the reshape primitive at once: the shape is known to be valid)
    return out + unary(V.RESHAPE, bias, {"shape": (1, c) + _ONES[nd]})


_ONES = {1: (1,), 2: (1, 1)}


# -- convolutions ---------------------------------------------------------------------------
def _conv_padding(op, padding, weight, dilation, stride, nd):
    if isinstance(padding, str):
        if padding == "valid":
            return (0,) * nd
        if padding == "same":
            if builtins.any(s != 1 for s in stride):
                raise ShapeError(f"{op}: padding='same' needs stride 1, got {stride}")
            pads = []
            for k, d in zip(weight._shape[2:], dilation):
                total = d * (k - 1)
                if total % 2:
                    raise ShapeError(f"{op}: padding='same' with kernel {weight._shape[2:]} "
                                     f"and dilation {dilation} needs uneven padding, which "
                                     f"is not supported; pad explicitly")
                pads.append(total // 2)
            return tuple(pads)
        raise ShapeError(f"{op}: padding must be an int, a tuple, 'valid' or 'same', got "
                         f"{padding!r}")
    return _ints(op, "padding", padding, nd, 0)


def _conv_attrs(op, nd, weight, stride, padding, dilation, groups):
    stride = _ints(op, "stride", stride, nd, 1)
    dilation = _ints(op, "dilation", dilation, nd, 1)
    padding = _conv_padding(op, padding, weight, dilation, stride, nd)
    return {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}


def _conv(nd, x, weight, bias, stride, padding, dilation, groups):
    op = _CONV_NAME[nd]
    x, added = _batched(op, x, nd)
    _tensor(op, weight, "weight")
    # (a string padding is never cached: 'same' depends on the weight)
    attrs = _cached_attrs(("conv", nd, id(stride), id(padding), id(dilation), id(groups)),
                          (nd, stride, padding, dilation, groups), _conv_attrs, op, nd,
                          weight, stride, padding, dilation, groups)
    out = apply(_CONV[nd], (x, weight), attrs)
    return _unbatch(_add_bias(op, out, bias, nd), added)


_CONV_NAME = {1: "conv1d", 2: "conv2d"}


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """1-d cross-correlation: ``x`` [N, C, L] (or [C, L]), ``weight`` [O, C/groups, K],
    ``bias`` [O]; padding an int, 'valid' or 'same'."""
    return _conv(1, x, weight, bias, stride, padding, dilation, groups)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """2-d cross-correlation: ``x`` [N, C, H, W] (or [C, H, W]), ``weight``
    [O, C/groups, kH, kW], ``bias`` [O]; stride/padding/dilation an int or a pair."""
    return _conv(2, x, weight, bias, stride, padding, dilation, groups)


def _conv_transpose_attrs(op, nd, stride, padding, output_padding, dilation, groups):
    return {"stride": _ints(op, "stride", stride, nd, 1),
            "padding": _ints(op, "padding", padding, nd, 0),
            "output_padding": _ints(op, "output_padding", output_padding, nd, 0),
            "dilation": _ints(op, "dilation", dilation, nd, 1),
            "groups": groups}


def _conv_transpose(nd, x, weight, bias, stride, padding, output_padding, groups, dilation):
    op = f"conv_transpose{nd}d"
    x, added = _batched(op, x, nd)
    _tensor(op, weight, "weight")
    attrs = _cached_attrs(
        ("conv_t", nd, id(stride), id(padding), id(output_padding), id(dilation), id(groups)),
        (nd, stride, padding, output_padding, dilation, groups), _conv_transpose_attrs, op, nd,
        stride, padding, output_padding, dilation, groups)
    out = apply(_CONV_T[nd], (x, weight), attrs)
    return _unbatch(_add_bias(op, out, bias, nd), added)


def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1):
    """1-d transposed conv: ``x`` [N, C, L], ``weight`` [C, O/groups, K], ``bias`` [O].
    ``output_padding`` must be smaller than the stride."""
    return _conv_transpose(1, x, weight, bias, stride, padding, output_padding, groups,
                           dilation)


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1):
    """2-d transposed conv: ``x`` [N, C, H, W], ``weight`` [C, O/groups, kH, kW], ``bias``
    [O]. ``output_padding`` must be smaller than the stride."""
    return _conv_transpose(2, x, weight, bias, stride, padding, output_padding, groups,
                           dilation)


# -- pooling --------------------------------------------------------------------------------
def _max_pool_attrs(op, nd, kernel_size, stride, padding, dilation, ceil_mode):
    kernel = _ints(op, "kernel_size", kernel_size, nd, 1)
    return {"kernel": kernel,
            "stride": kernel if stride is None else _ints(op, "stride", stride, nd, 1),
            "padding": _ints(op, "padding", padding, nd, 0),
            "dilation": _ints(op, "dilation", dilation, nd, 1),
            "ceil_mode": bool(ceil_mode)}


def _max_pool(nd, x, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    op = _MAX_NAME[nd]
    x, added = _batched(op, x, nd)
    attrs = _cached_attrs(
        ("max", nd, id(kernel_size), id(stride), id(padding), id(dilation), id(ceil_mode)),
        (nd, kernel_size, stride, padding, dilation, ceil_mode), _max_pool_attrs, op, nd,
        kernel_size, stride, padding, dilation, ceil_mode)
    if return_indices:
        return _unbatch(apply(_MAX_IDX[nd], (x,), attrs), added)
    if x.is_require_grad():
        # the backward needs the argmax: computed now, instead of a second pooling later
        return _unbatch(apply(_MAX_IDX[nd], (x,), attrs)[0], added)
    return _unbatch(apply(_MAX[nd], (x,), attrs), added)


_MAX_NAME = {1: "max_pool1d", 2: "max_pool2d"}


def max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """1-d max pooling of [N, C, L]; with ``return_indices`` also the argmax positions (i64,
    flat in each input plane, as in PyTorch)."""
    return _max_pool(1, x, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """2-d max pooling of [N, C, H, W]; with ``return_indices`` also the argmax positions
    (i64, ``h * W + w`` in each input plane, as in PyTorch)."""
    return _max_pool(2, x, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _avg_pool_attrs(op, nd, kernel_size, stride, padding, ceil_mode, count_include_pad):
    kernel = _ints(op, "kernel_size", kernel_size, nd, 1)
    return {"kernel": kernel,
            "stride": kernel if stride is None else _ints(op, "stride", stride, nd, 1),
            "padding": _ints(op, "padding", padding, nd, 0),
            "ceil_mode": bool(ceil_mode), "count_include_pad": bool(count_include_pad)}


def _avg_pool(nd, x, kernel_size, stride, padding, ceil_mode, count_include_pad):
    op = f"avg_pool{nd}d"
    x, added = _batched(op, x, nd)
    attrs = _cached_attrs(
        ("avg", nd, id(kernel_size), id(stride), id(padding), id(ceil_mode),
         id(count_include_pad)),
        (nd, kernel_size, stride, padding, ceil_mode, count_include_pad), _avg_pool_attrs, op,
        nd, kernel_size, stride, padding, ceil_mode, count_include_pad)
    return _unbatch(apply(_AVG[nd], (x,), attrs), added)


def avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True):
    """1-d average pooling of [N, C, L] (zero padding counted unless
    ``count_include_pad=False``)."""
    return _avg_pool(1, x, kernel_size, stride, padding, ceil_mode, count_include_pad)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True):
    """2-d average pooling of [N, C, H, W] (zero padding counted unless
    ``count_include_pad=False``)."""
    return _avg_pool(2, x, kernel_size, stride, padding, ceil_mode, count_include_pad)


def _adaptive(nd, x, output_size):
    op = f"adaptive_avg_pool{nd}d"
    x, added = _batched(op, x, nd)
    if isinstance(output_size, int) or output_size is None:
        output_size = (output_size,) * nd
    output_size = tuple(output_size)
    if len(output_size) == 1 and nd > 1:
        output_size = output_size * nd
    if len(output_size) != nd:
        raise ShapeError(f"{op}: output_size {output_size} must give {nd} sizes")
    # None keeps the input's size, as in PyTorch
    sizes = tuple(x._shape[-nd + i] if s is None else s for i, s in enumerate(output_size))
    sizes = _ints(op, "output_size", sizes, nd, 0)
    return _unbatch(apply(_ADAPTIVE[nd], (x,), {"output_size": sizes}), added)


def adaptive_avg_pool1d(x, output_size):
    """Average pooling of [N, C, L] to ``output_size`` positions (PyTorch's windows)."""
    return _adaptive(1, x, output_size)


def adaptive_avg_pool2d(x, output_size):
    """Average pooling of [N, C, H, W] to ``output_size`` (an int, a pair; None keeps a
    dim)."""
    return _adaptive(2, x, output_size)


_MODES = {"nearest": ("nearest", None), "linear": ("linear", 1), "bilinear": ("linear", 2)}


def interpolate(x, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
    """Resize [N, C, L] or [N, C, H, W] to ``size`` or by ``scale_factor`` (output size
    floor(in * factor)). Modes: "nearest" (PyTorch's, not "nearest-exact"), "linear" (3-d)
    and "bilinear" (4-d), with ``align_corners`` (default False)."""
    op = "interpolate"
    _tensor(op, x)
    if mode not in _MODES:
        raise ValueError(f"{op}: mode must be one of {tuple(_MODES)}, got {mode!r}")
    kind, want_nd = _MODES[mode]
    nd = len(x._shape) - 2
    if nd not in (1, 2) or (want_nd is not None and nd != want_nd):
        need = {None: "a 3-d [N, C, L] or 4-d [N, C, H, W]", 1: "a 3-d [N, C, L]",
                2: "a 4-d [N, C, H, W]"}[want_nd]
        raise ShapeError(f"{op}: mode {mode!r} expects {need} input, got shape {x._shape}")
    if kind == "nearest":
        if align_corners is not None:
            raise ValueError(f"{op}: align_corners only applies to linear modes, not "
                             f"{mode!r}; leave it None")
        align_corners = False
    else:
        align_corners = bool(align_corners)
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: give exactly one of size and scale_factor")
    if size is not None:
        size = _ints(op, "size", size, nd, 1)
        scales = None
    else:
        if isinstance(scale_factor, (int, float)):
            scale_factor = (scale_factor,) * nd
        scales = tuple(float(s) for s in scale_factor)
        if len(scales) != nd or builtins.any(not s > 0 for s in scales):
            raise ShapeError(f"{op}: scale_factor {scale_factor} must give {nd} positive "
                             f"factors")
        size = tuple(int(math.floor(n * s)) for n, s in zip(x._shape[2:], scales))
        if builtins.any(s < 1 for s in size):
            raise ShapeError(f"{op}: scale_factor {scale_factor} shrinks input {x._shape} to "
                             f"size {size}; sizes must be >= 1")
    return apply(N.INTERPOLATE, (x,), {"size": size, "scales": scales, "mode": kind,
                                       "align_corners": align_corners})


def embedding(weight, indices):
    """Rows of ``weight`` [num_embeddings, dim] at int ``indices`` of any shape:
    ``[*indices.shape, dim]``. The gradient flows to ``weight``."""
    _tensor("embedding", weight, "weight")
    _tensor("embedding", indices, "indices")
    return apply(N.EMBEDDING, (weight, indices))


# -- normalization -------------------------------------------------------------------------
def _compute_float(x):
    """Half-precision inputs are normalized in f32 (then cast back), as PyTorch does."""
    return x.float() if x._dtype in (dt.float16, dt.bfloat16) else x


def _normalize(xf, dims, eps):
    mu = xf.mean(dims, keepdim=True)
    xc = xf - mu
    var = (xc * xc).mean(dims, keepdim=True)
    return xc * (var + eps).rsqrt(), mu, var


def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Normalize over the trailing dims ``normalized_shape`` (zero mean, unit biased
    variance), then scale by ``weight`` and shift by ``bias`` (both of that shape)."""
    op = "layer_norm"
    _tensor(op, x)
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    ns = tuple(normalized_shape)
    k = len(ns)
    if k == 0 or k > len(x._shape) or x._shape[len(x._shape) - k:] != ns:
        raise ShapeError(f"{op}: normalized_shape {ns} must match the trailing dims of input "
                         f"{x._shape}")
    # the registry primitive (ember/ops/nn.py: its rule checks weight and bias): its
    # decomposition is the composite this function computed before, which Fusion fuses
    # unless the backend runs it as one kernel
    wb = tuple(t for t in (weight, bias) if t is not None)
    return apply(N.LAYER_NORM, (x,) + wb, {"ndim": k, "eps": float(eps),
                                           "has_weight": weight is not None,
                                           "has_bias": bias is not None})


def _channel_param(op, t, what, c, nd_rest):
    if t is None:
        return None
    _tensor(op, t, what)
    if t._shape != (c,):
        raise ShapeError(f"{op}: {what} {t._shape} must have shape ({c},), one value per "
                         f"channel")
    return t.reshape((1, c) + (1,) * nd_rest)


def group_norm(x, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Normalize [N, C, *] over each group of C/num_groups channels (and all spatial
    positions), then scale and shift per channel by ``weight``/``bias`` [C]."""
    op = "group_norm"
    _tensor(op, x)
    if len(x._shape) < 2:
        raise ShapeError(f"{op}: expects an input [N, C, *], got shape {x._shape}")
    n, c = x._shape[:2]
    if not isinstance(num_groups, int) or num_groups < 1 or c % num_groups:
        raise ShapeError(f"{op}: num_groups {num_groups!r} must be a positive divisor of the "
                         f"{c} channels of input {x._shape}")
    rest = len(x._shape) - 2
    w = _channel_param(op, weight, "weight", c, rest)
    b = _channel_param(op, bias, "bias", c, rest)
    xf = _compute_float(x)
    y, _, _ = _normalize(xf.reshape(n, num_groups, -1), 2, eps)
    y = y.reshape(x._shape)
    if w is not None:
        y = y * w.cast(y._dtype)
    if b is not None:
        y = y + b.cast(y._dtype)
    return y.cast(x._dtype)


def batch_norm(x, running_mean=None, running_var=None, weight=None, bias=None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5):
    """Normalize [N, C, *] per channel; returns ``(out, new_running_mean,
    new_running_var)``.

    In training (or without running stats) the batch's mean and biased variance normalize,
    and the running stats move by ``momentum`` toward the batch mean and unbiased variance
    (detached; None stays None). In evaluation the running stats normalize and come back
    unchanged."""
    op = "batch_norm"
    _tensor(op, x)
    if len(x._shape) < 2:
        raise ShapeError(f"{op}: expects an input [N, C, *], got shape {x._shape}")
    c = x._shape[1]
    rest = len(x._shape) - 2
    w = _channel_param(op, weight, "weight", c, rest)
    b = _channel_param(op, bias, "bias", c, rest)
    rm = _channel_param(op, running_mean, "running_mean", c, rest)
    rv = _channel_param(op, running_var, "running_var", c, rest)
    if (rm is None) != (rv is None):
        raise ShapeError(f"{op}: give both running_mean and running_var, or neither")
    xf = _compute_float(x)
    new_mean, new_var = running_mean, running_var
    if training or rm is None:
        dims = (0,) + tuple(range(2, 2 + rest))
        count = x.numel() // c if c else 0
        if training and count <= 1:
            raise ShapeError(f"{op}: training needs more than one value per channel, got "
                             f"input {x._shape}")
        y, mu, var = _normalize(xf, dims, eps)
        if training and rm is not None:
            m = float(momentum)
            mu_d = mu.detach().reshape(c).cast(running_mean._dtype)
            var_d = (var.detach() * (count / (count - 1))).reshape(c).cast(running_var._dtype)
            new_mean = running_mean.detach() * (1 - m) + mu_d * m
            new_var = running_var.detach() * (1 - m) + var_d * m
    else:
        y = (xf - rm.cast(xf._dtype)) * (rv.cast(xf._dtype) + eps).rsqrt()
    if w is not None:
        y = y * w.cast(y._dtype)
    if b is not None:
        y = y + b.cast(y._dtype)
    return y.cast(x._dtype), new_mean, new_var


class NNMethods:
    __slots__ = ()
    conv1d = conv1d
    conv2d = conv2d
    conv_transpose1d = conv_transpose1d
    conv_transpose2d = conv_transpose2d
    max_pool1d = max_pool1d
    max_pool2d = max_pool2d
    avg_pool1d = avg_pool1d
    avg_pool2d = avg_pool2d
    adaptive_avg_pool1d = adaptive_avg_pool1d
    adaptive_avg_pool2d = adaptive_avg_pool2d
    interpolate = interpolate
    embedding = embedding
    layer_norm = layer_norm
    group_norm = group_norm
    batch_norm = batch_norm
