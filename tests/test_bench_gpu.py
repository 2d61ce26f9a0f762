"""bench/gpu.py, run end to end on the CPU at tiny sizes (``--device cpu --quick``): the
table and the JSON come out, every contender is measured or reported absent with a reason,
results are checked, and the ember and PyTorch twins of the training rows compute the same
function. (The GPU run itself needs a GPU; these tests check the script's logic.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu.py"
ROWS = ("1", "2", "6", "7", "9")


def _run(*args, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_gpu") / "gpu.json"
    # torch.compile is left out: Inductor's C++ compile takes tens of seconds on a small CPU
    p = _run("--device", "cpu", "--quick", "--rows", ",".join(ROWS), "--skip",
             "torch.compile", "--quiet", "--json", str(out))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return p.stdout, json.loads(out.read_text())


def test_table_has_every_row_the_targets_and_the_smoke_banner(run):
    text, _ = run
    assert "smoke test" in text                     # --quick numbers are never recorded
    for title in ("device-to-device copy", "custom GELU", "per-op overhead",
                  "MLP 784-256-10 training step", "GPT-style model training step"):
        assert title in text
    assert "\ntargets (CPU logic test" in text
    assert "layer norm" not in text                 # row 4 was not asked for
    assert "Python's reference loop" in text.split("(1)")[0]      # the header's host line


def test_json_holds_the_rows_machine_and_targets(run):
    _, res = run
    assert sorted(res["rows"]) == sorted(ROWS)
    m = res["machine"]
    assert m["device"] == "cpu" and m["date"] and m["python"] and m["ember"]
    assert res["quick"] is True
    for num in ROWS:
        row = res["rows"][num]
        assert set(row["order"]) == set(row["results"]) | set(row["absent"])
        # the host's speed after each row's timing, next to the run's start (slow-host
        # processes show in host-bound rows)
        assert row["host_loop_ns"] > 0
        assert any(n.startswith("host: Python's reference loop") for n in row["notes"])
    assert m["host_loop_ns"] > 0
    verdicts = [t for num in ROWS for t in res["rows"][num]["targets"]]
    assert len(verdicts) == 5                       # 2 for GELU, one each for 6, 7, 9
    for t in verdicts:
        assert t["met"] in (True, False) or t["why_not_measured"]


def test_missing_and_skipped_contenders_are_reported_absent_with_a_reason(run):
    _, res = run
    gelu = res["rows"]["2"]
    assert gelu["absent"]["torch.compile"] == "skipped (--skip)"
    assert "CuPy" in gelu["absent"]["numpy ElementwiseKernel"]
    try:
        import jax  # noqa: F401
    except ImportError:
        assert "jax" in gelu["absent"]["jax jit"]
        assert "jax" in res["absent"]


def test_gelu_and_copy_results_are_measured_and_checked(run):
    _, res = run
    pytest.importorskip("torch")
    copy = res["rows"]["1"]["results"]
    assert copy["torch copy_"]["value"] > 0 and not copy["torch copy_"]["wrong"]
    gelu = res["rows"]["2"]["results"]
    for name in ("torch eager", "ember"):
        r = gelu[name]
        assert r["value"] > 0 and r["best_s"] <= r["median_s"]
        assert not r["wrong"] and r["max_abs_err"] < 1e-5
        assert 0 < r["of_copy"]
    ratio = res["rows"]["2"]["targets"][0]["value"]
    assert ratio == pytest.approx(gelu["ember"]["value"] / max(
        c["value"] for c in copy.values()))


def test_overhead_counts_every_op(run):
    _, res = run
    r = res["rows"]["6"]["results"]["ember, each result materialized"]
    assert r["value"] > 0 and not r["wrong"]        # a + b, checked against NumPy


def test_training_twins_compute_the_same_function(run):
    """The PyTorch model gets ember's initial weights: same logits and loss before training
    (a wrong transpose or a mismatched layer would show here)."""
    _, res = run
    pytest.importorskip("torch")
    for num in ("7", "9"):
        r = res["rows"][num]["results"]
        assert r["ember"]["logits0_rel_diff"] < 1e-5
        assert r["ember"]["loss0_rel_diff"] < 1e-5
        assert r["torch eager"]["value"] > 0 and r["ember"]["value"] > 0


def test_bad_arguments_are_refused():
    p = _run("--rows", "2,10", timeout=60)
    assert p.returncode == 2 and "unknown rows [10]" in p.stderr
    p = _run("--skip", "tensorflow", timeout=60)
    assert p.returncode == 2 and "tensorflow" in p.stderr


def test_gpu_profile_events_table_aggregates_by_op_and_shapes():
    """bench/gpu_profile.py's table of CUDA-event spans (the GPU part needs a GPU): spans
    summed per (op or kernel, operands) and per op or kernel, per step, largest first."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu_profile
    finally:
        sys.path.remove(str(ROOT / "bench"))
    marks = [(("op", "matmul", "(4, 3) (3, 2)*"), 0.0, 2.0),
             (("op", "matmul", "(4, 3) (3, 2)*"), 5.0, 9.0),
             (("op", "matmul", "(8, 3) (3, 2)"), 1.0, 2.0),
             (("kernel", "CudaProgram(Elementwise (4, 2))", "(4, 2)"), 0.0, 0.5)]
    text = gpu_profile.events_table(marks, 2, lambda a, b: b - a)
    lines = text.splitlines()
    assert lines[0].startswith("2 timed items a step, 3.750 ms a step")
    assert lines[1].split()[:3] == ["3500.0", "op", "matmul"]     # (2 + 4 + 1) ms / 2 steps
    assert lines[2].split()[:2] == ["250.0", "kernel"]
    by_shape = lines[lines.index(next(x for x in lines if x.startswith("by operand"))) + 1]
    assert by_shape.split()[:4] == ["3000.0", "1.0x", "op", "matmul"] and "(3, 2)*" in by_shape


