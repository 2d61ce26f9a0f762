"""The Cuda backend's layer-norm backward: the registry primitive ``layer_norm_backward``
(ember/ops/nn.py) as two kernels -- one pass over the rows for dx, one small column sum for
dweight and dbias.

g and x are read as C-contiguous rows of ``N`` values (the normalized dims merged; other
layouts are copied first), ``M`` rows (the leading dims).

* **rows** (``ember_lnb_warp_<T>_<K>``, ``N <= 32 K``, K in 4, 8, 16, 32): a warp per row, 8
  rows a block; each lane keeps its ``K`` values of x and g in registers, so x and g are read
  once: the mean, the centered sum of squares (rstd), then ``sum(gw)`` and ``sum(gw * xhat)``
  (four warp sums), then dx. Each lane also adds ``g * xhat`` and ``g`` of its columns over
  the warp's rows; at the end the block adds its 8 warps' sums (in warp order) and writes
  them as its row of the partial sums ``part[2, G, N]`` (dweight's, then dbias's).
* **long rows** (``ember_lnb_block_<T>_<s|g>``, ``N > 1024``): a block per row, the rows of
  x and g staged in shared memory when both fit in 48 KiB (else read again, from cache);
  each thread owns the columns ``j = tid + k * threads`` and adds its partial sums into the
  block's row of ``part`` in global memory (only it touches them: no atomics).
* **column sums** (``ember_lnb_cols_<F>``): each block sums 32 columns of one of the two
  ``[G, N]`` halves of ``part``, 8 threads per column each over every 8th partial row, then
  those 8 in order.

Blocks take rows ``b, b + G, ...`` (``G`` blocks: at most `GROUPS_CAP`, a function of M
alone), so every sum is taken in one order and results are the same from run to run.

The arithmetic is the reference's (``_layer_norm_backward_numpy``): mean = sum * (1/n),
d = x - mean, rstd = 1 / sqrt(sum(d * d) * (1/n) + eps), xhat = d * rstd, gw = g * w,
dx = rstd * ((gw - sum(gw) * (1/n)) - xhat * (sum(gw * xhat) * (1/n))), each step rounded on
its own (``--fmad=false``), f16 (as bits) computed in f32 (bf16 arrives as f32: `Cuda._runner`
upcasts it), f64 in f64. The sums are trees, not NumPy's pairwise blocks: results agree with
the reference within a few ulps, not bit for bit. dweight and dbias come out in the compute
dtype (the runner rounds dweight to the weight's dtype).
"""
from __future__ import annotations

import numpy as np

from .norm import SMEM_LIMIT
from .ops import _KERNEL_HELPERS, KERNEL_DTYPES, _Kernels, f64_bits

