"""The CUDA kernel runtime on a GPU: the C runtime's interface, launch checks with ember
errors, launches queued on CuPy's current stream, autotune (a winner stored in SQLite and
read by a fresh runtime without benchmarking), and the variant JSON. Without a GPU: programs
are keyed by their launch signature as well as their source (kernels whose shapes collapse
alike render the same code but allocate different outputs)."""
from __future__ import annotations

import numpy as np
import pytest

from ember import dtype as dt
from ember.errors import DTypeError, ShapeError
from ember.kernel import ir, mathlib
from ember.kernel.cuda.render import render
from ember.kernel.cuda.runtime import CudaKernelRuntime
from ember.kernel.cuda.tune import CudaTuner, CudaVariant
from ember.kernel.interpret import evaluate
from tests.kernel_cuda._util import assert_same, gpu_or_skip, to_gpu, to_host


def test_variant_json():
    v = CudaVariant(block=512, vec=8, ept=2, tpr=64, by=4)
    assert CudaVariant.from_json(v.to_json()) == v
    assert CudaVariant.from_json(CudaVariant(idx64=True).to_json()).idx64


def test_tuner_store_roundtrip(tmp_path):
    t = CudaTuner(cache_root=tmp_path, enabled=True, budget_s=5.0, tune_after=0)
    cost = {0: 3.0, 128: 1.0, 512: 2.0}
    v = t.choose("cuda|k", [("block", [128, 512]), ("ept", [2])],
                 lambda v: cost[v.block] * (0.5 if v.ept == 2 else 1.0))
    assert v == CudaVariant(block=128, ept=2)
    t2 = CudaTuner(cache_root=tmp_path, enabled=True)
    assert t2.choose("cuda|k", [], lambda v: 1 / 0) == v and t2.stats["db_hits"] == 1


def test_tuner_confirms_the_winner_against_the_default(tmp_path):
    """The descent took each variant's first timing; the winner must beat the default again
    in alternating re-measurements (a default timed slow once -- its first launch, a clock
    change -- no longer loses to a slower variant)."""
    def tuner():
        return CudaTuner(cache_root=tmp_path / str(len(list(tmp_path.iterdir()))),
                         enabled=True, budget_s=5.0, tune_after=0)
    calls = []

    def cold_default(v):              # the default is 1.0, timed 1.5 on its first run
        calls.append(v)
        if v == CudaVariant():
            return 1.5 if calls.count(v) == 1 else 1.0
        return 1.05 if v.block == 128 else 1.2
    t = tuner()
    assert t.choose("cuda|cold", [("block", [128, 512])], cold_default) == CudaVariant()
    assert calls.count(CudaVariant()) == 1 + CudaTuner.CONFIRM
    # a variant that is faster in every timing still wins, and is what the store keeps
    t = tuner()
    v = t.choose("cuda|fast", [("block", [128, 512])],
                 lambda v: 0.6 if v.block == 128 else 1.0)
    assert v == CudaVariant(block=128)
    assert CudaTuner(cache_root=t.cache_root, enabled=True).choose(
        "cuda|fast", [], lambda v: 1 / 0) == v


def test_tuner_duels_a_candidate_displacing_another_winner(tmp_path):
    """A candidate that beats the descent's current winner (not the default) on one timing
    is timed against it again, alternately, before it takes its place: here block 512 is
    timed fast once (a clock drift) and slower after, and block 128 stays."""
    calls = []

    def drifting(v):
        calls.append(v)
        if v == CudaVariant():
            return 2.0
        if v.block == 128:
            return 1.0
        return 0.9 if calls.count(v) == 1 else 1.2
    t = CudaTuner(cache_root=tmp_path, enabled=True, budget_s=5.0, tune_after=0)
    assert t.choose("cuda|drift", [("block", [128, 512])], drifting) == CudaVariant(block=128)
    assert calls.count(CudaVariant(block=512)) == 3         # the descent's, then two in the duel


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    return gpu_or_skip(tmp_path_factory.mktemp("cuda-rt"))


GELU = ir.Elementwise((1 << 20,), (ir.BufferView(dt.f32, (1,)),),
                      (ir.Load(0, dt.f32) * (mathlib.erf(ir.Load(0, dt.f32) * 0.7071067811865476)
                                             + 1.0) * 0.5,), (dt.f32,))


def test_interface(rt):
    assert rt.available() and rt.why_unavailable() == ""
    assert "broadcast_reduce" in rt.features
    prog = rt.compile(GELU)
    assert rt.compile(GELU) is prog
    assert "ember_kernel" in rt.source(prog)
    x = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    (out,) = rt.launch(prog, [to_gpu(x)])
    assert_same(to_host(out, np.float32), evaluate(GELU, [x])[0], "gelu")
    st = rt.stats()
    assert st["launches"] >= 1 and st["programs"] >= 1 and "compiler" in st


