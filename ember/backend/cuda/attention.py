"""The Cuda backend's attention: the registry primitive ``attention`` (ember/ops/attention.py)
as two cuBLAS products around one kernel of ember's own.

1. ``scores = q @ k^T`` through ember's cuBLAS matmul (`matmul.CublasMatmul`: k is read
   transposed where it lies), a C-contiguous ``[M, Lk]`` array (``M``: the leading dims
   times ``Lq``);
2. `ATTN_SOURCE`, launched directly (ember's NVRTC runtime, `ops._Kernels`): each row of the
   scores overwritten, in place, with its weights -- ``x = s * scale``, keys ``j > i +
   offset`` hidden when causal (query ``i = row % Lq``; a hidden score is never read and
   takes the lowest finite value), ``m = max(x)``, ``e = exp(x - m)``, ``e / sum(e)``;
3. ``out = weights @ v`` through cuBLAS.

Rows of up to 1024 keys take a warp each (8 rows a block), each lane holding its ``NPL``
values (keys ``lane + 32 u``) in registers: one read and one write of the scores. Rows of
up to 8192 keys take a block of 512 threads, ``NPL`` of 4, 8 or 16 a thread; longer rows a
block of 1024 threads that reads the row again for each pass (``NPL`` 0). The max and the
sum are butterfly reductions over the warp (then over the block's warps, in order, through
shared memory): results agree with the reference's within a few ulps (NumPy sums pairwise),
not bit for bit. The arithmetic is the reference's, in f32 for f32 and f16 (f16 inputs are
computed as f32 and the outputs rounded once; bf16 arrives as f32: `Cuda._runner` upcasts
it) and in f64 for f64; ember's NVRTC options include ``--fmad=false``, so ``s * scale`` and
``x - m`` round as NumPy's do.

Fusion(Cuda) runs the op here because ``Cuda.fused_ops`` names it (remove the name there
to have Fusion fuse the decomposition instead).

Its derivative, the primitive ``attention_backward`` (`attention_backward_impl`), runs here
too: ``dV = P^T dO`` and ``dP = dO V^T`` through cuBLAS, then ``dS = P (dP - sum(dP P)) *
scale`` as one reduce-then-broadcast kernel of ember's renderer (`softmax_backward_kernel`:
the kernel Fusion generates for the decomposition's softmax_backward and scale, built here
directly and launched on the kernel runtime), then ``dQ = dS K`` and ``dK = dS^T Q``
through cuBLAS: one op a layer where the Tensor ops took six, each dispatched through the
Tensor API, Autodiff and Fusion on a host-bound training step.
"""
from __future__ import annotations

import numpy as np

from ... import dtype as dt
from ...kernel import ir
from .matmul import layout
from .ops import _GRID_CAP, _KERNEL_HELPERS, _Kernels, contiguous_of, copies, f64_bits

