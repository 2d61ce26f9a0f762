"""``full`` on Cuda as one fill kernel of the value's bit pattern (ember/backend/cuda/ops.py,
`_FullDirect`): its source compiles with NVRTC wherever it is found and the bit patterns it
is given are NumPy's (no GPU needed); on a GPU, every dtype's fill matches NumPy's ``full``
bit for bit."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.backend.cuda import ops as cuda_ops
from ember.kernel.cuda.compiler import default_arch
from tests.kernel_cuda._util import nvrtc_or_skip


def test_fill_source_compiles(tmp_path):
    c = nvrtc_or_skip(tmp_path).build(cuda_ops.FILL_SOURCE, default_arch())
    missing = [f"ember_fill_b{w}" for w in (1, 2, 4, 8)
               if f"ember_fill_b{w}".encode() not in c.binary]
    assert not missing, missing


@pytest.mark.parametrize("d, v", [("f32", 1.0), ("f32", -0.1), ("f64", float("nan")),
                                  ("f16", -2.5), ("bf16", 3.0), ("i64", -7), ("u8", 255),
                                  ("i8", -128), ("bool", True), ("f64", -np.pi)])
def test_fill_bits_are_numpys_full(d, v):
    """What the kernel writes (each element the pattern's low ``itemsize`` bytes) is NumPy's
    full, bit for bit."""
    npd = np.dtype(ml_dtypes.bfloat16) if d == "bf16" else em.dtype.as_dtype(d).np
    bits = cuda_ops.fill_bits(v, npd)
    assert -(1 << 63) <= bits < (1 << 63)                   # a signed 64-bit parameter
    got = np.array([bits], np.int64).view(np.uint64).astype(
        cuda_ops._UINTS[npd.itemsize]).view(npd)
    want = np.full(1, v, npd)
    assert got.tobytes() == want.tobytes(), (d, v)
    assert cuda_ops.fill_bits(300, np.dtype(np.uint8)) is None    # NumPy refuses: CuPy decides


@pytest.mark.skipif(not em.cuda.is_available(), reason=f"cuda: {em.cuda.why_unavailable()}")
@pytest.mark.parametrize("fusion", [False, True], ids=["cuda", "fusion(cuda)"])
def test_full_matches_numpy_bit_for_bit(fusion):
    dev = em.device("cuda", fusion=fusion)
    cases = [("f32", 1.0), ("f32", -0.1), ("f64", np.pi), ("f16", -2.5), ("bf16", 3.0),
             ("i64", -7), ("i32", 2**31 - 1), ("i16", -3), ("i8", -128), ("u8", 255),
             ("bool", True), ("bool", False), ("f32", float("inf")), ("f64", float("nan"))]
    for d, v in cases:
        for shape in ((), (3,), (1000, 7), (0, 4)):
            got = em.full(shape, v, dtype=d, device=dev).numpy()
            npd = np.dtype(ml_dtypes.bfloat16) if d == "bf16" else em.dtype.as_dtype(d).np
            want = np.full(shape, v, dtype=npd)
            assert got.dtype == want.dtype and got.shape == want.shape, (d, v, shape)
            w = 1 if npd == np.bool_ else npd.itemsize
            view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[w]
            np.testing.assert_array_equal(got.view(view), want.view(view), err_msg=f"{d} {v}")