LNB_SOURCE = _KERNEL_HELPERS + r"""
__device__ __forceinline__ float ember_lnb_sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double ember_lnb_sqrt(double v) { return sqrt(v); }

#define EMBER_LNB_WARPS 8
// the row kernels' parameters (the launch packs the pointers, then the 64-bit integers,
// then the flags)
#define EMBER_LNB_PARAMS(T)                                                               \
  const T* __restrict__ g, const T* __restrict__ x,                                       \
      const typename ember_ct<T>::type* __restrict__ w, T* __restrict__ dx,               \
      typename ember_ct<T>::type* __restrict__ part, ember_i64 M, ember_i64 N,            \
      ember_i64 eps_bits, int flags

// flags: 1 = a weight (gw = g * w; else gw = g), 2 = write the block's partial sums of
// g * xhat (part[blockIdx.x, :]) and g (part[gridDim.x + blockIdx.x, :])
template <typename T, int K>
__device__ __forceinline__ void ember_lnb_warp(EMBER_LNB_PARAMS(T)) {
  typedef typename ember_ct<T>::type F;
  __shared__ F red[2][EMBER_LNB_WARPS][32];
  const int lane = (int)(threadIdx.x & 31), wid = (int)(threadIdx.x >> 5);
  const bool has_w = (flags & 1) != 0;
  const F inv = (F)(1.0 / (double)N);
  const F eps = (F)__longlong_as_double(eps_bits);
  F pw[K], pb[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    pw[k] = (F)0;
    pb[k] = (F)0;
  }
  const ember_i64 step = (ember_i64)gridDim.x * EMBER_LNB_WARPS;
  for (ember_i64 r = (ember_i64)blockIdx.x * EMBER_LNB_WARPS + wid; r < M; r += step) {
    const T* xr = x + r * N;             // (uniform over the warp)
    const T* gr = g + r * N;
    F xv[K], gv[K];
    F s = (F)0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const ember_i64 j = lane + 32 * k;
      xv[k] = j < N ? (F)ember_f(xr[j]) : (F)0;
      gv[k] = j < N ? (F)ember_f(gr[j]) : (F)0;
    }
#pragma unroll
    for (int k = 0; k < K; ++k) s += xv[k];
    const F mu = ember_warp_sum(s) * inv;
    F q = (F)0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (lane + 32 * k < N) {
        const F d = xv[k] - mu;
        q += d * d;
      }
    }
    const F rs = (F)1 / ember_lnb_sqrt(ember_warp_sum(q) * inv + eps);
    F sa = (F)0, sb = (F)0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const ember_i64 j = lane + 32 * k;
      if (j < N) {
        const F xh = (xv[k] - mu) * rs;
        xv[k] = xh;
        const F gw = has_w ? gv[k] * w[j] : gv[k];
        sa += gw;
        sb += gw * xh;
        pw[k] += gv[k] * xh;
        pb[k] += gv[k];
      }
    }
    const F a = ember_warp_sum(sa) * inv;
    const F b = ember_warp_sum(sb) * inv;
    T* dr = dx + r * N;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const ember_i64 j = lane + 32 * k;
      if (j < N) {
        const F gw = has_w ? gv[k] * w[j] : gv[k];
        ember_st(dr + j, rs * ((gw - a) - xv[k] * b));
      }
    }
  }
  if (flags & 2) {                        // (uniform over the block)
    F* pd = part + (ember_i64)blockIdx.x * N;
    F* pbias = part + ((ember_i64)gridDim.x + blockIdx.x) * N;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      red[0][wid][lane] = pw[k];
      red[1][wid][lane] = pb[k];
      __syncthreads();
      if (wid < 2) {                      // warp 0: dweight's sums, warp 1: dbias's
        F t = red[wid][0][lane];
#pragma unroll
        for (int u = 1; u < EMBER_LNB_WARPS; ++u) t += red[wid][u][lane];
        const ember_i64 j = lane + 32 * k;
        if (j < N) (wid ? pbias : pd)[j] = t;
      }
      __syncthreads();
    }
  }
}

// long rows: a block per row; STAGE keeps the rows of x (then xhat) and g in dynamic shared
// memory (each thread only touches its own columns there: no barrier needed for them)
template <typename T, bool STAGE>
__device__ __forceinline__ void ember_lnb_block(EMBER_LNB_PARAMS(T)) {
  typedef typename ember_ct<T>::type F;
  extern __shared__ double ember_lnb_dyn[];
  __shared__ double sh[32];
  F* xs = (F*)ember_lnb_dyn;
  F* gs = xs + N;
  const ember_i64 tid = threadIdx.x, nt = blockDim.x;
  const bool has_w = (flags & 1) != 0, sums = (flags & 2) != 0;
  const F inv = (F)(1.0 / (double)N);
  const F eps = (F)__longlong_as_double(eps_bits);
  F* pd = part + (ember_i64)blockIdx.x * N;
  F* pbias = part + ((ember_i64)gridDim.x + blockIdx.x) * N;
  for (ember_i64 r = blockIdx.x; r < M; r += gridDim.x) {   // (uniform over the block)
    const T* xr = x + r * N;
    const T* gr = g + r * N;
    const bool first = r == (ember_i64)blockIdx.x;
    F s = (F)0;
    for (ember_i64 j = tid; j < N; j += nt) {
      const F v = (F)ember_f(xr[j]);
      if (STAGE) {
        xs[j] = v;
        gs[j] = (F)ember_f(gr[j]);
      }
      s += v;
    }
    const F mu = ember_block_sum(s, sh) * inv;
    F q = (F)0;
    for (ember_i64 j = tid; j < N; j += nt) {
      const F d = (STAGE ? xs[j] : (F)ember_f(xr[j])) - mu;
      q += d * d;
    }
    const F rs = (F)1 / ember_lnb_sqrt(ember_block_sum(q, sh) * inv + eps);
    F sa = (F)0, sb = (F)0;
    for (ember_i64 j = tid; j < N; j += nt) {
      const F xh = ((STAGE ? xs[j] : (F)ember_f(xr[j])) - mu) * rs;
      const F gv = STAGE ? gs[j] : (F)ember_f(gr[j]);
      const F gw = has_w ? gv * w[j] : gv;
      if (STAGE) xs[j] = xh;
      sa += gw;
      sb += gw * xh;
      if (sums) {
        const F t = gv * xh;
        pd[j] = first ? t : pd[j] + t;
        pbias[j] = first ? gv : pbias[j] + gv;
      }
    }
    const F a = ember_block_sum(sa, sh) * inv;
    const F b = ember_block_sum(sb, sh) * inv;
    T* dr = dx + r * N;
    for (ember_i64 j = tid; j < N; j += nt) {
      const F xh = STAGE ? xs[j] : ((F)ember_f(xr[j]) - mu) * rs;
      const F gv = STAGE ? gs[j] : (F)ember_f(gr[j]);
      const F gw = has_w ? gv * w[j] : gv;
      ember_st(dr + j, rs * ((gw - a) - xh * b));
    }
  }
}

// the column sums of part[2, G, N] into out[2, N]: 32 columns of one half a block, 8
// threads a column, each over every 8th partial row (four accumulators), then in order
template <typename F>
__device__ __forceinline__ void ember_lnb_cols(const F* __restrict__ part,
                                               F* __restrict__ out, ember_i64 G,
                                               ember_i64 N) {
  __shared__ F sh[8][32];
  const int tx = (int)(threadIdx.x & 31), ty = (int)(threadIdx.x >> 5);
  const ember_i64 nb = (N + 31) / 32;
  const ember_i64 which = (ember_i64)blockIdx.x / nb;      // 0: dweight, 1: dbias
  const ember_i64 j = ((ember_i64)blockIdx.x - which * nb) * 32 + tx;
  F s0 = (F)0, s1 = (F)0, s2 = (F)0, s3 = (F)0;
  if (j < N) {
    const F* p = part + which * G * N + j;
    ember_i64 i = ty;
    for (; i + 24 < G; i += 32) {
      s0 += p[i * N];
      s1 += p[(i + 8) * N];
      s2 += p[(i + 16) * N];
      s3 += p[(i + 24) * N];
    }
    for (; i < G; i += 8) s0 += p[i * N];
  }
  sh[ty][tx] = (s0 + s1) + (s2 + s3);
  __syncthreads();
  if (ty == 0 && j < N) {
    F t = sh[0][tx];
#pragma unroll
    for (int u = 1; u < 8; ++u) t += sh[u][tx];
    out[which * N + j] = t;
  }
}

#define EMBER_LNB_WARP(TN, T, K)                                                          \
  extern "C" __global__ void __launch_bounds__(256)                                       \
  ember_lnb_warp_##TN##_##K(EMBER_LNB_PARAMS(T)) {                                        \
    ember_lnb_warp<T, K>(g, x, w, dx, part, M, N, eps_bits, flags);                       \
  }
#define EMBER_LNB_BLOCK(TN, T, ST, STAGE)                                                 \
  extern "C" __global__ void __launch_bounds__(1024)                                      \
  ember_lnb_block_##TN##_##ST(EMBER_LNB_PARAMS(T)) {                                      \
    ember_lnb_block<T, STAGE>(g, x, w, dx, part, M, N, eps_bits, flags);                  \
  }
#define EMBER_LNB(TN, T)                                                                  \
  EMBER_LNB_WARP(TN, T, 4)                                                                \
  EMBER_LNB_WARP(TN, T, 8)                                                                \
  EMBER_LNB_WARP(TN, T, 16)                                                               \
  EMBER_LNB_WARP(TN, T, 32)                                                               \
  EMBER_LNB_BLOCK(TN, T, s, true)                                                         \
  EMBER_LNB_BLOCK(TN, T, g, false)

EMBER_LNB(f16, unsigned short)
EMBER_LNB(f32, float)
EMBER_LNB(f64, double)

extern "C" __global__ void __launch_bounds__(256)
ember_lnb_cols_f32(const float* part, float* out, ember_i64 G, ember_i64 N) {
  ember_lnb_cols<float>(part, out, G, N);
}
extern "C" __global__ void __launch_bounds__(256)
ember_lnb_cols_f64(const double* part, double* out, ember_i64 G, ember_i64 N) {
  ember_lnb_cols<double>(part, out, G, N);
}
"""

