"""The examples in examples/ run, briefly, and learn: each is run in a fresh interpreter
(one BLAS thread, as the benchmarks) through its ``main(argv)``, and what it returns is
checked against what it should have learned: on the CPU, and with ``--device cuda`` where
``em.device("cuda")`` is usable (skipped, saying why, elsewhere). bench/train_cpu.py gets a
smoke run too."""
from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# Imports an example file (its __main__ block does not run), calls main(argv) and writes the
# JSON-able part of what it returns to the file named by the first argument.
_DRIVER = """
import importlib.util, json, sys
out_path, path, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
spec = importlib.util.spec_from_file_location("example_under_test", path)
mod = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = mod
spec.loader.exec_module(mod)
res = mod.main(argv)
keep = {k: v for k, v in (res or {}).items() if isinstance(v, (int, float, str, list, bool))}
with open(out_path, "w") as f:
    json.dump(keep, f)
"""


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[v] = "1"
    return env


def run_example(name: str, *args: str, tmp_path, timeout: float = 180) -> tuple[dict, str]:
    """``main([...args])`` of examples/<name>.py in a fresh interpreter: (its results, its
    stdout)."""
    out = tmp_path / f"{name}.json"
    r = subprocess.run([sys.executable, "-c", _DRIVER, str(out), str(EXAMPLES / f"{name}.py"),
                        *args], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"{name} failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return json.loads(out.read_text()), r.stdout


def _decreasing(losses, factor=1.0) -> bool:
    return len(losses) >= 2 and all(map(math.isfinite, losses)) and \
        losses[-1] < factor * losses[0]


# The learning examples' quick runs: their arguments, and what each must have learned (the
# same on every device). A check gets (main's results, the stdout, the run's directory).
def _linear_regression_learned(res, out, run_dir):
    assert abs(res["w"] - 3) < 0.05 and abs(res["b"] + 2) < 0.05, res


def _digits_cnn_learned(res, out, run_dir):
    assert _decreasing(res["train_loss"], 0.8), res
    assert _decreasing(res["valid_loss"], 0.8), res
    assert res["valid_accuracy"][-1] > 50.0, res      # percent; chance is 10%
    assert "saved and reloaded the model" in out


def _csv_regression_learned(res, out, run_dir):
    assert _decreasing(res["train_loss"], 0.5), res
    # well below predicting the mean (the variance of y), though not yet at the noise floor
    assert res["valid_loss"][-1] < 0.4 * res["baseline_mse"], res
    assert "read 1000 rows of ('x1', 'x2', 'x3', 'y')" in out


def _custom_loop_learned(res, out, run_dir):
    assert _decreasing(res["train_loss"], 0.8), res
    assert _decreasing(res["valid_loss"], 0.8), res
    assert res["valid_accuracy"][-1] > 0.6, res       # a fraction; chance is 0.1
    assert out.count("valid accuracy") == 3


def _text_transformer_learned(res, out, run_dir):
    assert _decreasing(res["train_loss"], 0.8), res
    assert res["valid_accuracy"][-1] > 65.0, res      # percent; chance is 50%
    assert len(res["valid_accuracy"]) == 4


def _custom_renderer_learned(res, out, run_dir):
    events = [json.loads(line) for line in (run_dir / "run.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "end", kinds
    assert kinds.count("epoch") == 2 and kinds.count("train") == 2 * (10 // 5), kinds
    epochs = [e for e in events if e["event"] == "epoch"]
    assert epochs[1]["train"]["loss"] < epochs[0]["train"]["loss"], epochs
    assert epochs[1]["valid"]["loss"] < epochs[0]["valid"]["loss"], epochs
    assert events[-1]["stopped"] == "finished" and res["stopped"] == "finished"
    steps = [e["step"] for e in events if e["event"] == "train"]
    assert steps == sorted(steps) and steps[-1] == 20, steps


QUICK_RUNS = {
    "linear_regression": ((), _linear_regression_learned),
    "digits_cnn": (("--epochs", "3", "--limit", "500", "--lr", "1e-2", "--renderer", "none"),
                   _digits_cnn_learned),
    "csv_regression": (("--epochs", "6", "--rows", "1000", "--lr", "1e-2", "--renderer",
                        "none"), _csv_regression_learned),
    "custom_loop": (("--epochs", "3", "--limit", "400", "--lr", "3e-3"),
                    _custom_loop_learned),
    "text_transformer": (("--epochs", "4", "--sentences", "2000", "--lr", "5e-3",
                          "--renderer", "none"), _text_transformer_learned),
    "custom_renderer": (("--epochs", "2", "--limit", "320", "--every", "5", "--out",
                         "run.jsonl"), _custom_renderer_learned),
}


def quick_run(name: str, device: str | None = None, *, tmp_path,
              timeout: float = 180) -> tuple[dict, str]:
    """The quick run of a learning example (``QUICK_RUNS``) with ``--device device`` (none:
    the default, the CPU), checked: what it learned, and the device it says it ran on.
    Returns (its results, its stdout)."""
    args, learned = QUICK_RUNS[name]
    if device is not None:
        args = (*args, "--device", device)
    res, out = run_example(name, *args, tmp_path=tmp_path, timeout=timeout)
    learned(res, out, tmp_path)
    on = ("fusion(cuda)", "cuda") if device == "cuda" else ("fusion(ndarray)", "ndarray")
    assert res["device"].startswith(on), res
    return res, out


@functools.cache
def _cuda_unusable() -> str | None:
    """Why ``em.device("cuda")`` is not usable in this process, or None when it is."""
    import ember as em
    from ember.errors import EmberError
    try:
        em.device("cuda")
    except EmberError as e:
        return f"{type(e).__name__}: {e}"
    return None


def test_every_example_is_tested():
    tested = {"linear_regression", "digits_cnn", "csv_regression", "custom_loop",
              "text_transformer", "custom_renderer",
              "custom_cuda_kernel"}     # tested in tests/kernel_cuda/test_custom.py
    assert {p.stem for p in EXAMPLES.glob("*.py")} == tested
    assert set(QUICK_RUNS) == tested - {"custom_cuda_kernel"}


def test_linear_regression_learns(tmp_path):
    quick_run("linear_regression", tmp_path=tmp_path)


def test_linear_regression_runs_as_a_script():
    r = subprocess.run([sys.executable, str(EXAMPLES / "linear_regression.py")], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]          # "w = 2.997 (true 3), b = -2.002 ..."
    w = float(last.split("w = ")[1].split()[0])
    b = float(last.split("b = ")[1].split()[0])
    assert abs(w - 3) < 0.05 and abs(b + 2) < 0.05, last


def test_digits_cnn_runs_as_a_script(tmp_path):
    """The guide, exactly as its docstring tells a reader to run it (briefly)."""
    r = subprocess.run([sys.executable, str(EXAMPLES / "digits_cnn.py"), "--epochs", "1",
                        "--limit", "100", "--renderer", "plain", "--artifact-dir",
                        str(tmp_path / "run")], cwd=tmp_path, env=_env(), capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert "saved the model to" in r.stdout, r.stdout[-3000:]
    assert (tmp_path / "run" / "digits_cnn.safetensors").is_file()
    assert (tmp_path / "run" / "config.json").is_file()
    assert (tmp_path / "run" / "checkpoint").is_dir()


def test_digits_cnn_learns(tmp_path):
    quick_run("digits_cnn", "cpu", tmp_path=tmp_path)


def test_csv_regression_learns(tmp_path):
    quick_run("csv_regression", tmp_path=tmp_path)


def test_custom_loop_learns(tmp_path):
    quick_run("custom_loop", tmp_path=tmp_path)


def test_text_transformer_learns_word_order(tmp_path):
    quick_run("text_transformer", tmp_path=tmp_path)


@pytest.mark.parametrize("name", list(QUICK_RUNS))
def test_example_learns_on_cuda(name, tmp_path):
    """The same quick runs and thresholds with ``--device cuda``: the examples run on either
    device with no change but ``--device``."""
    why = _cuda_unusable()
    if why:
        pytest.skip(f"em.device('cuda') is not usable here: {why}")
    quick_run(name, "cuda", tmp_path=tmp_path, timeout=600)


@pytest.mark.parametrize("name", list(QUICK_RUNS))
def test_example_rejects_an_unknown_device(name):
    """A device that cannot be used ends the example with ember's message on one line and
    exit status 2 (as a bad argument does), not a traceback."""
    r = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), "--device",
                        "nosuchdevice"], cwd=ROOT, env=_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "nosuchdevice" in lines[0], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == "", (r.stdout, r.stderr)


def test_text_transformer_data_needs_word_order():
    """The label is not a function of the bag of words: the same multiset of words occurs
    with both labels (a "not" before or after the sentiment word)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("tt_data", EXAMPLES / "text_transformer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    data = mod.make_sentences(3000, 0)
    labels_by_bag: dict = {}
    for tokens, label in data:
        labels_by_bag.setdefault(tuple(sorted(tokens)), set()).add(label)
        assert 0 < len(tokens) <= mod.MAX_LEN
        assert tokens.count(mod.INDEX["not"]) <= 2
    assert any(len(v) == 2 for v in labels_by_bag.values())
    assert {label for _, label in data} == {0, 1}


def test_custom_renderer_writes_json_lines(tmp_path):
    quick_run("custom_renderer", tmp_path=tmp_path)


def test_custom_renderer_should_stop(tmp_path):
    log = tmp_path / "stop.jsonl"
    res, _ = run_example("custom_renderer", "--epochs", "3", "--max-steps", "7", "--every",
                         "1", "--out", str(log), tmp_path=tmp_path)
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert res["stopped"] == "interrupted" and res["steps"] == 7, res
    assert events[-1] == {**events[-1], "event": "end", "stopped": "interrupted"}
    assert [e["step"] for e in events if e["event"] == "train"] == list(range(1, 8))


def test_bench_train_cpu_smoke(tmp_path):
    """bench/train_cpu.py briefly: ember on Fusion(NdArray) and on NdArray, and PyTorch (when
    installed), train the same models from the same weights on the same batches, so their
    first-epoch losses agree."""
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "train_cpu.py"), "--epochs", "1",
                        "--limit", "256", "--quiet", "--json", str(out)], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    res = json.loads(out.read_text())
    assert set(res["models"]) == {"cnn", "mlp"}
    for model, m in res["models"].items():
        c = m["contenders"]
        for name in ("ember fusion", "ember ndarray", "Learner fusion", "Learner ndarray"):
            assert name in c, (model, name, m["absent"])
        assert c["ember fusion"]["epoch_seconds"][0] > 0
        assert m["ember_fusion_over_ndarray"] > 0
        lf, ln = c["ember fusion"]["epoch_loss"][0], c["ember ndarray"]["epoch_loss"][0]
        assert abs(lf - ln) < 1e-4 * max(1.0, abs(ln)), (model, lf, ln)
        if "torch" in res["absent"]:
            continue
        assert "torch eager" in c, (model, m["absent"])
        assert m["max_logit_diff_same_weights"] < 1e-4
        lt = c["torch eager"]["epoch_loss"][0]
        assert abs(ln - lt) < 1e-3 * max(1.0, abs(lt)), (model, ln, lt)
    assert "s/epoch" in r.stdout and "x torch" in r.stdout and "fusion / ndarray" in r.stdout