ATTN_SOURCE = _KERNEL_HELPERS + r"""
template <typename F> __device__ __forceinline__ F ember_attn_lowest();
template <> __device__ __forceinline__ float ember_attn_lowest<float>() {
  return __uint_as_float(0xff7fffffu);                       // -3.4028235e38
}
template <> __device__ __forceinline__ double ember_attn_lowest<double>() {
  return __longlong_as_double((long long)0xffefffffffffffffull);
}

// the max of v over the group, NaN propagating: a warp's butterfly, then (BLOCK) the
// warps' maxima in order through ``sh``
template <bool BLOCK, typename F>
__device__ __forceinline__ F ember_attn_group_max(F v, double* sh) {
  for (int o = 16; o > 0; o >>= 1) v = ember_nanmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (BLOCK) {
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = (double)v;
    __syncthreads();
    v = (F)sh[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) v = ember_nanmax(v, (F)sh[w]);
    __syncthreads();
  }
  return v;
}

// Row r of s [M, Lk] (C-contiguous) becomes softmax(s * scale, keys j > r % Lq + offset
// hidden when causal), in place, by a group of G threads: a warp (BLOCK false: blockDim.x
// / 32 rows a block) or the block (BLOCK true: a row a block). NPL > 0: each thread keeps
// keys lane + u * G (u < NPL) in registers; NPL == 0: each pass reads the row again.
template <typename F, int NPL, bool BLOCK>
__device__ __forceinline__ void ember_attn_rows(
    F* __restrict__ s, ember_i64 M, ember_i64 Lq, ember_i64 Lk, ember_i64 offset,
    ember_i64 scale_bits, int causal) {
  __shared__ double sh[32];
  const ember_i64 per = BLOCK ? 1 : blockDim.x >> 5;          // rows a block
  const ember_i64 G = BLOCK ? blockDim.x : 32;
  const ember_i64 lane = BLOCK ? threadIdx.x : threadIdx.x & 31;
  const ember_i64 step = (ember_i64)gridDim.x * per;
  ember_i64 r = (ember_i64)blockIdx.x * per + (BLOCK ? 0 : threadIdx.x >> 5);
  const F scale = (F)__longlong_as_double(scale_bits);
  const F fill = ember_attn_lowest<F>();
  for (; r < M; r += step) {                 // (uniform over each warp / block)
    F* sr = s + r * Lk;
    const ember_i64 last = causal ? r % Lq + offset : Lk;   // keys j <= last are seen
    F x[NPL > 0 ? NPL : 1];
    F m = ember_neg_inf<F>();
    if (NPL > 0) {
#pragma unroll
      for (int u = 0; u < NPL; ++u) {
        const ember_i64 j = lane + (ember_i64)u * G;
        x[u] = (j < Lk && j <= last) ? sr[j] * scale : fill;
        if (j < Lk) m = ember_nanmax(m, x[u]);
      }
    } else {
      for (ember_i64 j = lane; j < Lk; j += G) m = ember_nanmax(m, j <= last ? sr[j] * scale
                                                                              : fill);
    }
    m = ember_attn_group_max<BLOCK>(m, sh);
    F t = (F)0;
    if (NPL > 0) {
#pragma unroll
      for (int u = 0; u < NPL; ++u) {
        if (lane + (ember_i64)u * G < Lk) {
          x[u] = ember_exp(x[u] - m);
          t += x[u];
        }
      }
    } else {
      for (ember_i64 j = lane; j < Lk; j += G) t += ember_exp((j <= last ? sr[j] * scale
                                                                          : fill) - m);
    }
    t = BLOCK ? ember_block_sum(t, sh) : ember_warp_sum(t);
    if (NPL > 0) {
#pragma unroll
      for (int u = 0; u < NPL; ++u) {
        const ember_i64 j = lane + (ember_i64)u * G;
        if (j < Lk) sr[j] = x[u] / t;
      }
    } else {
      for (ember_i64 j = lane; j < Lk; j += G)
        sr[j] = ember_exp((j <= last ? sr[j] * scale : fill) - m) / t;
    }
  }
}

#define EMBER_ATTN(TN, F, MODE, NPL, BLOCK, BOUND)                                        \
  extern "C" __global__ void __launch_bounds__(BOUND) ember_attn_##TN##_##MODE##NPL(      \
      F* s, ember_i64 M, ember_i64 Lq, ember_i64 Lk, ember_i64 offset,                     \
      ember_i64 scale_bits, int causal) {                                                  \
    ember_attn_rows<F, NPL, BLOCK>(s, M, Lq, Lk, offset, scale_bits, causal);             \
  }
#define EMBER_ATTN_ALL(TN, F)                                                              \
  EMBER_ATTN(TN, F, w, 1, false, 256)                                                      \
  EMBER_ATTN(TN, F, w, 2, false, 256)                                                      \
  EMBER_ATTN(TN, F, w, 4, false, 256)                                                      \
  EMBER_ATTN(TN, F, w, 8, false, 256)                                                      \
  EMBER_ATTN(TN, F, w, 16, false, 256)                                                     \
  EMBER_ATTN(TN, F, w, 32, false, 256)                                                     \
  EMBER_ATTN(TN, F, b, 4, true, 512)                                                       \
  EMBER_ATTN(TN, F, b, 8, true, 512)                                                       \
  EMBER_ATTN(TN, F, b, 16, true, 512)                                                      \
  EMBER_ATTN(TN, F, b, 0, true, 1024)

EMBER_ATTN_ALL(f32, float)
EMBER_ATTN_ALL(f64, double)
"""

