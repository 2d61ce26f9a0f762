"""Cases for the module ops (ember/ops/nn.py) and the normalizations built on them.

References are torch.nn.functional in float64 (the cases skip, saying why, where torch is
not installed) and naive NumPy loops over output positions (conv family, pool scatters,
embedding), which need nothing but NumPy.
"""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.ops.nn import pool_out_size
from ember.tensor.dispatch import apply
from tests.conformance.harness import Case, Input


_TORCH = []


def _torch():
    if not _TORCH:
        try:
            import torch
        except ImportError:
            pytest.skip("torch is not installed: the torch.nn.functional reference is "
                        "unavailable")
        torch.set_num_threads(1)  # tiny references: threads only add overhead
        _TORCH.append(torch)
    return _TORCH[0]


def _t(a):
    return _torch().from_numpy(np.ascontiguousarray(a))


def _F():
    return _torch().nn.functional


def P(name, *inputs, **attrs):
    """Run a registry op directly (backward primitives have no Tensor-API function)."""
    return apply(em.ops.get(name), inputs, attrs)


def _tup(v, nd):
    return (v,) * nd if isinstance(v, (int, float)) else tuple(v)


# -- naive NumPy references (loops over output positions; 1-d goes through 2-d) -------------
def _as2d(*vals):
    """1-d conv arguments as 2-d ones over a unit height: (value for the unit dim, arg)."""
    return [(unit,) + _tup(v, 1) for unit, v in vals]


def naive_conv(x, w, stride=1, padding=0, dilation=1, groups=1):
    nd = x.ndim - 2
    if nd == 1:
        s, p, d = _as2d((1, stride), (0, padding), (1, dilation))
        return naive_conv(x[:, :, None], w[:, :, None], s, p, d, groups)[:, :, 0]
    (sh, sw), (ph, pw), (dh, dw) = _tup(stride, 2), _tup(padding, 2), _tup(dilation, 2)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    f = o // groups
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    for b in range(n):
        for oc in range(o):
            g = oc // f
            for i in range(oh):
                for j in range(ow):
                    patch = xp[b, g * cg:(g + 1) * cg, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                               j * sw:j * sw + dw * (kw - 1) + 1:dw]
                    out[b, oc, i, j] = np.sum(patch * w[oc])
    return out


