"""The Cuda backend's convolutions: the registry's ``conv{1,2}d``, ``conv{1,2}d_weight_backward``
and (stride 1) ``conv_transpose{1,2}d`` as one column kernel and one cuBLAS product each.

The references (ember/ops/nn.py) build their columns with NumPy-style calls (a transpose, a
zero-padded copy, a strided view, a contiguous copy, reshapes), and reorder weights and weight
gradients with more copies: on a GPU each is a CuPy call of 10-25 us of host time, a dozen
per convolution, which a small model's training step (LeNet, bench row 8) pays many times.
Here `COL_SOURCE`'s ``ember_im2col`` writes the columns in one launch (launched directly:
`ops._Kernels`), from an input of any strides, zero padding, stride and dilation included:

    cols [groups, N * OH * OW, Cg * KH * KW]     row (n, oh, ow), column (c, i, j)

The columns are channel-major -- the order of the weight's own ``[O, Cg, KH, KW]`` memory --
so the forward product reads the weight as it lies (``w.reshape(g, F, Q)`` transposed, a
cuBLAS transpose flag) and the weight gradient ``gy^T @ cols`` comes out in the weight's
layout: neither needs a copy (the references order columns kernel-offset-major and copy the
weight and the gradient). The transposed conv of stride 1 (a conv's input gradient) is a
conv of the padded gradient with the flipped, transposed weight, which ``ember_gather4``
writes in one launch. Outputs are laid out as the references lay them (a conv's output
channels innermost in memory). The products sum in another order than the references':
results agree to rounding, not bit for bit.

f32 and f64 run here (bf16 arrives as f32: `Cuda._runner`); f16 (computed in f32 by the
references), depthwise convs (one input channel per group: the references' broadcast
form), grouped or strided transposed convs, and more than 2 spatial dims run the references.
"""
from __future__ import annotations

import numpy as np

from ...kernel.strides import with_element_strides
from .ops import _GRID_CAP, _Kernels

COL_SOURCE = r"""
typedef long long ember_i64;

// cols[e], e = ((g * NP + p) * Q + q), p = (n, oh, ow), q = (c, i, j): x at
// (n, g * Cg + c, oh * sth - ph + i * dh, ow * stw - pw + j * dw), 0 outside the input.
// I: the index type (int when every index fits).
template <typename T, typename I>
__device__ __forceinline__ void ember_im2col(
    const T* __restrict__ x, T* __restrict__ cols, I total, I Q, I NP, I Cg, I H, I W,
    I OH, I OW, ember_i64 sn, ember_i64 sc, ember_i64 sh, ember_i64 sw, int kh, int kw,
    int sth, int stw, int ph, int pw, int dh, int dw) {
  const I step = (I)gridDim.x * (I)blockDim.x;
  for (I e = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; e < total; e += step) {
    const I q = e % Q, r = e / Q;
    const I j = q % kw, t = q / kw;
    const I i = t % kh, c = t / kh;
    const I p = r % NP, g = r / NP;
    const I ow = p % OW, u = p / OW;
    const I oh = u % OH, n = u / OH;
    const I h = oh * sth - ph + i * dh, w = ow * stw - pw + j * dw;
    T v = (T)0;
    if (h >= 0 && h < H && w >= 0 && w < W)
      v = x[(ember_i64)n * sn + (ember_i64)(g * Cg + c) * sc + (ember_i64)h * sh +
            (ember_i64)w * sw];
    cols[e] = v;
  }
}

// out[e], e = ((d0 * D1 + d1) * D2 + d2) * D3 + d3: x[off + d0 s0 + d1 s1 + d2 s2 + d3 s3]
// (strides in elements, any sign): a 4-d gather into a contiguous array
template <typename T>
__device__ __forceinline__ void ember_gather4(
    const T* __restrict__ x, T* __restrict__ out, ember_i64 total, ember_i64 off,
    ember_i64 D1, ember_i64 D2, ember_i64 D3, ember_i64 s0, ember_i64 s1, ember_i64 s2,
    ember_i64 s3) {
  const ember_i64 step = (ember_i64)gridDim.x * blockDim.x;
  for (ember_i64 e = (ember_i64)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += step) {
    const ember_i64 d3 = e % D3, t = e / D3;
    const ember_i64 d2 = t % D2, u = t / D2;
    const ember_i64 d1 = u % D1, d0 = u / D1;
    out[e] = x[off + d0 * s0 + d1 * s1 + d2 * s2 + d3 * s3];
  }
}

// the sizes arrive as 64-bit parameters; the 32-bit entry points index in int
#define EMBER_COLS(TN, T)                                                                 \
  extern "C" __global__ void __launch_bounds__(256) ember_im2col_##TN(                    \
      const T* x, T* cols, ember_i64 total, ember_i64 Q, ember_i64 NP, ember_i64 Cg,      \
      ember_i64 H, ember_i64 W, ember_i64 OH, ember_i64 OW, ember_i64 sn, ember_i64 sc,   \
      ember_i64 sh, ember_i64 sw, int kh, int kw, int sth, int stw, int ph, int pw,       \
      int dh, int dw) {                                                                   \
    ember_im2col<T, int>(x, cols, (int)total, (int)Q, (int)NP, (int)Cg, (int)H, (int)W,   \
                         (int)OH, (int)OW, sn, sc, sh, sw, kh, kw, sth, stw, ph, pw, dh,  \
                         dw);                                                             \
  }                                                                                       \
  extern "C" __global__ void __launch_bounds__(256) ember_im2col_##TN##_l(                \
      const T* x, T* cols, ember_i64 total, ember_i64 Q, ember_i64 NP, ember_i64 Cg,      \
      ember_i64 H, ember_i64 W, ember_i64 OH, ember_i64 OW, ember_i64 sn, ember_i64 sc,   \
      ember_i64 sh, ember_i64 sw, int kh, int kw, int sth, int stw, int ph, int pw,       \
      int dh, int dw) {                                                                   \
    ember_im2col<T, ember_i64>(x, cols, total, Q, NP, Cg, H, W, OH, OW, sn, sc, sh, sw,   \
                               kh, kw, sth, stw, ph, pw, dh, dw);                         \
  }                                                                                       \
  extern "C" __global__ void __launch_bounds__(256) ember_gather4_##TN(                   \
      const T* x, T* out, ember_i64 total, ember_i64 off, ember_i64 D1, ember_i64 D2,     \
      ember_i64 D3, ember_i64 s0, ember_i64 s1, ember_i64 s2, ember_i64 s3) {             \
    ember_gather4<T>(x, out, total, off, D1, D2, D3, s0, s1, s2, s3);                     \
  }

EMBER_COLS(f32, float)
EMBER_COLS(f64, double)
"""