def test_time_group_results_are_the_interleaved_repeats_not_the_calibration():
    """A contender fast while calibrating alone (a GPU at boost clocks before the others
    ran) is timed by its interleaved repeats; the calibration sample counts only where no
    repeat fitted the budget."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu
    finally:
        sys.path.remove(str(ROOT / "bench"))
    import time as _time

    class Clock:
        """Calls run in 1 ms each, 0.5 ms while ``boost`` lasts."""
        def __init__(self):
            self.boost = True

        def fn(self):
            _time.sleep(0.0005 if self.boost else 0.001)

    ctx = type("Ctx", (), {"target_s": 0.004, "repeat": 3})()
    a, b = Clock(), Clock()

    def b_sync(out):            # b's first call ends the boost, after a calibrated
        a.boost = b.boost = False
    ta = gpu.Timed(a.fn, lambda out: None, None, warmup=1)
    tb = gpu.Timed(b.fn, b_sync, None, warmup=1)
    m = gpu.time_group({"a": ta, "b": tb}, ctx, budget_s=5.0)
    assert m["a"]["repeats"] == m["b"]["repeats"] == 3
    # a calibrated at 0.5 ms a call; its result is the repeats' ~1 ms, as b's
    assert m["a"]["best_s"] > 0.0009 and m["b"]["best_s"] > 0.0009
    # no repeat within the budget: the calibration sample is the result
    c = Clock()
    c.boost = False
    m = gpu.time_group({"c": gpu.Timed(c.fn, lambda out: None, None, warmup=1)}, ctx,
                       budget_s=0.0)
    assert m["c"]["repeats"] == 1 and m["c"]["best_s"] > 0.0009


def test_time_group_freezes_what_first_calls_built_and_watches_the_repeats():
    """What contenders' first calls keep (a compiler's graphs) is frozen before the repeats,
    so full collections during them do not walk it; the `GcWatch` counts the collections of
    the repeats (here one a call), not time_group's own."""
    import gc
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu
    finally:
        sys.path.remove(str(ROOT / "bench"))
    kept, calls = [], [0]

    def fn():
        calls[0] += 1
        if calls[0] == 1:
            kept.extend({"node": i} for i in range(20000))
        elif calls[0] > 3:           # after the first call, warm-up and calibration
            gc.collect()
    ctx = type("Ctx", (), {"target_s": 0.0, "repeat": 2})()
    watch = gpu.GcWatch()
    was_frozen = gc.get_freeze_count()      # (the process's own freeze, restored after)
    gc.unfreeze()
    try:
        m = gpu.time_group({"a": gpu.Timed(fn, lambda out: None, None, warmup=1)}, ctx,
                           budget_s=5.0, gc_watch=watch)
        assert gc.get_freeze_count() >= len(kept) == 20000
    finally:
        gc.unfreeze()
        if was_frozen:
            gc.freeze()
    assert m["a"]["repeats"] == 2 and watch.full == m["a"]["calls"] * 2


