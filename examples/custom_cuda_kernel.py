"""Your own CUDA kernels in ember: a hand-written attention kernel, and a kernel registered
for a registry op that the Cuda backend then runs instead of its own.

ember generates its CUDA kernels from the kernel IR (fused, autotuned). When you know better
-- attention with the whole softmax in one kernel, say -- write CUDA C yourself:

* `ember.kernel.cuda.CustomKernel(source, name)` compiles it with NVRTC (through ember's
  kernel cache, for the GPU at hand) and launches it on CuPy arrays, on the current stream.
  A tensor's ``primitive`` is its CuPy array, so your kernel reads and writes ember tensors.
* `ember.kernel.cuda.register_kernel(op, fn)` makes ``fn`` the Cuda implementation of a
  registry op (here ``sigmoid``): ``fn`` gets the op's operands as CuPy arrays and returns
  the result; on a Fusion(Cuda) device that op is then not fused, so your kernel runs as is.

    python examples/custom_cuda_kernel.py

It needs an NVIDIA GPU, CuPy (``pip install 'ember[cuda12]'`` or ``'ember[cuda13]'``) and
NVRTC; without them it says what is missing and exits.
"""
from __future__ import annotations

import argparse
import math

ATTENTION = r"""
// softmax(q k^T * scale) v for one (batch*head, query) row per block: scores in shared memory,
// a block-wide max and sum, then each thread accumulates output features.
extern "C" __global__ void attention(const float *q, const float *k, const float *v,
                                     float *out, int T, int D, float scale, int causal) {
  extern __shared__ float s[];              // T scores, then 32 partials
  float *red = s + T;
  const int row = blockIdx.x, bh = row / T, i = row % T;
  const float *qi = q + (long long)row * D;
  const float *kb = k + (long long)bh * T * D, *vb = v + (long long)bh * T * D;
  const int n = causal ? i + 1 : T;
  float m = __int_as_float(0xff800000);   // -inf
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    float acc = 0.0f;
    for (int d = 0; d < D; d++) acc += qi[d] * kb[(long long)j * D + d];
    s[j] = acc * scale;
    m = fmaxf(m, s[j]);
  }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
  __syncthreads();
  m = __int_as_float(0xff800000);
  for (int w = 0; w < (blockDim.x + 31) / 32; w++) m = fmaxf(m, red[w]);
  __syncthreads();
  float z = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) { s[j] = __expf(s[j] - m); z += s[j]; }
  for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = z;
  __syncthreads();
  z = 0.0f;
  for (int w = 0; w < (blockDim.x + 31) / 32; w++) z += red[w];
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < n; j++) acc += s[j] * vb[(long long)j * D + d];
    out[(long long)row * D + d] = acc / z;
  }
}
"""

SIGMOID = r"""
extern "C" __global__ void my_sigmoid(const float *x, float *y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = 1.0f / (1.0f + expf(-x[i]));
}
"""


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch-heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dim", type=int, default=64)
    a = p.parse_args(argv)

    import ember as em
    from ember.kernel.cuda import CustomKernel, register_kernel
    from ember.kernel.cuda.runtime import default_runtime

    rt = default_runtime()
    if not rt.available():
        why = rt.why_unavailable()
        print(f"skipped: no CUDA kernels here ({why})")
        return {"skipped": why}
    try:
        dev = em.device("cuda")
    except Exception as e:                # the Cuda backend is missing or broken
        why = f"em.device('cuda') is unavailable: {type(e).__name__}: {e}"
        print(f"skipped: {why}")
        return {"skipped": why}
    import cupy as cp

    # -- 1. a hand-written attention kernel on ember tensors -------------------------------
    BH, T, D = a.batch_heads, a.seq, a.dim
    q, k, v = (em.Tensor.random((BH, T, D), device=dev) for _ in range(3))
    attention = CustomKernel(ATTENTION, "attention")
    out = cp.empty((BH, T, D), cp.float32)
    scale = 1.0 / math.sqrt(D)
    threads = 128
    attention((BH * T,), (threads,),
              (q.primitive, k.primitive, v.primitive, out, cp.int32(T), cp.int32(D),
               cp.float32(scale), cp.int32(1)),
              shared_mem=4 * (T + 32))
    # the same attention from ember's ops (fused and autotuned kernels, cuBLAS matmuls)
    mask = em.tensor([[0.0 if j <= i else -math.inf for j in range(T)] for i in range(T)],
                     device=dev)
    scores = q @ k.swap_dims(1, 2) * scale + mask
    ref = (em.softmax(scores, 2) @ v).primitive
    attn_err = float(cp.abs(out - ref).max())
    print(f"hand-written causal attention [{BH}, {T}, {D}]: max |difference| from ember's "
          f"ops = {attn_err:.2e}")

    # -- 2. a registered kernel for a registry op ------------------------------------------
    sigmoid = CustomKernel(SIGMOID, "my_sigmoid")
    calls = []

    def my_sigmoid(x):
        x = cp.ascontiguousarray(x)
        y = cp.empty_like(x)
        sigmoid(((x.size + 255) // 256,), (256,), (x, y, x.size))
        calls.append(x.shape)
        return y

    x = em.Tensor.random((1000,), device=dev) * 8.0 - 4.0
    with register_kernel("sigmoid", my_sigmoid, dtypes=["float32"]):
        y = x.sigmoid().primitive
    want = 1.0 / (1.0 + cp.exp(-x.primitive.astype(cp.float64)))
    sig_err = float(cp.abs(y - want).max())
    used = len(calls) > 0
    print(f"registered sigmoid kernel {'ran' if used else 'was NOT used by the backend'}; "
          f"max |difference| from float64 = {sig_err:.2e}")
    return {"attention_max_err": attn_err, "sigmoid_max_err": sig_err,
            "registered_kernel_used": used}


if __name__ == "__main__":
    main()