def naive_conv_transpose(x, w, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    nd = x.ndim - 2
    if nd == 1:
        s, p, op, d = _as2d((1, stride), (0, padding), (0, output_padding), (1, dilation))
        return naive_conv_transpose(x[:, :, None], w[:, :, None], s, p, op, d, groups)[:, :, 0]
    (sh, sw), (ph, pw) = _tup(stride, 2), _tup(padding, 2)
    (oph, opw), (dh, dw) = _tup(output_padding, 2), _tup(dilation, 2)
    n, c, h, wd = x.shape
    _, f, kh, kw = w.shape
    cg = c // groups
    fh = (h - 1) * sh + dh * (kh - 1) + 1 + oph
    fw = (wd - 1) * sw + dw * (kw - 1) + 1 + opw
    full = np.zeros((n, f * groups, fh, fw))
    for b in range(n):
        for ic in range(c):
            g = ic // cg
            for i in range(h):
                for j in range(wd):
                    full[b, g * f:(g + 1) * f, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                         j * sw:j * sw + dw * (kw - 1) + 1:dw] += x[b, ic, i, j] * w[ic]
    return full[:, :, ph:fh - ph, pw:fw - pw]


def naive_conv_weight_backward(x, gy, kernel, stride=1, padding=0, dilation=1, groups=1):
    nd = x.ndim - 2
    if nd == 1:
        k, s, p, d = _as2d((1, kernel), (1, stride), (0, padding), (1, dilation))
        return naive_conv_weight_backward(x[:, :, None], gy[:, :, None], k, s, p, d,
                                          groups)[:, :, 0]
    (kh, kw), (sh, sw) = _tup(kernel, 2), _tup(stride, 2)
    (ph, pw), (dh, dw) = _tup(padding, 2), _tup(dilation, 2)
    n, c = x.shape[:2]
    _, o, oh, ow = gy.shape
    cg, f = c // groups, o // groups
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    dw_ = np.zeros((o, cg, kh, kw))
    for b in range(n):
        for oc in range(o):
            g = oc // f
            for i in range(oh):
                for j in range(ow):
                    dw_[oc] += gy[b, oc, i, j] * xp[
                        b, g * cg:(g + 1) * cg, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                        j * sw:j * sw + dw * (kw - 1) + 1:dw]
    return dw_


def naive_scatter(g, idx, size):
    n, c = g.shape[:2]
    out = np.zeros((n, c, int(np.prod(size))))
    for b in range(n):
        for ch in range(c):
            np.add.at(out[b, ch], idx[b, ch].reshape(-1), g[b, ch].reshape(-1))
    return out.reshape((n, c) + tuple(size))


# -- torch references -----------------------------------------------------------------------
def t_conv(nd, x, w, b=None, **kw):
    F = _F()
    f = F.conv1d if nd == 1 else F.conv2d
    return f(_t(x), _t(w), None if b is None else _t(b), **kw).numpy()


def t_conv_t(nd, x, w, b=None, **kw):
    F = _F()
    f = F.conv_transpose1d if nd == 1 else F.conv_transpose2d
    return f(_t(x), _t(w), None if b is None else _t(b), **kw).numpy()


def t_vjp(fn, x, g):
    """The input gradient of torch ``fn`` at ``x`` for output gradient ``g``."""
    xt = _t(x).clone().requires_grad_(True)
    y = fn(xt)
    y.backward(_t(g))
    return xt.grad.numpy()


X_IN = Input()
W_IN = Input()
IDX = Input("index", high=10, dtype="i64", differentiable=False)

CASES = []


def add(*a, **k):
    CASES.append(Case(*a, **k))


# -- convolution ----------------------------------------------------------------------------
# (name suffix, attrs, shape sets [(x, w)]); the first two shape sets stay small for gradients
CONV2D = [
    ("basic", {}, [((1, 2, 3, 3), (2, 2, 2, 2)), ((2, 1, 3, 4), (2, 1, 3, 3)),
                   ((2, 3, 5, 6), (4, 3, 3, 3)), ((0, 3, 4, 4), (2, 3, 3, 3)),
                   ((1, 3, 3, 3), (2, 3, 3, 3))]),
    ("stride2_pad1", {"stride": 2, "padding": 1},
     [((1, 2, 4, 3), (2, 2, 3, 3)), ((2, 1, 3, 3), (1, 1, 3, 3)), ((2, 3, 6, 7), (4, 3, 3, 3)),
      ((1, 1, 1, 1), (2, 1, 3, 3))]),
    ("rect", {"stride": (2, 1), "padding": (0, 2), "dilation": (1, 2)},
     [((1, 1, 5, 4), (2, 1, 2, 3)), ((2, 2, 3, 2), (1, 2, 2, 2)), ((2, 3, 7, 6), (3, 3, 3, 2))]),
    ("dilation2", {"dilation": 2, "padding": 1},
     [((1, 1, 5, 5), (2, 1, 2, 2)), ((1, 2, 4, 3), (1, 2, 3, 2)), ((2, 2, 7, 6), (3, 2, 3, 3))]),
    ("groups2", {"groups": 2, "padding": 1},
     [((1, 4, 3, 3), (2, 2, 2, 2)), ((1, 2, 2, 3), (4, 1, 2, 2)), ((2, 4, 5, 5), (6, 2, 3, 3))]),
    ("depthwise", {"groups": 3, "stride": 2},
     [((1, 3, 4, 4), (3, 1, 2, 2)), ((1, 3, 3, 3), (6, 1, 2, 2)), ((2, 3, 7, 7), (6, 1, 3, 3))]),
    ("1x1", {}, [((1, 3, 3, 3), (2, 3, 1, 1)), ((2, 2, 2, 3), (3, 2, 1, 1)),
                 ((2, 5, 4, 3), (4, 5, 1, 1))]),
    ("1x1_stride2", {"stride": 2}, [((1, 2, 4, 5), (3, 2, 1, 1)), ((1, 3, 3, 3), (2, 3, 1, 1)),
                                    ((2, 4, 5, 5), (3, 4, 1, 1))]),
]
CONV1D = [
    ("basic", {}, [((1, 2, 6), (3, 2, 3)), ((2, 1, 5), (2, 1, 2)), ((2, 3, 9), (4, 3, 3)),
                   ((0, 3, 5), (2, 3, 3))]),
    ("stride_pad_dil", {"stride": 2, "padding": 2, "dilation": 2},
     [((1, 2, 7), (2, 2, 3)), ((2, 1, 5), (3, 1, 3)), ((3, 3, 10), (4, 3, 3))]),
    ("groups", {"groups": 2}, [((1, 4, 5), (2, 2, 2)), ((2, 2, 4), (4, 1, 3)),
                               ((2, 6, 8), (4, 3, 3))]),
    ("1x1", {}, [((1, 3, 4), (2, 3, 1)), ((2, 4, 3), (5, 4, 1))]),
]


def _conv_cases(nd, table):
    fn = em.conv1d if nd == 1 else em.conv2d
    for suffix, kw, shapes in table:
        add(f"conv{nd}d_{suffix}", f"conv{nd}d", lambda x, w, kw=kw: fn(x, w, **kw),
            lambda x, w, kw=kw: t_conv(nd, x, w, **kw), shapes, inputs=(X_IN, W_IN))
        add(f"conv{nd}d_{suffix}_naive", f"conv{nd}d", lambda x, w, kw=kw: fn(x, w, **kw),
            lambda x, w, kw=kw: naive_conv(x, w, **kw), shapes[:2], inputs=(X_IN, W_IN),
            dtypes=("f64", "f32"), grad=False, layouts=False)


_conv_cases(2, CONV2D)
_conv_cases(1, CONV1D)
add("conv2d_bias", "conv2d", lambda x, w, b: em.conv2d(x, w, b, padding=1, groups=2),
    lambda x, w, b: t_conv(2, x, w, b, padding=1, groups=2),
    [((1, 2, 3, 3), (2, 1, 2, 2), (2,)), ((1, 4, 2, 2), (2, 2, 2, 2), (2,)),
     ((2, 4, 5, 5), (6, 2, 3, 3), (6,))])
add("conv1d_bias", "conv1d", lambda x, w, b: em.conv1d(x, w, b, stride=2),
    lambda x, w, b: t_conv(1, x, w, b, stride=2),
    [((1, 2, 5), (3, 2, 2), (3,)), ((2, 2, 6), (2, 2, 3), (2,)), ((2, 3, 8), (4, 3, 3), (4,))])
add("conv2d_same", "conv2d", lambda x, w: em.conv2d(x, w, padding="same", dilation=(1, 2)),
    lambda x, w: t_conv(2, x, w, padding="same", dilation=(1, 2)),
    [((1, 2, 4, 4), (2, 2, 3, 3)), ((2, 3, 5, 6), (2, 3, 3, 3))], grad=False)
add("conv2d_unbatched", "conv2d", lambda x, w: em.conv2d(x, w, padding=1),
    lambda x, w: t_conv(2, x, w, padding=1), [((2, 4, 4), (3, 2, 3, 3))], grad=False,
    layouts=False)

CONV_T2D = [
    ("basic", {}, [((1, 2, 3, 3), (2, 2, 2, 2)), ((2, 1, 2, 3), (1, 2, 3, 3)),
                   ((2, 3, 4, 5), (3, 2, 3, 3)), ((0, 3, 3, 3), (3, 2, 3, 3))]),
    ("stride2_pad1_outpad1", {"stride": 2, "padding": 1, "output_padding": 1},
     [((1, 2, 3, 2), (2, 2, 3, 3)), ((1, 1, 2, 2), (1, 2, 3, 3)), ((2, 3, 4, 4), (3, 2, 3, 3))]),
    ("rect", {"stride": (1, 3), "padding": (1, 0), "dilation": (2, 1),
              "output_padding": (0, 2)},
     [((1, 2, 3, 2), (2, 1, 2, 2)), ((1, 2, 2, 2), (2, 2, 3, 2)), ((2, 2, 4, 3), (2, 3, 3, 2))]),
    ("groups2", {"groups": 2, "stride": 2},
     [((1, 4, 2, 2), (4, 1, 2, 2)), ((1, 2, 2, 2), (2, 3, 2, 2)), ((2, 4, 3, 3), (4, 3, 3, 3))]),
    ("1x1", {}, [((1, 3, 3, 3), (3, 2, 1, 1)), ((2, 4, 2, 3), (4, 3, 1, 1))]),
]
CONV_T1D = [
    ("basic", {}, [((1, 2, 4), (2, 3, 3)), ((2, 3, 6), (3, 2, 3)), ((0, 2, 3), (2, 2, 2))]),
    ("stride_pad_dil", {"stride": 3, "padding": 1, "output_padding": 2, "dilation": 2},
     [((1, 2, 3), (2, 2, 3)), ((2, 3, 5), (3, 4, 2))]),
    ("groups", {"groups": 3}, [((1, 3, 4), (3, 2, 2)), ((1, 6, 5), (6, 1, 3)),
                               ((2, 6, 5), (6, 1, 3))]),
]


def _conv_t_cases(nd, table):
    fn = em.conv_transpose1d if nd == 1 else em.conv_transpose2d
    for suffix, kw, shapes in table:
        add(f"conv_transpose{nd}d_{suffix}", f"conv_transpose{nd}d",
            lambda x, w, kw=kw: fn(x, w, **kw), lambda x, w, kw=kw: t_conv_t(nd, x, w, **kw),
            shapes, inputs=(X_IN, W_IN))
        add(f"conv_transpose{nd}d_{suffix}_naive", f"conv_transpose{nd}d",
            lambda x, w, kw=kw: fn(x, w, **kw),
            lambda x, w, kw=kw: naive_conv_transpose(x, w, **kw), shapes[:2],
            inputs=(X_IN, W_IN), dtypes=("f64", "f32"), grad=False, layouts=False)


_conv_t_cases(2, CONV_T2D)
_conv_t_cases(1, CONV_T1D)
add("conv_transpose2d_bias", "conv_transpose2d",
    lambda x, w, b: em.conv_transpose2d(x, w, b, stride=2),
    lambda x, w, b: t_conv_t(2, x, w, b, stride=2),
    [((1, 2, 2, 2), (2, 3, 2, 2), (3,)), ((1, 2, 3, 3), (2, 2, 2, 2), (2,)),
     ((2, 2, 3, 3), (2, 2, 3, 3), (2,))])

# weight gradients: (x, output grad) -> dW, checked against naive loops and torch.nn.grad
WB = [
    (2, "basic", {"kernel": (3, 3)}, [((1, 2, 4, 4), (1, 2, 2, 2)), ((1, 1, 4, 5), (1, 2, 2, 3)),
                                      ((2, 3, 5, 6), (2, 4, 3, 4))]),
    (2, "stride_pad_dil_groups", {"kernel": (2, 3), "stride": (2, 1), "padding": (1, 1),
                                  "dilation": (1, 2), "groups": 2},
     [((1, 2, 4, 3), (1, 2, 3, 1)), ((1, 2, 3, 4), (1, 4, 2, 2)), ((2, 4, 6, 5), (2, 4, 4, 3))]),
    (2, "1x1_stride2", {"kernel": (1, 1), "stride": 2},
     [((1, 2, 3, 3), (1, 3, 2, 2)), ((1, 1, 5, 4), (1, 2, 3, 2)), ((2, 3, 5, 4), (2, 2, 3, 2))]),
    (1, "basic", {"kernel": (3,)}, [((1, 2, 5), (1, 3, 3)), ((2, 1, 4), (2, 2, 2)),
                                    ((2, 3, 8), (2, 4, 6))]),
    (1, "stride_pad_dil_groups", {"kernel": (2,), "stride": (3,), "padding": (2,),
                                  "dilation": (2,), "groups": 2},
     [((1, 2, 5), (1, 2, 3)), ((1, 4, 9), (1, 6, 4)), ((2, 4, 9), (2, 6, 4))]),
]


def _wb_attrs(nd, kw):
    full = {"stride": (1,) * nd, "padding": (0,) * nd, "dilation": (1,) * nd, "groups": 1}
    full.update({k: (v,) * nd if isinstance(v, int) and k != "groups" else v
                 for k, v in kw.items()})
    return full


def _t_wb(nd, x, gy, kernel, stride, padding, dilation, groups):
    torch = _torch()
    f = torch.nn.grad.conv1d_weight if nd == 1 else torch.nn.grad.conv2d_weight
    wshape = (gy.shape[1], x.shape[1] // groups) + tuple(kernel)
    return f(_t(x), wshape, _t(gy), stride=stride, padding=padding, dilation=dilation,
             groups=groups).numpy()


for nd, suffix, kw, shapes in WB:
    a = _wb_attrs(nd, kw)
    name = f"conv{nd}d_weight_backward"
    add(f"{name}_{suffix}", name, lambda x, g, a=a, name=name: P(name, x, g, **a),
        lambda x, g, a=a, nd=nd: _t_wb(nd, x, g, **a), shapes, inputs=(X_IN, W_IN))
    add(f"{name}_{suffix}_naive", name, lambda x, g, a=a, name=name: P(name, x, g, **a),
        lambda x, g, a=a: naive_conv_weight_backward(x, g, **a), shapes, inputs=(X_IN, W_IN),
        dtypes=("f64", "f32"), grad=False, layouts=False)


# -- max pooling ----------------------------------------------------------------------------
MAXPOOL2D = [
    ("k2", {"kernel_size": 2}, [((1, 2, 4, 4),), ((1, 1, 5, 7),), ((2, 3, 5, 7),),
                                ((0, 2, 4, 4),)]),
    ("k3_s2_p1", {"kernel_size": 3, "stride": 2, "padding": 1},
     [((1, 2, 5, 5),), ((1, 1, 6, 7),), ((2, 3, 6, 7),)]),
    ("rect_dil", {"kernel_size": (2, 3), "stride": (1, 2), "dilation": (2, 1), "padding": (1, 1)},
     [((1, 2, 5, 4),), ((1, 1, 6, 7),), ((2, 2, 6, 7),)]),
    ("ceil", {"kernel_size": 3, "stride": 2, "ceil_mode": True, "padding": 1},
     [((1, 2, 4, 6),), ((1, 1, 6, 5),), ((2, 3, 6, 5),)]),
    ("1x1", {"kernel_size": 1, "stride": 2}, [((1, 2, 3, 5),), ((1, 3, 4, 4),)]),
]
MAXPOOL1D = [
    ("k2", {"kernel_size": 2}, [((1, 2, 6),), ((2, 3, 7),), ((0, 2, 4),)]),
    ("k3_s2_p1_dil2_ceil", {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2,
                            "ceil_mode": True}, [((1, 2, 8),), ((2, 3, 9),)]),
]


def _t_maxpool(nd, x, **kw):
    F = _F()
    f = F.max_pool1d if nd == 1 else F.max_pool2d
    out, idx = f(_t(x), return_indices=True, **kw)
    return out.numpy(), idx.numpy()


for nd, table in ((2, MAXPOOL2D), (1, MAXPOOL1D)):
    fn = em.max_pool1d if nd == 1 else em.max_pool2d
    for suffix, kw, shapes in table:
        add(f"max_pool{nd}d_{suffix}", f"max_pool{nd}d", lambda x, kw=kw, fn=fn: fn(x, **kw),
            lambda x, kw=kw, nd=nd: _t_maxpool(nd, x, **kw)[0], shapes)
        add(f"max_pool{nd}d_with_indices_{suffix}", f"max_pool{nd}d_with_indices",
            lambda x, kw=kw, fn=fn: fn(x, return_indices=True, **kw),
            lambda x, kw=kw, nd=nd: _t_maxpool(nd, x, **kw), shapes)


def _all_neg_inf(rng, shape):
    """Rows of -inf (PyTorch then reports the window's first in-bounds position)."""
    a = rng.normal(size=shape)
    a[..., :2, :] = -np.inf
    return a


add("max_pool2d_with_indices_neg_inf", "max_pool2d_with_indices",
    lambda x: em.max_pool2d(x, 2, stride=1, padding=1, return_indices=True),
    lambda x: _t_maxpool(2, x, kernel_size=2, stride=1, padding=1),
    [((1, 2, 4, 3),)], inputs=(Input(_all_neg_inf),), grad=False, layouts=False)


def _pool_index(size):
    def gen(rng, shape):
        return rng.integers(0, int(np.prod(size)), size=shape)
    return Input(gen, dtype="i64", differentiable=False)


for nd, size, gshape in ((2, (4, 5), (2, 3, 2, 3)), (1, (7,), (2, 3, 4))):
    name = f"max_pool{nd}d_backward"
    add(name, name, lambda g, i, size=size, name=name: P(name, g, i, input_size=size),
        lambda g, i, size=size: naive_scatter(g, i, size),
        [(gshape, gshape), ((1, 1) + gshape[2:], (1, 1) + gshape[2:])],
        inputs=(Input(), _pool_index(size)))


def _distinct_pool_index(size):
    """Positions that differ within each plane (non-overlapping windows give such)."""
    def gen(rng, shape):
        n, c = shape[:2]
        k = int(np.prod(shape[2:]))
        picks = [rng.choice(int(np.prod(size)), k, replace=False) for _ in range(n * c)]
        return np.array(picks, np.int64).reshape(shape)
    return Input(gen, dtype="i64", differentiable=False)


for nd, size, gshape in ((2, (4, 5), (2, 3, 2, 3)), (1, (7,), (2, 3, 4))):
    name = f"max_pool{nd}d_backward"
    add(f"{name}_disjoint", name,
        lambda g, i, size=size, name=name: P(name, g, i, input_size=size, disjoint=True),
        lambda g, i, size=size: naive_scatter(g, i, size),
        [(gshape, gshape), ((1, 1) + gshape[2:], (1, 1) + gshape[2:])],
        inputs=(Input(), _distinct_pool_index(size)), layouts=False)


# -- average pooling ------------------------------------------------------------------------
AVGPOOL2D = [
    ("k2", {"kernel_size": 2}, [((1, 2, 4, 4),), ((1, 1, 5, 7),), ((2, 3, 5, 7),),
                                ((0, 2, 4, 4),)]),
    ("k3_s2_p1", {"kernel_size": 3, "stride": 2, "padding": 1},
     [((1, 2, 5, 5),), ((1, 1, 6, 7),), ((2, 3, 6, 7),)]),
    ("k3_s2_p1_nopad", {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
     [((1, 2, 5, 5),), ((1, 1, 6, 7),), ((2, 3, 6, 7),)]),
    ("ceil", {"kernel_size": (3, 2), "stride": 2, "padding": 1, "ceil_mode": True},
     [((1, 2, 4, 5),), ((1, 1, 6, 7),), ((2, 2, 6, 7),)]),
    ("ceil_nopad", {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                    "count_include_pad": False}, [((1, 2, 4, 6),), ((1, 1, 7, 5),),
                                                  ((2, 2, 7, 5),)]),
    ("1x1", {"kernel_size": 1}, [((1, 2, 3, 3),), ((2, 1, 2, 4),)]),
]
AVGPOOL1D = [
    ("k3_s2_p1", {"kernel_size": 3, "stride": 2, "padding": 1},
     [((1, 2, 6),), ((2, 3, 9),), ((0, 2, 4),)]),
    ("ceil_nopad", {"kernel_size": 2, "stride": 3, "padding": 1, "ceil_mode": True,
                    "count_include_pad": False}, [((1, 2, 7),), ((2, 2, 8),)]),
]


def _avg_attrs(nd, kw):
    k = _tup(kw["kernel_size"], nd)
    return {"kernel": k, "stride": _tup(kw.get("stride", k), nd),
            "padding": _tup(kw.get("padding", 0), nd), "ceil_mode": kw.get("ceil_mode", False),
            "count_include_pad": kw.get("count_include_pad", True)}


for nd, table in ((2, AVGPOOL2D), (1, AVGPOOL1D)):
    fn = em.avg_pool1d if nd == 1 else em.avg_pool2d
    for suffix, kw, shapes in table:
        tf = (lambda x, kw=kw: _F().avg_pool1d(x, **kw)) if nd == 1 else \
            (lambda x, kw=kw: _F().avg_pool2d(x, **kw))
        add(f"avg_pool{nd}d_{suffix}", f"avg_pool{nd}d", lambda x, kw=kw, fn=fn: fn(x, **kw),
            lambda x, tf=tf: tf(_t(x)).numpy(), shapes)
        # the backward primitive: output grad -> input grad, against torch's autograd
        bname = f"avg_pool{nd}d_backward"
        a = _avg_attrs(nd, kw)
        for x_shape in (shapes[0][0], shapes[1][0]):
            osz = tuple(pool_out_size(bname, n, k, s, p, 1, a["ceil_mode"]) for n, k, s, p in
                        zip(x_shape[2:], a["kernel"], a["stride"], a["padding"]))
            add(f"{bname}_{suffix}_{'x'.join(map(str, x_shape))}", bname,
                lambda g, a=a, xs=x_shape[2:], bname=bname: P(bname, g, input_size=xs, **a),
                lambda g, tf=tf, xs=x_shape: t_vjp(tf, np.zeros(xs), g),
                [(x_shape[:2] + osz,)], layouts=False)


# -- adaptive average pooling ---------------------------------------------------------------
ADAPTIVE = [
    (2, "down", (3, 2), [((1, 1, 5, 7),), ((1, 2, 4, 5),), ((2, 3, 8, 5),), ((0, 2, 4, 4),)]),
    (2, "global", (1, 1), [((1, 2, 3, 4),), ((1, 1, 5, 5),), ((2, 3, 5, 5),)]),
    (2, "up", (4, 5), [((1, 1, 3, 2),), ((1, 2, 3, 4),), ((2, 2, 3, 4),)]),
    (2, "same", (3, 3), [((1, 2, 3, 3),), ((1, 1, 3, 3),)]),
    (1, "down", (4,), [((1, 2, 7),), ((2, 3, 10),), ((0, 2, 5),)]),
    (1, "up", (5,), [((1, 2, 3),), ((2, 1, 4),)]),
]

for nd, suffix, out, shapes in ADAPTIVE:
    fn = em.adaptive_avg_pool1d if nd == 1 else em.adaptive_avg_pool2d
    tf = (lambda x, out=out: _F().adaptive_avg_pool1d(x, out)) if nd == 1 else \
        (lambda x, out=out: _F().adaptive_avg_pool2d(x, out))
    add(f"adaptive_avg_pool{nd}d_{suffix}", f"adaptive_avg_pool{nd}d",
        lambda x, out=out, fn=fn: fn(x, out), lambda x, tf=tf: tf(_t(x)).numpy(), shapes)
    bname = f"adaptive_avg_pool{nd}d_backward"
    add(f"{bname}_{suffix}", bname,
        lambda g, xs, bname=bname: P(bname, g, input_size=tuple(xs.shape[2:])),
        lambda g, xs, tf=tf: t_vjp(tf, np.zeros(xs.shape), g),
        [(x[0][:2] + tuple(out), x[0]) for x in shapes[:2]],
        inputs=(Input(), Input(differentiable=False)), layouts=False)


# -- interpolation --------------------------------------------------------------------------
INTERP = [
    ("nearest_size", {"size": (5, 4)}, [((1, 2, 4, 3),), ((1, 1, 3, 5),), ((2, 2, 3, 5),)]),
    ("nearest_scale2", {"scale_factor": 2}, [((1, 2, 3, 2),), ((1, 1, 3, 4),), ((2, 3, 4, 4),)]),
    ("nearest_scale1.5", {"scale_factor": 1.5}, [((1, 1, 5, 3),), ((1, 1, 7, 4),),
                                                 ((2, 2, 7, 4),)]),
    ("nearest_down", {"size": (2, 3)}, [((1, 1, 5, 7),), ((1, 2, 4, 4),), ((2, 2, 5, 7),)]),
    ("bilinear_size", {"size": (5, 6), "mode": "bilinear"},
     [((1, 1, 3, 4),), ((1, 2, 4, 4),), ((2, 2, 4, 4),)]),
    ("bilinear_align", {"size": (5, 4), "mode": "bilinear", "align_corners": True},
     [((1, 2, 3, 3),), ((1, 1, 4, 6),), ((2, 1, 4, 6),)]),
    ("bilinear_scale_down", {"scale_factor": (0.5, 0.75), "mode": "bilinear"},
     [((1, 2, 4, 5),), ((1, 1, 6, 8),), ((2, 1, 6, 8),)]),
    ("bilinear_to_1", {"size": (1, 3), "mode": "bilinear", "align_corners": True},
     [((1, 1, 3, 2),), ((1, 2, 2, 2),)]),
    ("nearest_1d", {"size": 7}, [((1, 2, 3),), ((2, 3, 5),), ((0, 2, 4),)]),
    ("linear_1d", {"scale_factor": 2.5, "mode": "linear"}, [((1, 2, 3),), ((2, 3, 4),)]),
]


def _t_interp(x, kw):
    return _F().interpolate(_t(x), **kw).numpy()


def _interp_out(x_shape, kw):
    nd = len(x_shape) - 2
    if "size" in kw:
        return _tup(kw["size"], nd), None
    scales = tuple(float(f) for f in _tup(kw["scale_factor"], nd))
    return tuple(int(np.floor(n * f)) for n, f in zip(x_shape[2:], scales)), scales


for suffix, kw, shapes in INTERP:
    add(f"interpolate_{suffix}", "interpolate", lambda x, kw=kw: em.interpolate(x, **kw),
        lambda x, kw=kw: _t_interp(x, kw), shapes)
    scales = _interp_out(shapes[0][0], kw)[1]
    a = {"scales": scales, "mode": "nearest" if kw.get("mode", "nearest") == "nearest"
         else "linear", "align_corners": bool(kw.get("align_corners"))}
    # the second input only carries the forward input's shape
    add(f"interpolate_backward_{suffix}", "interpolate_backward",
        lambda g, xs, a=a: P("interpolate_backward", g, input_size=tuple(xs.shape[2:]), **a),
        lambda g, xs, kw=kw: t_vjp(lambda t: _F().interpolate(t, **kw), np.zeros(xs.shape), g),
        [(x[0][:2] + _interp_out(x[0], kw)[0], x[0]) for x in shapes[:2]],
        inputs=(Input(), Input(differentiable=False)), layouts=False)


# -- embedding ------------------------------------------------------------------------------
def _naive_embedding_backward(g, idx, v):
    out = np.zeros((v, g.shape[-1]))
    np.add.at(out, idx.reshape(-1), g.reshape(-1, g.shape[-1]))
    return out


add("embedding", "embedding", lambda w, i: em.embedding(w, i), lambda w, i: w[i],
    [((10, 3), (2, 4)), ((10, 2), ()), ((10, 4), (0,)), ((10, 5), (3, 2, 2))],
    inputs=(Input(), IDX))
add("embedding_i32", "embedding", lambda w, i: em.embedding(w, i), lambda w, i: w[i],
    [((10, 3), (5,))], inputs=(Input(), Input("index", high=10, dtype="i32",
                                                 differentiable=False)), layouts=False)
add("embedding_backward", "embedding_backward",
    lambda g, i: P("embedding_backward", g, i, num_weights=10),
    lambda g, i: _naive_embedding_backward(g, i, 10),
    [((2, 4, 3), (2, 4)), ((3,), ()), ((0, 4), (0,)), ((3, 2, 2), (3, 2))],
    inputs=(Input(), IDX))


# -- normalizations ------------------------------------------------------------------------
def _t_layer_norm(x, w, b, ns):
    return _F().layer_norm(_t(x), ns, _t(w), _t(b), eps=1e-5).numpy()


add("layer_norm", ("layer_norm",),
    lambda x, w, b: em.layer_norm(x, (4,), w, b), lambda x, w, b: _t_layer_norm(x, w, b, (4,)),
    [((3, 4), (4,), (4,)), ((2, 3, 4), (4,), (4,)), ((0, 4), (4,), (4,))])
add("layer_norm_2dims_noaffine", "layer_norm", lambda x: em.layer_norm(x, (2, 3)),
    lambda x: _F().layer_norm(_t(x), (2, 3)).numpy(), [((2, 2, 3),), ((1, 2, 3),)])


def _t_group_norm(x, w, b, g):
    return _F().group_norm(_t(x), g, _t(w), _t(b), eps=1e-5).numpy()


add("group_norm", "mean", lambda x, w, b: em.group_norm(x, 2, w, b),
    lambda x, w, b: _t_group_norm(x, w, b, 2),
    [((2, 4, 3), (4,), (4,)), ((1, 4, 2, 2), (4,), (4,)), ((3, 6, 5), (6,), (6,))])


def _t_batch_norm(x, rm, rv, w, b, training, momentum=0.1):
    rm_t, rv_t = _t(rm).clone(), _t(rv).clone()
    out = _F().batch_norm(_t(x), rm_t, rv_t, _t(w), _t(b), training=training,
                          momentum=momentum, eps=1e-5)
    return out.numpy(), rm_t.numpy(), rv_t.numpy()


BN_INPUTS_TRAIN = (Input(), Input(differentiable=False), Input("positive", differentiable=False),
                   Input(), Input())
BN_SHAPES = [((4, 3), (3,), (3,), (3,), (3,)), ((2, 3, 2, 2), (3,), (3,), (3,), (3,)),
             ((3, 2, 5), (2,), (2,), (2,), (2,))]
add("batch_norm_train", "mean",
    lambda x, rm, rv, w, b: em.batch_norm(x, rm, rv, w, b, training=True, momentum=0.2),
    lambda x, rm, rv, w, b: _t_batch_norm(x, rm, rv, w, b, True, 0.2), BN_SHAPES,
    inputs=BN_INPUTS_TRAIN)
add("batch_norm_eval", ("sub", "mul", "add"),
    lambda x, rm, rv, w, b: em.batch_norm(x, rm, rv, w, b, training=False),
    lambda x, rm, rv, w, b: _t_batch_norm(x, rm, rv, w, b, False), BN_SHAPES,
    inputs=(Input(), Input(), Input("positive"), Input(), Input()))