def test_launch_checks(rt):
    cp = pytest.importorskip("cupy")
    prog = rt.compile(GELU)
    with pytest.raises(ShapeError):
        rt.launch(prog, [])
    with pytest.raises(DTypeError):
        rt.launch(prog, [cp.zeros(1 << 20, cp.float64)])
    with pytest.raises(ShapeError):            # the view reaches beyond the array
        rt.launch(prog, [cp.zeros(1000, cp.float32)])
    with pytest.raises(TypeError):
        rt.launch(prog, [np.zeros(1 << 20, np.float32)])
    with pytest.raises(ShapeError):
        rt.launch_into(prog, [cp.zeros(1 << 20, cp.float32)], [], [cp.zeros(5, cp.float32)])
    k = ir.Elementwise((4,), (ir.BufferView(dt.f32, (1,)),),
                       (ir.Load(0, dt.f32) + ir.Arg(0, dt.f32),), (dt.f32,), (dt.f32,))
    p = rt.compile(k)
    with pytest.raises(ShapeError):
        rt.launch(p, [cp.zeros(4, cp.float32)], [])


#: a reversed every-other-element copy as [20] and as [20, 1]: one CUDA source, two shapes
FLIP20 = ir.Elementwise((20,), (ir.BufferView(dt.f32, (-2,), 38),), (ir.Load(0, dt.f32),),
                        (dt.f32,))
FLIP20x1 = ir.Elementwise((20, 1), (ir.BufferView(dt.f32, (-2, -2), 38),),
                          (ir.Load(0, dt.f32),), (dt.f32,))


def test_programs_of_one_source_keep_their_shapes_without_a_gpu(monkeypatch):
    """The runtime's program cache, with compiling and loading stubbed: the two kernels
    render alike, yet each gets a program allocating its own output shape (one shared
    program gave the [20, 1] copy a [20] output, which cuBLAS then read as a row)."""
    assert render(FLIP20).source == render(FLIP20x1).source
    monkeypatch.setattr(CudaKernelRuntime, "available", lambda self: True)
    monkeypatch.setattr(CudaKernelRuntime, "_build", lambda self, p, v, rd=None: None)
    rt = CudaKernelRuntime(autotune=False, arch=90)
    a, b = rt.compile(FLIP20), rt.compile(FLIP20x1)
    assert a is not b
    assert a.out_shapes == ((20,),) and b.out_shapes == ((20, 1),)
    assert rt.compile(ir.Elementwise((20, 1), (ir.BufferView(dt.f32, (-2, -2), 38),),
                                     (ir.Load(0, dt.f32),), (dt.f32,))) is b


def test_programs_of_one_source_keep_their_shapes(rt):
    cp = pytest.importorskip("cupy")
    x = np.arange(40, dtype=np.float32)
    for k in (FLIP20, FLIP20x1, FLIP20):
        (out,) = rt.launch(rt.compile(k), [to_gpu(x)])
        assert out.shape == k.shape
        np.testing.assert_array_equal(to_host(out, np.float32).reshape(-1), x[38::-2])


def test_runs_on_the_current_stream(rt):
    cp = pytest.importorskip("cupy")
    k = ir.Elementwise((1 << 22,), (ir.BufferView(dt.f32, (1,)),),
                       (ir.Load(0, dt.f32) + 1.0,), (dt.f32,))
    prog = rt.compile(k)
    x = cp.zeros(1 << 22, cp.float32)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        y = x
        for _ in range(20):
            (y,) = rt.launch(prog, [y])
        ev = s.record()
    ev.synchronize()
    assert float(y[:8].get().max()) == 20.0 and float(y[-8:].get().min()) == 20.0



