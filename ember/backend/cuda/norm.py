"""The Cuda backend's layer norm: the registry primitive ``layer_norm`` (ember/ops/nn.py) as
one kernel, for any input strides -- one read of x, one write of y.

The trailing ``ndim`` dims of x must merge into one strided axis of its memory (``N``
values, stride ``sn``); the leading dims, size-1 dims dropped and dims adjacent in memory
merged, become at most four (sizes ``L``, strides ``S``): other layouts are copied to
C-contiguous first. y is C-contiguous, row ``r`` (the leading dims' flat index) at ``r * N``.

* **rows** (the normalized axis has unit stride, or no leading dim has): a warp per row
  (``N <= 1024``, 8 rows a block) or a block per row; each row is staged in shared memory
  when it fits (``STAGE``; else the second and third passes read it again, from cache).
* **tile** (the swap_dims case: the normalized axis is strided and a leading dim has unit
  stride): a block takes ``TC`` (32, 16 or 8) neighbouring rows along that dim, reads the
  ``N x TC`` tile into shared memory with coalesced ``TC``-wide reads, reduces each column,
  and writes each row of y contiguously (warps over rows, lanes along the row). The tile's
  pitch is ``TC + 1`` so neither the column reads nor the row reads hit one bank. Each
  thread issues its loads in batches of 16 before storing them: written as one predicated
  loop, each load sat in a branch of its own and a thread had one load in flight (bench
  row 4 on an H100: 0.418 ms, 2.35x the copy floor; batched 0.238 ms, 1.34x).
* **wide tile** (f32 tiles whose rows are 16-byte aligned, the default where the tile fits
  `WIDE_SMEM_MAX`): 64 rows a block, read 4 floats at once, the ``N x 65`` tile in dynamic
  shared memory beyond 48 KiB (the function opted in: ``cudaFuncSetAttribute``, up to the
  device's ``sharedMemPerBlockOptin``). Bench row 4 on an H100: 0.2268 ms against 0.2409
  for the 32-row tile read a float at a time (a copy of the bytes 0.1873 ms).
* Tiles of rows up to 256 values keep the weight and bias in registers: each lane writes the
  same 8 positions of every row of y. Read once a row from cache instead, they doubled the
  loads of the write phase: bench row 4 on an H200 took 0.1780 ms so, 0.1610-0.1629 ms now
  (copy floor 0.1258 ms; JAX 0.1635, torch.compile 0.1692). Reading the next tile with
  ``cp.async`` while normalizing this one (two buffers, a block a multiprocessor) was slower
  there (0.25 ms), as was summing the columns while loading (0.173 ms).

The arithmetic is the reference's (``_layer_norm_numpy``), in f32 for f16 (bf16 arrives as
f32: `Cuda._runner` upcasts it) and f64 for f64: mean = sum * (1/n), d = x - mean, var =
sum(d * d) * (1/n), y = d * (1 / sqrt(var + eps)), then * w, + b, each rounded on its own
(ember's NVRTC options include ``--fmad=false``); the sums are trees, not NumPy's pairwise
blocks, so results agree with the reference within a few ulps, not bit for bit.
"""
from __future__ import annotations

import numpy as np

from ...kernel.strides import contiguous_strides, element_strides
from .ops import _GRID_CAP, _KERNEL_HELPERS, KERNEL_DTYPES, _Kernels, f64_bits

