"""The Cuda backend's ``embedding`` and ``embedding_backward`` (ember/ops/nn.py): a row gather
and an atomic row scatter-add, one directly launched kernel each, where the references on
CuPy (``take``; ``zeros`` and ``cupyx.scatter_add``) took 60-150 µs of host time a call on
the H200 machine -- and a GPT step makes four.

The indices are checked as the references check them (`ember.ops._xp.check_indices`: on
Cuda a check kernel queued on the op's stream, the error raised at the next read); a value
out of range is wrapped into the table meanwhile, as CuPy's ``take`` does, so no access
falls outside it. The gather moves elements as unsigned integers of their size (every dtype
is one of four kernels); the scatter-add sums f32 and f64 rows with ``atomicAdd`` into a
zeroed output (``cudaMemsetAsync``), in an order that varies from run to run, as CuPy's
does. f16 gradients (summed in f32 by the reference), other index dtypes that do not
convert, and empty operands run the references.
"""
from __future__ import annotations

import numpy as np

from .ops import _GRID_CAP, _INDEX_DTYPES, _Kernels, contiguous_of

_BLOCK = 256
_UINT = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_SUMS = {np.dtype(np.float32): ("f32", "float"), np.dtype(np.float64): ("f64", "double")}
_INDEX_C = {"i32": "int", "i64": "long long"}

EMBED_SOURCE = r"""
// row v of the table for index value x: x wrapped into [0, n) (an out-of-range value is
// reported by the op's index check; wrapped, it reads inside the table meanwhile)
__device__ __forceinline__ long long ember_embed_row(long long x, long long n) {
  x %= n;
  return x < 0 ? x + n : x;
}
template <typename T, typename I>
__device__ __forceinline__ void ember_embed_gather(
    const T* __restrict__ w, const I* __restrict__ idx, T* __restrict__ out, long long rows,
    long long d, long long n) {
  const long long total = rows * d, step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const long long r = i / d;
    out[i] = w[ember_embed_row((long long)idx[r], n) * d + (i - r * d)];
  }
}
__device__ __forceinline__ void ember_embed_add(float* a, float v) { atomicAdd(a, v); }
__device__ __forceinline__ void ember_embed_add(double* a, double v) {
#if __CUDA_ARCH__ >= 600
  atomicAdd(a, v);
#else  // (no f64 atomicAdd before sm_60: a compare-and-swap loop)
  unsigned long long* p = (unsigned long long*)a;
  unsigned long long old = *p, seen;
  do {
    seen = old;
    old = atomicCAS(p, seen, __double_as_longlong(v + __longlong_as_double(seen)));
  } while (seen != old);
#endif
}
template <typename F, typename I>
__device__ __forceinline__ void ember_embed_scatter(
    const F* __restrict__ g, const I* __restrict__ idx, F* __restrict__ out, long long rows,
    long long d, long long n) {
  const long long total = rows * d, step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const long long r = i / d;
    ember_embed_add(out + ember_embed_row((long long)idx[r], n) * d + (i - r * d), g[i]);
  }
}
""" + "".join(
    f"""extern "C" __global__ void ember_embed_gather_b{w}_{ik}(
    const {t}* w, const {it}* idx, {t}* out, long long rows, long long d, long long n) {{
  ember_embed_gather<{t}, {it}>(w, idx, out, rows, d, n);
}}
""" for w, t in _UINT.items() for ik, it in _INDEX_C.items()) + "".join(
    f"""extern "C" __global__ void ember_embed_scatter_{fk}_{ik}(
    const {ft}* g, const {it}* idx, {ft}* out, long long rows, long long d, long long n) {{
  ember_embed_scatter<{ft}, {it}>(g, idx, out, rows, d, n);
}}
""" for fk, ft in _SUMS.values() for ik, it in _INDEX_C.items())


def embed_kernel_names() -> list:
    """Every entry point of `EMBED_SOURCE`."""
    return ([f"ember_embed_gather_b{w}_{ik}" for w in _UINT for ik in _INDEX_C] +
            [f"ember_embed_scatter_{fk}_{ik}" for fk, _ in _SUMS.values() for ik in _INDEX_C])


def _grid(total: int) -> int:
    return max(1, min(-(-total // _BLOCK), _GRID_CAP))


def zero(cp, out) -> None:
    """``out`` zeroed on the current stream (``cudaMemsetAsync``: no kernel, no CuPy call)."""
    cp.cuda.runtime.memsetAsync(out.data.ptr, 0, out.nbytes, cp.cuda.get_current_stream().ptr)


def _flat_indices(indices, xp):
    """The indices as a C-contiguous i32 or i64 array and its kernel suffix, or None."""
    ik = _INDEX_DTYPES.get(indices.dtype)
    if ik is None:
        if indices.dtype.kind not in "iu" or indices.dtype.itemsize > 8 or \
                indices.dtype == np.uint64:
            return None
        indices, ik = indices.astype(np.int64), "i64"
    return contiguous_of(xp)(indices).reshape(-1), ik


def embedding_impl(cp, xp):
    """``CUDA_IMPLS["embedding"]``: weight ``[V, D]`` rows at int indices of any shape."""
    from ...ops.nn import _check_indices, _embedding_np
    kernels = _Kernels(cp, EMBED_SOURCE)
    contiguous = contiguous_of(xp)

    def embedding(weight, indices):
        n, d = weight.shape
        flat = _flat_indices(indices, xp)
        if flat is None or weight.itemsize not in _UINT or not indices.size or not d or not n:
            return _embedding_np(weight, indices, xp=xp)
        _check_indices("embedding", indices, n, xp)
        idx, ik = flat
        w = contiguous(weight)
        out = xp.empty(indices.shape + (d,), weight.dtype)
        rows = idx.size
        kernels.launch(f"ember_embed_gather_b{w.itemsize}_{ik}", _grid(rows * d), _BLOCK,
                       (w, idx, out), (rows, d, n))
        return out
    return embedding


def embedding_backward_impl(cp, xp):
    """``CUDA_IMPLS["embedding_backward"]``: rows of g summed into ``[num_weights, D]``."""
    from ...ops.nn import _check_indices, _embedding_backward_np
    kernels = _Kernels(cp, EMBED_SOURCE)
    contiguous = contiguous_of(xp)

    def embedding_backward(g, indices, *, num_weights):
        d = g.shape[-1]
        sums = _SUMS.get(g.dtype)
        flat = _flat_indices(indices, xp)
        if sums is None or flat is None or not indices.size or not d or not num_weights:
            return _embedding_backward_np(g, indices, num_weights, xp=xp)
        _check_indices("embedding_backward", indices, num_weights, xp)
        idx, ik = flat
        rows = contiguous(g)
        out = xp.empty((num_weights, d), g.dtype)
        zero(cp, out)
        n = idx.size
        kernels.launch(f"ember_embed_scatter_{sums[0]}_{ik}", _grid(n * d), _BLOCK,
                       (rows, idx, out), (n, d, num_weights))
        return out
    return embedding_backward