#: the column kernels' names per dtype
COL_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
#: columns of more elements take the 64-bit-index kernel (a grid-stride step past this
#: stays below 2^31)
_I32_SAFE = 1 << 30
_THREADS = 256


def col_kernel_names():
    """Every entry point of `COL_SOURCE`."""
    return [f"ember_{k}_{t}{sfx}" for t in COL_DTYPES.values()
            for k, sfx in (("im2col", ""), ("im2col", "_l"), ("gather4", ""))]


def _grid(total):
    return max(1, min(-(-total // _THREADS), _GRID_CAP))


def _two(nd, t, fill):
    """A 1-d conv's per-dim tuple as the 2-d one of [N, C, 1, L]."""
    return tuple(t) if nd == 2 else (fill,) + tuple(t)


class _Cols:
    """The column and gather kernels of one backend."""

    def __init__(self, cp):
        self.cp = cp
        self.kernels = _Kernels(cp, COL_SOURCE)

    def _strided(self, a):
        """``(a, its element strides)``: ``a`` copied C-contiguous first when a stride is
        not a whole number of elements."""
        return with_element_strides(a, self.cp.ascontiguousarray)

    def im2col(self, x, nd, kd, kernel, stride, padding, dilation, groups, osz):
        """``[groups, N*OH*OW, Cg*KH*KW]`` columns of ``x`` [N, C, *S] (see the module
        doc); the per-dim tuples have ``nd`` entries."""
        n, c = x.shape[:2]
        h, w = _two(nd, x.shape[2:], 1)
        cg = c // groups
        oh, ow = _two(nd, osz, 1)
        kh, kw = _two(nd, kernel, 1)
        q = cg * kh * kw
        npos = n * oh * ow
        cols = self.cp.ndarray((groups, npos, q), x.dtype)
        total = groups * npos * q
        if total == 0:
            return cols
        x, sx = self._strided(x)
        if nd == 1:
            sx = (sx[0], sx[1], 0, sx[2])
        big = total > _I32_SAFE
        self.kernels.launch(f"ember_im2col_{kd}{'_l' if big else ''}", _grid(total),
                            _THREADS, (x, cols), (total, q, npos, cg, h, w, oh, ow, *sx),
                            (kh, kw, *_two(nd, stride, 1), *_two(nd, padding, 0),
                             *_two(nd, dilation, 1)))
        return cols

    def flipped(self, w, nd, kd):
        """Transposed-conv weight ``w`` [Cin, F, *K] as the matrix ``[Cin*KH*KW, F]`` of
        the flipped kernel: row (ci, i, j) holds ``w[ci, :, KH-1-i, KW-1-j]``."""
        cin, f = w.shape[:2]
        kh, kw = _two(nd, w.shape[2:], 1)
        out = self.cp.ndarray((cin * kh * kw, f), w.dtype)
        total = out.size
        if total == 0:
            return out
        w, sw = self._strided(w)
        s0, s1, s2, s3 = sw if nd == 2 else (sw[0], sw[1], 0, sw[2])
        self.kernels.launch(f"ember_gather4_{kd}", _grid(total), _THREADS, (w, out),
                            (total, (kh - 1) * s2 + (kw - 1) * s3, kh, kw, f, s0, -s2, -s3,
                             s1))
        return out


def conv_impl(nd):
    """Builder of ``conv{nd}d``: the columns (`_Cols.im2col`) times the weight read as it
    lies."""
    def build(cp, xp):
        from ...ops import nn as N
        ref = N._conv_np(nd)
        cols = _Cols(cp)

        def conv(x, w, *, stride, padding, dilation, groups):
            kd = COL_DTYPES.get(x.dtype)
            o, cg = w.shape[:2]
            if kd is None or w.dtype != x.dtype or (cg == 1 and groups > 1):
                return ref(x, w, stride, padding, dilation, groups, xp=xp)
            kernel = w.shape[2:]
            osz = tuple(N.conv_out_size("conv", s_, k, st, p, d) for s_, k, st, p, d in
                        zip(x.shape[2:], kernel, stride, padding, dilation))
            cc = cols.im2col(x, nd, kd, kernel, stride, padding, dilation, groups, osz)
            f = o // groups
            y = xp.matmul(cc, w.reshape(groups, f, cc.shape[2]).transpose(0, 2, 1))
            return N._to_nc(y, x.shape[0], groups, osz, f, nd)
        return conv
    return build


def conv_weight_backward_impl(nd):
    """Builder of ``conv{nd}d_weight_backward``: ``gy^T @ cols`` per group, which is the
    gradient in the weight's own layout."""
    def build(cp, xp):
        from ...ops import nn as N
        ref = N._conv_weight_backward_np(nd)
        cols = _Cols(cp)

        def conv_weight_backward(x, gy, *, kernel, stride, padding, dilation, groups):
            kd = COL_DTYPES.get(x.dtype)
            o, c = gy.shape[1], x.shape[1]
            cg = c // groups
            if kd is None or gy.dtype != x.dtype or (cg == 1 and groups > 1):
                return ref(x, gy, kernel, stride, padding, dilation, groups, xp=xp)
            cc = cols.im2col(x, nd, kd, kernel, stride, padding, dilation, groups,
                             gy.shape[2:])
            gm = N._from_nc(gy, groups, nd)                      # [g, N*P, F]
            dw = xp.matmul(gm.transpose(0, 2, 1), cc)           # [g, F, Cg*K]
            return dw.reshape((o, cg) + tuple(kernel))
        return conv_weight_backward
    return build


def conv_transpose_impl(nd):
    """Builder of ``conv_transpose{nd}d``: for stride 1 and one group (a conv's input
    gradient), the columns of the padded input times the flipped weight; else the
    reference."""
    def build(cp, xp):
        from ...ops import nn as N
        ref = N._conv_transpose_np(nd)
        cols = _Cols(cp)

        def conv_transpose(x, w, *, stride, padding, output_padding, dilation, groups):
            kd = COL_DTYPES.get(x.dtype)
            kernel = w.shape[2:]
            if kd is None or w.dtype != x.dtype or groups != 1 or \
                    any(st != 1 for st in stride) or \
                    any(d * (k - 1) < p for d, k, p in zip(dilation, kernel, padding)):
                return ref(x, w, stride, padding, output_padding, dilation, groups, xp=xp)
            f = w.shape[1]
            pad = tuple(d * (k - 1) - p for d, k, p in zip(dilation, kernel, padding))
            osz = tuple(N.conv_out_size("conv_transpose", s_, k, 1, p, d) for s_, k, p, d in
                        zip(x.shape[2:], kernel, pad, dilation))
            cc = cols.im2col(x, nd, kd, kernel, stride, pad, dilation, 1, osz)
            y = xp.matmul(cc, cols.flipped(w, nd, kd)[None])
            return N._to_nc(y, x.shape[0], 1, osz, f, nd)
        return conv_transpose
    return build