LN_SOURCE = _KERNEL_HELPERS + r"""
__device__ __forceinline__ float ember_sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double ember_sqrt(double v) { return sqrt(v); }


// the memory offset of row r (the flat index over the leading dims L0..L3, L3 innermost)
__device__ __forceinline__ ember_i64 ember_ln_xoff(
    ember_i64 r, ember_i64 L1, ember_i64 L2, ember_i64 L3, ember_i64 S0, ember_i64 S1,
    ember_i64 S2, ember_i64 S3) {
  const ember_i64 i3 = r % L3; r /= L3;
  const ember_i64 i2 = r % L2; r /= L2;
  const ember_i64 i1 = r % L1;
  const ember_i64 i0 = r / L1;
  return i0 * S0 + i1 * S1 + i2 * S2 + i3 * S3;
}

// rows: a group of G threads (a warp, or the block when BLOCK) per row
template <typename T, bool BLOCK, bool STAGE>
__device__ __forceinline__ void ember_ln_rows(
    const T* __restrict__ x, const typename ember_ct<T>::type* __restrict__ w,
    const typename ember_ct<T>::type* __restrict__ b, T* __restrict__ y, ember_i64 M,
    ember_i64 N, ember_i64 sn, ember_i64 L1, ember_i64 L2, ember_i64 L3, ember_i64 S0,
    ember_i64 S1, ember_i64 S2, ember_i64 S3, ember_i64 eps_bits, int flags) {
  typedef typename ember_ct<T>::type F;
  extern __shared__ double ember_ln_dyn[];
  __shared__ double sh[32];
  ember_i64 lane, G, r, step;
  if (BLOCK) {
    lane = threadIdx.x; G = blockDim.x; r = blockIdx.x; step = gridDim.x;
  } else {
    const ember_i64 rows = blockDim.x >> 5;
    lane = threadIdx.x & 31; G = 32;
    r = (ember_i64)blockIdx.x * rows + (threadIdx.x >> 5);
    step = (ember_i64)gridDim.x * rows;
  }
  F* buf = (F*)ember_ln_dyn + (BLOCK ? 0 : (ember_i64)(threadIdx.x >> 5) * N);
  const F inv = (F)(1.0 / (double)N);
  const F eps = (F)__longlong_as_double(eps_bits);
  for (; r < M; r += step) {               // (uniform over each warp / block)
    const T* xr = x + ember_ln_xoff(r, L1, L2, L3, S0, S1, S2, S3);
    F s = (F)0;
    for (ember_i64 j = lane; j < N; j += G) {
      const F v = (F)ember_f(xr[j * sn]);
      if (STAGE) buf[j] = v;
      s += v;
    }
    s = BLOCK ? ember_block_sum(s, sh) : ember_warp_sum(s);
    const F mu = s * inv;
    F q = (F)0;
    for (ember_i64 j = lane; j < N; j += G) {
      const F d = (STAGE ? buf[j] : (F)ember_f(xr[j * sn])) - mu;
      q += d * d;
    }
    q = BLOCK ? ember_block_sum(q, sh) : ember_warp_sum(q);
    const F rs = (F)1 / ember_sqrt(q * inv + eps);
    T* yr = y + r * N;
    for (ember_i64 j = lane; j < N; j += G) {
      F o = ((STAGE ? buf[j] : (F)ember_f(xr[j * sn])) - mu) * rs;
      if (flags & 1) o = o * w[j];
      if (flags & 2) o = o + b[j];
      ember_st(yr + j, o);
    }
  }
}

// tile: TC neighbouring rows along leading dim `ld` (unit stride in x) per block of
// EMBER_LN_NT threads, staged as an N x TC tile (pitch TC + 1) in dynamic shared memory.
// Loads go in batches of independent loads into registers, then to shared memory (a load
// per branch, as a predicated loop compiles, keeps one load in flight per thread); VEC
// reads 4 floats at once where the tile's rows are 16-byte aligned (the host checks).
#define EMBER_LN_NT 256
struct __align__(16) ember_f4 { float x, y, z, w; };

template <typename T, int TC>
__device__ __forceinline__ void ember_ln_load(
    typename ember_ct<T>::type* tile, const T* __restrict__ xt, ember_i64 sn, ember_i64 Sl,
    int n, int nv, int tid) {
  typedef typename ember_ct<T>::type F;
  constexpr int NT = EMBER_LN_NT, R = NT / TC, U = 16;
  const int c = tid % TC, j0 = tid / TC;   // (NT is a multiple of TC: c stays put)
  if (nv == TC) {
    int j = j0;
    for (; j + (U - 1) * R < n; j += U * R) {
      F v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) v[u] = (F)ember_f(xt[(ember_i64)(j + u * R) * sn + c * Sl]);
#pragma unroll
      for (int u = 0; u < U; ++u) tile[(j + u * R) * (TC + 1) + c] = v[u];
    }
    for (; j < n; j += R) tile[j * (TC + 1) + c] = (F)ember_f(xt[(ember_i64)j * sn + c * Sl]);
  } else if (c < nv) {
    for (int j = j0; j < n; j += R)
      tile[j * (TC + 1) + c] = (F)ember_f(xt[(ember_i64)j * sn + c * Sl]);
  }
}

template <int TC>
__device__ __forceinline__ void ember_ln_load_v4(
    float* tile, const float* __restrict__ xt, ember_i64 sn, int n, int nv, int tid) {
  constexpr int NT = EMBER_LN_NT, Q = TC / 4, R = NT / Q, U = 8;
  if (nv != TC) {                           // a partial tile: one float at a time
    ember_ln_load<float, TC>(tile, xt, sn, 1, n, nv, tid);
    return;
  }
  const int q = tid % Q, j0 = tid / Q;
  int j = j0;
  for (; j + (U - 1) * R < n; j += U * R) {
    ember_f4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      v[u] = *reinterpret_cast<const ember_f4*>(xt + (ember_i64)(j + u * R) * sn + 4 * q);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float* d = tile + (j + u * R) * (TC + 1) + 4 * q;
      d[0] = v[u].x; d[1] = v[u].y; d[2] = v[u].z; d[3] = v[u].w;
    }
  }
  for (; j < n; j += R) {
    const ember_f4 v = *reinterpret_cast<const ember_f4*>(xt + (ember_i64)j * sn + 4 * q);
    float* d = tile + j * (TC + 1) + 4 * q;
    d[0] = v.x; d[1] = v.y; d[2] = v.z; d[3] = v.w;
  }
}

// the sum of column c over rows p, p + P, ... (four accumulators: short dependency chains)
template <typename F, int TC>
__device__ __forceinline__ F ember_ln_col_sum(const F* tile, int c, int p, int P, int n,
                                              F mu, bool centered) {
  F s0 = (F)0, s1 = (F)0, s2 = (F)0, s3 = (F)0;
  int j = p;
  for (; j + 3 * P < n; j += 4 * P) {
    F a = tile[j * (TC + 1) + c], b = tile[(j + P) * (TC + 1) + c];
    F d = tile[(j + 2 * P) * (TC + 1) + c], e = tile[(j + 3 * P) * (TC + 1) + c];
    if (centered) {
      a -= mu; b -= mu; d -= mu; e -= mu;
      a *= a; b *= b; d *= d; e *= e;
    }
    s0 += a; s1 += b; s2 += d; s3 += e;
  }
  for (; j < n; j += P) {
    F a = tile[j * (TC + 1) + c];
    if (centered) { a -= mu; a *= a; }
    s0 += a;
  }
  return (s0 + s1) + (s2 + s3);
}

// where tile t starts: x's offset, y's first row and the row step along the lane dim, and
// its valid rows (TC but at the lane dim's end)
struct ember_ln_at { ember_i64 xoff, row, lrs; int nv; };

__device__ __forceinline__ ember_ln_at ember_ln_tile_at(
    ember_i64 t, ember_i64 ntl, int TC, const ember_i64* L, const ember_i64* S, int ld) {
  ember_i64 o = t / ntl;
  const ember_i64 l0 = (t - o * ntl) * TC;
  ember_ln_at a;
  a.xoff = 0; a.row = 0; a.lrs = 1;
  ember_i64 rstride = 1;
  for (int d = 3; d >= 0; --d) {
    if (d == ld) {
      a.lrs = rstride;
    } else {
      const ember_i64 i = o % L[d];
      o /= L[d];
      a.xoff += i * S[d];
      a.row += i * rstride;
    }
    rstride *= L[d];
  }
  a.xoff += l0 * S[ld];
  a.row += l0 * a.lrs;
  a.nv = (int)(L[ld] - l0 < TC ? L[ld] - l0 : TC);
  return a;
}

// a staged tile normalized: column sums (mean, then the centered squares), then each row of
// y written contiguously (warps over rows, lanes along the row); ends before a barrier
template <typename T, int TC, int NT>
__device__ __forceinline__ void ember_ln_tile_norm(
    const typename ember_ct<T>::type* tile, const typename ember_ct<T>::type* __restrict__ w,
    const typename ember_ct<T>::type* __restrict__ b, T* __restrict__ y, ember_ln_at a,
    int n, ember_i64 N, typename ember_ct<T>::type inv, typename ember_ct<T>::type eps,
    int flags, typename ember_ct<T>::type* part, typename ember_ct<T>::type* mean_s,
    typename ember_ct<T>::type* rstd_s, int tid) {
  typedef typename ember_ct<T>::type F;
  constexpr int P = NT / TC;                    // threads per column in the sums
  const int c = tid % TC, p = tid / TC;
  part[tid] = ember_ln_col_sum<F, TC>(tile, c, p, P, n, (F)0, false);
  __syncthreads();
  if (tid < TC) {
    F s = (F)0;
    for (int q = 0; q < P; ++q) s += part[q * TC + tid];
    mean_s[tid] = s * inv;
  }
  __syncthreads();
  part[tid] = ember_ln_col_sum<F, TC>(tile, c, p, P, n, mean_s[c], true);
  __syncthreads();
  if (tid < TC) {
    F s = (F)0;
    for (int q = 0; q < P; ++q) s += part[q * TC + tid];
    rstd_s[tid] = (F)1 / ember_sqrt(s * inv + eps);
  }
  __syncthreads();
  const int wid = tid >> 5, ln = tid & 31;
  if (n <= 256) {
    // each lane writes the same 8 positions j of every row: their weight and bias read
    // once, not once a row (on an H200, bench row 4: 0.1640 ms against 0.1780, 1.30x the
    // copy floor against 1.42x)
    F wr[8], br[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int j = ln + 32 * k;
      wr[k] = ((flags & 1) && j < n) ? w[j] : (F)1;
      br[k] = ((flags & 2) && j < n) ? b[j] : (F)0;
    }
    for (int cc = wid; cc < a.nv; cc += NT / 32) {
      const F m = mean_s[cc], rs = rstd_s[cc];
      T* yr = y + (a.row + (ember_i64)cc * a.lrs) * N;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int j = ln + 32 * k;
        if (j < n) {
          F r = (tile[j * (TC + 1) + cc] - m) * rs;
          if (flags & 1) r = r * wr[k];
          if (flags & 2) r = r + br[k];
          ember_st(yr + j, r);
        }
      }
    }
    return;
  }
  for (int cc = wid; cc < a.nv; cc += NT / 32) {
    const F m = mean_s[cc], rs = rstd_s[cc];
    T* yr = y + (a.row + (ember_i64)cc * a.lrs) * N;
#pragma unroll 4
    for (int j = ln; j < n; j += 32) {
      F r = (tile[j * (TC + 1) + cc] - m) * rs;
      if (flags & 1) r = r * w[j];
      if (flags & 2) r = r + b[j];
      ember_st(yr + j, r);
    }
  }
}

template <typename T, int TC, bool VEC>
__device__ __forceinline__ void ember_ln_tile(
    const T* __restrict__ x, const typename ember_ct<T>::type* __restrict__ w,
    const typename ember_ct<T>::type* __restrict__ b, T* __restrict__ y, ember_i64 N,
    ember_i64 sn, ember_i64 L0, ember_i64 L1, ember_i64 L2, ember_i64 L3, ember_i64 S0,
    ember_i64 S1, ember_i64 S2, ember_i64 S3, ember_i64 eps_bits, int flags, int ld) {
  typedef typename ember_ct<T>::type F;
  constexpr int NT = EMBER_LN_NT;
  extern __shared__ double ember_ln_dyn[];
  F* tile = (F*)ember_ln_dyn;
  __shared__ F part[NT];
  __shared__ F mean_s[TC];
  __shared__ F rstd_s[TC];
  const ember_i64 L[4] = {L0, L1, L2, L3};
  const ember_i64 S[4] = {S0, S1, S2, S3};
  const int tid = (int)threadIdx.x;
  const int n = (int)N;
  const ember_i64 ntl = (L[ld] + TC - 1) / TC;
  const ember_i64 total = ntl * (L0 * L1 * L2 * L3 / L[ld]);
  const F inv = (F)(1.0 / (double)N);
  const F eps = (F)__longlong_as_double(eps_bits);
  for (ember_i64 t = blockIdx.x; t < total; t += gridDim.x) {   // (uniform over the block)
    const ember_ln_at a = ember_ln_tile_at(t, ntl, TC, L, S, ld);
    if (VEC)
      ember_ln_load_v4<TC>((float*)tile, (const float*)(x + a.xoff), sn, n, a.nv, tid);
    else
      ember_ln_load<T, TC>(tile, x + a.xoff, sn, S[ld], n, a.nv, tid);
    __syncthreads();
    ember_ln_tile_norm<T, TC, NT>(tile, w, b, y, a, n, N, inv, eps, flags, part, mean_s,
                                  rstd_s, tid);
    __syncthreads();                        // before the next tile overwrites this one
  }
}

#define EMBER_LN_ROWS(TN, T, MODE, BLOCK, BOUND, ST, STAGE)                               \
  extern "C" __global__ void __launch_bounds__(BOUND)                                     \
  ember_ln_rows_##TN##_##MODE##_##ST(                                                     \
      const T* x, const ember_ct<T>::type* w, const ember_ct<T>::type* b, T* y,           \
      ember_i64 M, ember_i64 N, ember_i64 sn, ember_i64 L0, ember_i64 L1, ember_i64 L2,   \
      ember_i64 L3, ember_i64 S0, ember_i64 S1, ember_i64 S2, ember_i64 S3,               \
      ember_i64 eps_bits, int flags, int ld) {                                            \
    ember_ln_rows<T, BLOCK, STAGE>(x, w, b, y, M, N, sn, L1, L2, L3, S0, S1, S2, S3,      \
                                   eps_bits, flags);                                      \
  }
#define EMBER_LN_TILE(TN, T, TC, V, VEC)                                                  \
  extern "C" __global__ void __launch_bounds__(EMBER_LN_NT)                               \
  ember_ln_tile_##TN##_##TC##V(                                                           \
      const T* x, const ember_ct<T>::type* w, const ember_ct<T>::type* b, T* y,           \
      ember_i64 M, ember_i64 N, ember_i64 sn, ember_i64 L0, ember_i64 L1, ember_i64 L2,   \
      ember_i64 L3, ember_i64 S0, ember_i64 S1, ember_i64 S2, ember_i64 S3,               \
      ember_i64 eps_bits, int flags, int ld) {                                            \
    ember_ln_tile<T, TC, VEC>(x, w, b, y, N, sn, L0, L1, L2, L3, S0, S1, S2, S3,          \
                              eps_bits, flags, ld);                                       \
  }
#define EMBER_LN(TN, T)                                                                   \
  EMBER_LN_ROWS(TN, T, w, false, 256, s, true)                                            \
  EMBER_LN_ROWS(TN, T, w, false, 256, g, false)                                           \
  EMBER_LN_ROWS(TN, T, b, true, 1024, s, true)                                            \
  EMBER_LN_ROWS(TN, T, b, true, 1024, g, false)                                           \
  EMBER_LN_TILE(TN, T, 32, , false)                                                       \
  EMBER_LN_TILE(TN, T, 16, , false)                                                       \
  EMBER_LN_TILE(TN, T, 8, , false)

EMBER_LN(f16, unsigned short)
EMBER_LN(f32, float)
EMBER_LN(f64, double)
// f32 tiles read 4 floats at once (rows 16-byte aligned); 64 wide takes opted-in shared
// memory beyond 48 KiB for N > 188 (the launch opts in: `_Kernels.launch`)
EMBER_LN_TILE(f32, float, 32, v, true)
EMBER_LN_TILE(f32, float, 16, v, true)
EMBER_LN_TILE(f32, float, 64, v, true)
"""