#: values a lane keeps in registers (rows of up to 32 K values take a warp each)
WARP_KS = (4, 8, 16, 32)
#: rows a block of the warp kernels takes at once (a warp each)
WARPS = 8
#: blocks of the row kernels, at most: each writes a row of partial sums, which the column
#: kernel adds up (a function of M alone, so the sums' order never changes)
GROUPS_CAP = 512
#: threads of the column-sum kernel: 32 columns x 8
COL_THREADS = 256


def lnb_kernel_names():
    """Every entry point of `LNB_SOURCE`."""
    return ([f"ember_lnb_warp_{t}_{k}" for t in KERNEL_DTYPES.values() for k in WARP_KS] +
            [f"ember_lnb_block_{t}_{s}" for t in KERNEL_DTYPES.values() for s in "sg"] +
            ["ember_lnb_cols_f32", "ember_lnb_cols_f64"])


def plan(M, N, itemsize):
    """``(kernel suffix, grid, block, shared bytes)`` of the row kernel for ``M`` rows of
    ``N`` values, the compute dtype ``itemsize`` bytes wide (M, N >= 1)."""
    if N <= 32 * WARP_KS[-1]:
        k = next(k for k in WARP_KS if 32 * k >= N)
        return f"warp_{{}}_{k}", min(-(-M // WARPS), GROUPS_CAP), 32 * WARPS, 0
    threads = 256 if N <= 4096 else 512 if N <= 8192 else 1024
    smem = 2 * N * itemsize
    if smem <= SMEM_LIMIT:
        return "block_{}_s", min(M, GROUPS_CAP), threads, smem
    return "block_{}_g", min(M, GROUPS_CAP), threads, 0


_F64 = np.dtype(np.float64)
_F32 = np.dtype(np.float32)


def layer_norm_backward_impl(cp, xp):
    """``CUDA_IMPLS["layer_norm_backward"]``: the kernels above for f16/f32/f64 inputs (any
    other dtype, or g and x of two dtypes: the reference)."""
    from ...ops.nn import _layer_norm_backward_numpy
    kernels = _Kernels(cp, LNB_SOURCE)

    def layer_norm_backward(g, x, *w, ndim, eps, has_weight, has_bias):
        kd = KERNEL_DTYPES.get(x.dtype)
        if kd is None or g.dtype != x.dtype:
            return _layer_norm_backward_numpy(g, x, *w, ndim=ndim, eps=eps,
                                              has_weight=has_weight, has_bias=has_bias,
                                              xp=xp)
        ct = _F64 if x.dtype == _F64 else _F32
        k = x.ndim - ndim
        ns = x.shape[k:]
        M = N = 1
        for n in x.shape[:k]:
            M *= n
        for n in ns:
            N *= n
        dx = cp.empty(x.shape, x.dtype)
        sums = has_weight or has_bias
        tot = None
        if M == 0 or N == 0:
            if sums:
                tot = cp.zeros((2, N), ct)
        else:
            x = cp.ascontiguousarray(x)
            g = cp.ascontiguousarray(g)
            wv = cp.ascontiguousarray(w[0], dtype=ct) if has_weight else dx
            suffix, grid, block, smem = plan(M, N, ct.itemsize)
            part = cp.empty((2, grid, N), ct) if sums else dx
            flags = (1 if has_weight else 0) | (2 if sums else 0)
            kernels.launch("ember_lnb_" + suffix.format(kd), grid, block,
                           (g, x, wv, dx, part), (M, N, f64_bits(eps)), (flags,), smem)
            if sums:
                tot = cp.empty((2, N), ct)
                kernels.launch(f"ember_lnb_cols_{'f64' if ct == _F64 else 'f32'}",
                               2 * -(-N // 32), COL_THREADS, (part, tot), (grid, N))
        out = (dx,)
        if has_weight:
            out += (tot[0].reshape(ns),)       # (rounded to the weight's dtype by the runner)
        if has_bias:
            out += (tot[1].reshape(ns),)
        return out
    return layer_norm_backward