def test_a_row_notes_the_gpus_state_while_timed():
    """With a GPU sampler (`gpu_telemetry`), a row keeps the summary of the samples taken
    while its contenders were timed, and notes it."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu
        import gpu_telemetry
    finally:
        sys.path.remove(str(ROOT / "bench"))
    import time as _time
    windows = []

    class Sampler:
        def window(self, t0, t1):
            windows.append((t0, t1))
            return gpu_telemetry.summarize([gpu_telemetry.Sample(t0, 1410, 702.0, 700.0, 4)])
    ctx = type("Ctx", (), {"target_s": 0.002, "repeat": 1, "budget_scale": 1.0,
                           "telemetry": Sampler(), "free": lambda self: None,
                           "host_loop_ns": 10.0,
                           "unavailable": lambda self, family: None,
                           "log": lambda self, s: None})()
    row = gpu.Row(type("C", (), {"sizes": gpu.SIZES["cpu"]})(), 2, "TB/s", True, "a row")
    before = _time.time()
    row.run_group(ctx, [("a", "ember", lambda: gpu.Timed(lambda: None, lambda out: None,
                                                         lambda m: {"value": 1.0},
                                                         warmup=1))], 1.0)
    assert len(windows) == 1 and before <= windows[0][0] <= windows[0][1] <= _time.time()
    assert row.telemetry["slowdowns"] == {"power cap": 1.0}
    assert any(n.startswith("GPU while timed (1 sample): SM clock 1410 MHz; power up to "
                            "702 W of 700 W; power cap in 100% of samples") for n in row.notes)
    assert row.to_json()["telemetry"] == row.telemetry
    assert any(n.startswith("host: Python's reference loop") and n.endswith(
        "(10.0 at the run's start)") for n in row.notes)


def test_the_sampled_gpu_is_the_first_visible_one(monkeypatch):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu
    finally:
        sys.path.remove(str(ROOT / "bench"))
    for env, want in (("", "0"), ("3,1", "3"), ("GPU-8f2a-11,2", "GPU-8f2a-11")):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
        assert gpu._visible_gpu() == want
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu._visible_gpu() == "0"


def test_row2_reports_the_tuned_kernel_variant(monkeypatch):
    """The GELU row names the variant the autotuner left on its kernel (what decided the
    row), read from the CUDA runtime's programs; absent where there is no CUDA runtime."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu as bench
    finally:
        sys.path.remove(str(ROOT / "bench"))
    from ember.kernel.cuda import runtime as cuda_runtime
    from ember.kernel.cuda.tune import CudaVariant

    def program(numel, variant, tuned):
        return type("P", (), {"numel": numel, "variant": variant, "tuned": tuned})()
    fake = type("R", (), {"_programs": {1: program(8, CudaVariant(ept=2), True),
                                        2: program(64, CudaVariant(block=128, ept=4), True),
                                        3: program(16, CudaVariant(), False)}})()
    monkeypatch.setattr(cuda_runtime, "default_runtime", lambda: fake)
    assert bench._cuda_kernel_variant(64) == "block=128 ept=4"
    assert bench._cuda_kernel_variant(16) == "default (untuned)"
    assert bench._cuda_kernel_variant(32) is None


def test_gpu_profile_host_sizes_are_gpt_hosts():
    """``--sizes host``: the GPT of bench/gpt_host.py (one definition, bench/gpu.py's
    HOST_GPT), every other model at its real size."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu_profile
    finally:
        sys.path.remove(str(ROOT / "bench"))
    real, host = gpu_profile.profile_sizes("real"), gpu_profile.profile_sizes("host")
    assert real["gpt"]["d"] == 384 and host["gpt"] == gpu_profile.G.HOST_GPT
    assert host["gpt"]["layers"] == real["gpt"]["layers"]
    assert {k: v for k, v in host.items() if k != "gpt"} == \
        {k: v for k, v in real.items() if k != "gpt"}