#: dynamic shared memory a launch may use without opting in
SMEM_LIMIT = 48 * 1024
#: rows of at most this many values: a warp each, 8 rows a block
ROW_WARP_MAX = 1024
ROW_WARP_BLOCK = 256
TILE_THREADS = 256
TILE_WIDTHS = (32, 16, 8)
#: f32 tile widths with 16-byte reads
VEC_WIDTHS = (32, 16, 64)
#: f32 tiles of the scalar plan's width read 4 floats at once where their rows are 16-byte
#: aligned. Off: on an H100 (bench row 4's [64, 4096, 256] swapped view) the 32-wide tile
#: took 0.2522 ms with them and 0.2409 ms without (copy 0.1873 ms)
VEC_READS = False
#: the wide tile: f32 tiles of `WIDE` rows read 4 floats at once where their rows are
#: 16-byte aligned, ``N * (WIDE + 1) * 4`` bytes of dynamic shared memory (opted in above
#: 48 KiB) up to `WIDE_SMEM_MAX`, which leaves room for two blocks a multiprocessor on an
#: H100 (228 KiB). Bench row 4 on an H100: 0.2268 ms (66.5 KiB a block), the scalar 32-row
#: tile 0.2409. Preferred over the scalar plan where it applies (`WIDE_TILES`)
WIDE = 64
WIDE_TILES = True
WIDE_SMEM_MAX = 100 * 1024
#: the tile kernels' static shared memory for a width: part[256], mean_s[TC], rstd_s[TC]
_TILE_STATIC = {64: (TILE_THREADS + 2 * 64) * 4}
#: leading dims the kernels index (more, after merging, are copied contiguous first)
MAX_LEAD = 4