def test_elementwise_grid_covers_the_array(rt):
    """By default each thread runs its step once (a grid of steps / block blocks, past the
    reductions' cap of `WAVES` waves); ``ept`` steps per thread divide the grid."""
    from ember.kernel.cuda.runtime import WAVES
    from ember.kernel.cuda.device import device_info
    n = 1 << 26
    k = ir.Elementwise((n,), (ir.BufferView(dt.f32, (1,)),),
                       (ir.Load(0, dt.f32) * 2.0 + 1.0,), (dt.f32,))
    prog = rt.compile(k, CudaVariant())
    (ln,) = prog.rendered.launches
    b = rt._build(prog, CudaVariant())
    grid = b.calls[0][2][0]
    assert grid == -(-ln.items // ln.block)
    info = device_info(0)
    assert grid > info.sms * (info.threads_per_sm // ln.block) * WAVES   # (uncapped)
    b4 = rt._build(prog, CudaVariant(ept=4))
    assert b4.calls[0][2][0] == -(-ln.items // (4 * ln.block))
    cp = pytest.importorskip("cupy")
    x = cp.arange(n, dtype=cp.float32)
    for v in (CudaVariant(), CudaVariant(ept=4)):
        out = cp.full(n, cp.nan, cp.float32)
        rt._launch(prog, [x], [], [out], variant=v)
        assert bool(cp.all(out == x * 2 + 1)), v

def test_autotune_stores_the_winner(tmp_path):
    import os
    os.environ.setdefault("EMBER_AUTOTUNE", "1")
    rt = gpu_or_skip(tmp_path, autotune=True)
    rt.tuner.budget_s = 5.0
    x = to_gpu(np.random.default_rng(1).standard_normal(1 << 22).astype(np.float32))
    k = ir.Elementwise((1 << 22,), (ir.BufferView(dt.f32, (1,)),),
                       (ir.Load(0, dt.f32) * 3.0 - 1.0,), (dt.f32,))
    prog = rt.compile(k)
    rt.launch(prog, [x])
    assert not prog.tuned                           # the first launch runs the default
    (out,) = rt.launch(prog, [x])
    assert prog.tuned and prog.tune_key.startswith("cuda|")
    assert rt.tuner.stats["tunings"] == 1 and rt.tuner.stats["benchmarks"] >= 2
    assert float(abs(out - (x * 3.0 - 1.0)).max()) == 0.0
    from ember.kernel.cuda.runtime import CudaKernelRuntime
    from ember.kernel.cuda.tune import CudaTuner as T
    fresh = CudaKernelRuntime(cache_root=tmp_path, autotune=True)
    fresh.tuner = T(cache_root=tmp_path, enabled=True)     # a new process's tuner: no memory
    p2 = fresh.compile(k)
    fresh.launch(p2, [x])
    assert fresh.tuner.stats["db_hits"] == 1 and fresh.tuner.stats["benchmarks"] == 0
    assert p2.variant == prog.variant


def test_reductions_tune_too(tmp_path):
    rt = gpu_or_skip(tmp_path, autotune=True)
    rt.tuner.budget_s = 5.0
    x = np.random.default_rng(2).standard_normal((512, 4096)).astype(np.float32)
    k = ir.Reduce((512, 4096), 1, (ir.BufferView(dt.f32, (4096, 1)),), ir.Load(0, dt.f32),
                  "max", ir.Acc(dt.f32), dt.f32)
    prog = rt.compile(k)
    rt.launch(prog, [to_gpu(x)])
    (out,) = rt.launch(prog, [to_gpu(x)])             # tuned on the second launch
    assert prog.tuned and rt.tuner.stats["tunings"] == 1
    assert_same(to_host(out, np.float32), evaluate(k, [x])[0], "tuned max")


def test_cupy_launch_path_gives_the_same_results(tmp_path):
    """Launches through CuPy's Function call (the fallback of the direct cuLaunchKernel
    path): scalar args, the aligned flag and a split reduction's scratch all arrive."""
    from ember.kernel.cuda.runtime import CudaKernelRuntime
    gpu_or_skip(tmp_path)
    direct = CudaKernelRuntime(cache_root=tmp_path, autotune=False)
    viacupy = CudaKernelRuntime(cache_root=tmp_path, autotune=False)
    viacupy._direct = None
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1 << 16).astype(np.float32)
    ew = ir.Elementwise((1 << 16,), (ir.BufferView(dt.f32, (1,)),),
                        (ir.Load(0, dt.f32) * ir.Arg(0, dt.f32) + ir.cast(ir.Arg(1, dt.i64),
                                                                       dt.f32),),
                        (dt.f32,), (dt.f32, dt.i64))
    red = ir.Reduce((2, 1 << 16), 1, (ir.BufferView(dt.f32, (0, 1)),), ir.Load(0, dt.f32),
                    "max", ir.Acc(dt.f32) + ir.Arg(0, dt.f32), dt.f32, (dt.f32,))
    for k, args in ((ew, [0.5, -3]), (red, [2.0])):
        want = evaluate(k, [x], args)[0]
        for rt in (direct, viacupy):
            (out,) = rt.launch(rt.compile(k), [to_gpu(x)], args)
            got = to_host(out, np.float32)
            assert_same(got, want.reshape(got.shape), f"{type(k).__name__} direct="
                        f"{rt._direct is not None}")
    assert viacupy.compile(red).rendered.has_scratch