#: values a lane keeps in registers, rows of a warp each (up to 32 * 32 = 1024 keys)
WARP_NPL = (1, 2, 4, 8, 16, 32)
WARP_BLOCK = 256
#: values a thread keeps, rows of a block of `BLOCK_THREADS` each (up to 8192 keys)
BLOCK_NPL = (4, 8, 16)
BLOCK_THREADS = 512
#: longer rows: a block of this many threads reading the row again for each pass
STREAM_THREADS = 1024
_KD = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_F16 = np.dtype(np.float16)


def attn_kernel_names():
    """Every entry point of `ATTN_SOURCE`."""
    return [f"ember_attn_{t}_{m}" for t in _KD.values() for m in
            [f"w{n}" for n in WARP_NPL] + [f"b{n}" for n in BLOCK_NPL] + ["b0"]]


def plan(M, Lk):
    """``(kernel suffix, npl, grid, block)`` for ``M`` rows of ``Lk`` keys (both > 0)."""
    for n in WARP_NPL:
        if 32 * n >= Lk:
            rows = WARP_BLOCK // 32
            return f"w{n}", n, min(-(-M // rows), _GRID_CAP), WARP_BLOCK
    for n in BLOCK_NPL:
        if BLOCK_THREADS * n >= Lk:
            return f"b{n}", n, min(M, _GRID_CAP), BLOCK_THREADS
    return "b0", 0, min(M, _GRID_CAP), STREAM_THREADS


def split_heads(contiguous, arrays, heads, xp) -> list:
    """Arrays ``[..., L, H*D]`` as C-contiguous ``[..., H, L, D]`` (cuBLAS takes one batch
    stride: the split views are copied, one kernel for those of one layout)."""
    from ...ops.attention import split_np
    return copies(contiguous, [split_np(a, heads, xp) for a in arrays])


def split_packed(contiguous, a, heads):
    """A packed ``[..., L, 3*H*D]`` (q, k, v its column blocks) as one C-contiguous
    ``[3, ..., H, L, D]``: the three split heads by one copy, q, k, v its first index."""
    s = a.shape
    nb = len(s) - 2                                  # batch dims
    a5 = a.reshape(s[:-1] + (3, heads, s[-1] // (3 * heads)))     # [..., L, 3, H, D]
    return contiguous(a5.transpose((nb + 1,) + tuple(range(nb)) + (nb + 2, nb, nb + 3)))


def merge_heads(contiguous, a):
    """``[..., H, L, D]`` as ``[..., L, H*D]``: one copy (`StridedCopy`)."""
    sh = a.shape
    return contiguous(a.swapaxes(-2, -3)).reshape(sh[:-3] + (sh[-2], sh[-3] * sh[-1]))


def attention_impl(cp, xp):
    """``CUDA_IMPLS["attention"]``: the products on cuBLAS (``xp.matmul``) and the kernel
    above for f16 (as f32), f32 and f64; any other dtype runs the reference."""
    from ...ops.attention import _numpy as reference
    from ...ops.attention import unpack_np
    kernels = _Kernels(cp, ATTN_SOURCE)
    contiguous = contiguous_of(xp)

    def attention(q, k, v, *, scale, causal, offset, heads=0, packed=False):
        if packed:                    # q = k = v: [..., L, 3*H*D], read as three column blocks
            if heads and (q.dtype == _F16 or q.dtype in _KD):
                qkv = split_packed(contiguous, q.astype(np.float32) if q.dtype == _F16 else q,
                                   heads)
                out, s = attention(qkv[0], qkv[1], qkv[2], scale=scale, causal=causal,
                                   offset=offset)
                return merge_heads(contiguous, out), s
            q, k, v = unpack_np(q, xp)
        if q.dtype == _F16:           # computed in f32; the outputs are rounded to f16 once
            q, k, v = (a.astype(np.float32) for a in (q, k, v))   # (by `Cuda._runner`)
        kd = _KD.get(q.dtype)
        if kd is None or k.dtype != q.dtype or v.dtype != q.dtype:
            return reference(q, k, v, scale=scale, causal=causal, offset=offset, heads=heads,
                             xp=xp)
        if heads:
            out, s = attention(*split_heads(contiguous, (q, k, v), heads, xp), scale=scale,
                               causal=causal, offset=offset)
            return merge_heads(contiguous, out), s
        s = xp.matmul(q, k.swapaxes(-1, -2))         # C-contiguous [..., Lq, Lk]
        lq, lk = s.shape[-2], s.shape[-1]
        M = s.size // lk if lk else 0
        if M:
            suffix, _, grid, block = plan(M, lk)
            kernels.launch(f"ember_attn_{kd}_{suffix}", grid, block, (s,),
                           (M, lq, lk, int(offset), f64_bits(scale)), (int(bool(causal)),))
        return xp.matmul(s, v), s
    return attention


# -- attention_backward ----------------------------------------------------------------------
_IR_DT = {np.dtype(np.float32): dt.float32, np.dtype(np.float64): dt.float64}


def softmax_backward_kernel(groups: int, lq: int, lk: int, p_strides: tuple, dtype,
                            scale: float, causal: bool, offset: int) -> ir.Reduce:
    """The kernel ``dS[b, i, j] = (dP - sum_j(dP P)) * P * scale`` over ``[groups, lq, lk]``
    (``dtype``: f32 or f64, the compute dtype), with ``dS = 0`` where key ``j`` is hidden
    from query ``i`` (``j > i + offset``) when causal with a negative offset (the queries
    that see no key; elsewhere a hidden key has ``P = 0``). Input 0 is ``dP``, C-contiguous;
    input 1 is ``P``, of element strides ``p_strides``. The operations and their order are
    the reference's (`ember.ops.attention._bwd_numpy`)."""
    d = _IR_DT[np.dtype(dtype)]
    dp, p = ir.Load(0, d), ir.Load(1, d)
    value = (dp - ir.Acc(d)) * p * ir.const(float(scale), d)
    if causal and offset < 0:
        hidden = ir.cmp("gt", ir.Index(2), ir.Index(1) + ir.Const(int(offset), dt.int64))
        value = ir.select(hidden, ir.const(0.0, d), value)
    views = (ir.BufferView(d, (lq * lk, lk, 1)), ir.BufferView(d, tuple(p_strides)))
    return ir.Reduce((groups, lq, lk), 2, views, dp * p, "sum", value, d, broadcast=True)


def attention_backward_impl(cp, xp):
    """``CUDA_IMPLS["attention_backward"]``: the products on cuBLAS (``xp.matmul``), ``dS``
    as `softmax_backward_kernel` on the kernel runtime (``xp.ember_kernel_runtime()``), for
    f16 (as f32), f32 and f64; any other dtype, or no kernel runtime, runs the reference."""
    from ...ops.attention import _bwd_numpy as reference
    from ...ops.attention import unpack_np
    runtime = getattr(xp, "ember_kernel_runtime", None)
    contiguous = contiguous_of(xp)
    programs: dict = {}

    def softmax_backward(rt, dp, p, scale, causal, offset):
        lq, lk = dp.shape[-2], dp.shape[-1]
        groups = dp.size // (lq * lk)
        p = p.reshape(groups, lq, lk) if p.flags.c_contiguous else \
            contiguous(p).reshape(groups, lq, lk)
        item = p.itemsize
        key = (groups, lq, lk, p.strides, dp.dtype, scale, causal, offset)
        prog = programs.get(key)
        if prog is None:
            if len(programs) > 256:
                programs.clear()
            prog = programs[key] = rt.compile(softmax_backward_kernel(
                groups, lq, lk, tuple(s // item for s in p.strides), dp.dtype, scale, causal,
                offset))
        (ds,) = rt.launch(prog, (dp.reshape(groups, lq, lk), p), ())
        return ds.reshape(dp.shape)

    def attention_backward(g, q, k, v, p, *, scale, causal, offset, heads=0, packed=False):
        if packed:                    # one gradient [..., L, 3*H*D] of the packed q = k = v
            if heads and kernel_path(g, q, q, q, p):
                return (packed_heads(g, q, p, scale, causal, offset, heads),)
            q, k, v = unpack_np(q, xp)
            grads = attention_backward(g, q, k, v, p, scale=scale, causal=causal,
                                       offset=offset, heads=heads)
            return (xp.concatenate(grads, axis=-1),)
        if not kernel_path(g, q, k, v, p):
            return reference(g, q, k, v, p, scale=scale, causal=causal, offset=offset,
                             heads=heads, xp=xp)
        if q.dtype == _F16:           # computed in f32; the outputs are rounded to f16 once
            g, q, k, v, p = (a.astype(np.float32) for a in (g, q, k, v, p))  # (`_runner`)
        if heads:
            grads = attention_backward(*split_heads(contiguous, (g, q, k, v), heads, xp), p,
                                       scale=scale, causal=causal, offset=offset)
            return tuple(merge_heads(contiguous, d) for d in grads)
        return grads_into(g, q, k, v, p, scale, causal, offset, None)

    def kernel_path(g, q, k, v, p):
        """Whether the products and the kernel take these operands (else the reference)."""
        if runtime is None or runtime() is None:
            return False
        if q.dtype == _F16:           # (all five computed in f32)
            return True
        return _KD.get(q.dtype) is not None and all(a.dtype == q.dtype for a in (g, k, v, p))

    def grads_into(g, q, k, v, p, scale, causal, offset, out):
        """dq, dk, dv of one head layout; ``out``: a C-contiguous ``[3, *q.shape]`` buffer to
        write them into (dq, dk, dv in that order), else new arrays."""
        rt = runtime()
        if g.ndim > 2 and layout(g.shape, g.strides, g.itemsize, g.shape[:-2]) is None:
            g = contiguous(g)         # (read by two products: copied once, not by each)
        o = (None, None, None) if out is None else (out[0], out[1], out[2])
        dv = xp.matmul(p.swapaxes(-1, -2), g, out=o[2])
        dp = xp.matmul(g, v.swapaxes(-1, -2))        # C-contiguous [..., Lq, Lk]
        ds = softmax_backward(rt, dp, p, float(scale), bool(causal), int(offset)) \
            if dp.size else dp
        return (xp.matmul(ds, k, out=o[0]), xp.matmul(ds.swapaxes(-1, -2), q, out=o[1]), dv)

    def packed_heads(g, a, p, scale, causal, offset, heads):
        """The gradient ``[..., L, 3*H*D]`` of the packed ``a`` of heads ``H``: q, k, v
        split by one copy (`split_packed`), dq, dk, dv written into one ``[3, ..., H, L, D]``
        buffer, merged and packed by one copy (where three head merges and a concatenation
        would each pass over them)."""
        if a.dtype == _F16:
            g, a, p = (x.astype(np.float32) for x in (g, a, p))
        (gh,) = split_heads(contiguous, (g,), heads, xp)
        qkv = split_packed(contiguous, a, heads)
        shape = gh.shape                             # [..., H, L, D], dq's = dk's = dv's
        buf = cp.ndarray((3,) + shape, gh.dtype)
        grads_into(gh, qkv[0], qkv[1], qkv[2], p, scale, causal, offset, buf)
        nb = len(shape) - 3                          # batch dims
        perm = tuple(range(1, nb + 1)) + (nb + 2, 0, nb + 1, nb + 3)   # [..., L, 3, H, D]
        h, length, d = shape[-3:]
        return contiguous(buf.transpose(perm)).reshape(shape[:-3] + (length, 3 * h * d))
    return attention_backward