def ln_kernel_names():
    """Every entry point of `LN_SOURCE`."""
    return ([f"ember_ln_rows_{t}_{m}_{s}" for t in KERNEL_DTYPES.values() for m in "wb"
             for s in "sg"] +
            [f"ember_ln_tile_{t}_{tc}" for t in KERNEL_DTYPES.values() for tc in TILE_WIDTHS] +
            [f"ember_ln_tile_f32_{tc}v" for tc in VEC_WIDTHS])


def layout(shape, strides, ndim):
    """``(N, sn, lead)`` of an input of ``shape`` and element ``strides`` normalized over
    its last ``ndim`` dims: the normalized dims as one axis (N values, stride sn) and the
    leading dims as at most `MAX_LEAD` ``(size, stride)`` pairs in logical order (size-1
    dims dropped, dims adjacent in memory merged); None when the normalized dims do not
    merge into one axis or more leading dims remain (the input is copied first)."""
    k = len(shape) - ndim
    norm = [(n, s) for n, s in zip(shape[k:], strides[k:]) if n != 1]
    N = 1
    for n, _ in norm:
        N *= n
    for (_, s0), (n1, s1) in zip(norm, norm[1:]):
        if s0 != s1 * n1:
            return None
    sn = norm[-1][1] if norm else 1
    lead = []
    for n, s in zip(shape[:k], strides[:k]):
        if n == 1:
            continue
        if lead and lead[-1][1] == s * n:
            lead[-1] = (lead[-1][0] * n, s)
        else:
            lead.append((n, s))
    if len(lead) > MAX_LEAD:
        return None
    return N, sn, tuple(lead)


def plan(N, sn, lead, itemsize):
    """``(kernel suffix, grid, block, shared bytes, lane dim)`` for `layout`'s result, the
    compute dtype ``itemsize`` bytes wide (4 or 8); the lane dim indexes the leading dims
    padded to four (-1 for row kernels). None: a strided normalized axis with a unit-stride
    leading dim whose tile would not fit in shared memory (the input is copied first, rather
    than read a value per 32-byte sector)."""
    M = 1
    for n, _ in lead:
        M *= n
    pad = MAX_LEAD - len(lead)
    if sn != 1 and N > 1:
        ld = next((i for i, (n, s) in enumerate(lead) if s == 1), None)
        if ld is not None:
            for tc in TILE_WIDTHS:
                smem = N * (tc + 1) * itemsize
                if smem <= SMEM_LIMIT:
                    ll = lead[ld][0]
                    tiles = -(-ll // tc) * (M // ll)
                    return f"tile_{{}}_{tc}", min(tiles, _GRID_CAP), TILE_THREADS, smem, \
                        ld + pad
            return None     # rows too long for a tile: copied C-contiguous first
    if N <= ROW_WARP_MAX:
        rows = ROW_WARP_BLOCK // 32
        smem = rows * N * itemsize
        st = "s" if smem <= SMEM_LIMIT else "g"
        return f"rows_{{}}_w_{st}", min(-(-M // rows), _GRID_CAP), ROW_WARP_BLOCK, \
            smem if st == "s" else 0, -1
    threads = 256 if N <= 4096 else 512 if N <= 8192 else 1024
    smem = N * itemsize
    st = "s" if smem <= SMEM_LIMIT else "g"
    return f"rows_{{}}_b_{st}", min(M, _GRID_CAP), threads, smem if st == "s" else 0, -1


_F64 = np.dtype(np.float64)
_F32 = np.dtype(np.float32)


def layer_norm_impl(cp, xp):
    """``CUDA_IMPLS["layer_norm"]``: the kernels above for f16/f32/f64 inputs (any other
    dtype: the reference)."""
    from ...kernel.cuda.device import device_info
    from ...ops.nn import _layer_norm_numpy
    kernels = _Kernels(cp, LN_SOURCE)
    plans: dict = {}
    get_device = cp.cuda.runtime.getDevice if cp is not None else None

    def layer_norm(x, *wb, ndim, eps, has_weight, has_bias):
        kd = KERNEL_DTYPES.get(x.dtype)
        if kd is None:
            return _layer_norm_numpy(x, *wb, ndim=ndim, eps=eps, has_weight=has_weight,
                                     has_bias=has_bias, xp=xp)
        y = cp.empty(x.shape, x.dtype)
        if y.size == 0:
            return y
        ct = _F64 if x.dtype == _F64 else _F32
        dev = get_device()
        key = (x.shape, x.strides, x.dtype, ndim, dev)
        p = plans.get(key)
        if p is None:
            if len(plans) > 1024:
                plans.clear()
            p = plans[key] = _plan_for(x, ndim, kd, ct.itemsize,
                                       device_info(dev).smem_optin)
        copy, name, grid, block, smem, dims, ld, alt = p
        if copy:
            x = cp.ascontiguousarray(x)
        elif alt is not None and x.data.ptr % 16 == 0:
            name, grid, smem = alt
        w = b = y
        flags = 0
        if has_weight:
            w = cp.ascontiguousarray(wb[0], dtype=ct)
            flags |= 1
        if has_bias:
            b = cp.ascontiguousarray(wb[-1], dtype=ct)
            flags |= 2
        kernels.launch(name, grid, block, (x, w, b, y), (*dims, f64_bits(eps)), (flags, ld),
                       smem)
        return y
    return layer_norm


def _plan_for(x, ndim, kd, itemsize, smem_optin=SMEM_LIMIT):
    """``(copy first?, kernel name, grid, block, shared bytes, i64 dims, lane dim, alt)``
    for input ``x``; ``alt``: ``(kernel name, grid, shared bytes)`` of the 16-byte-read
    tile to run instead when x's data is 16-byte aligned (checked per call), or None.
    ``smem_optin``: the device's shared memory per block with opting in."""
    sx = element_strides(x)
    lay = None if sx is None else layout(x.shape, sx, ndim)
    how = None if lay is None else plan(*lay, itemsize)
    copy = how is None
    if copy:            # C-contiguous: one leading dim, one normalized axis, row kernels
        lay = layout(x.shape, contiguous_strides(x.shape), ndim)
        how = plan(*lay, itemsize)
    N, sn, lead = lay
    suffix, grid, block, smem, ld = how
    pad = ((1, 0),) * (MAX_LEAD - len(lead)) + lead
    M = 1
    for n, _ in lead:
        M *= n
    name = "ember_ln_" + suffix.format(kd)
    alt = None
    if kd == "f32" and not copy and suffix.startswith("tile") and sn % 4 == 0 and \
            all(s % 4 == 0 for i, (_, s) in enumerate(pad) if i != ld):
        wsmem = N * (WIDE + 1) * 4
        if WIDE_TILES and wsmem <= min(WIDE_SMEM_MAX, smem_optin - _TILE_STATIC[WIDE]):
            ll = pad[ld][0]
            alt = (f"ember_ln_tile_f32_{WIDE}v",
                   min(-(-ll // WIDE) * (M // ll), _GRID_CAP), wsmem)
        elif VEC_READS and int(suffix.rsplit("_", 1)[1]) in VEC_WIDTHS:
            alt = (name + "v", grid, smem)
    return (copy, name, grid, block, smem,
            (M, N, sn, *[n for n, _ in pad], *[s for _, s in pad]), ld, alt)


