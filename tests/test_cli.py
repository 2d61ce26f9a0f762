"""The `ember` command line, the bundled digits, and the packaging that ships them."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
DIGITS_SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"


def _ember(*args, timeout=120):
    """Run `ember ARGS` the way the console script does, in a fresh interpreter."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _section(text, title):
    """The indented lines under a ``title:`` line of `ember info`."""
    lines = text.splitlines()
    i = lines.index(title)
    out = []
    for line in lines[i + 1:]:
        if not line.startswith("  "):
            break
        out.append(line.strip())
    return out


def test_info_lists_ndarray_as_usable_and_cuda_with_a_reason():
    r = _ember("info")
    assert r.returncode == 0, r.stderr
    usable = _section(r.stdout, "usable backends:")
    unusable = _section(r.stdout, "not usable here:")
    assert any(line.split()[0] == "ndarray" for line in usable), r.stdout
    import ember as em
    lines = usable if em.cuda.is_available() else unusable
    cuda = [line for line in lines if line.split()[0] == "cuda"]
    assert cuda and len(cuda[0].split()) > 2, \
        f"cuda should be listed with its devices or a reason:\n{r.stdout}"
    import ml_dtypes
    import ember as em
    for needle in (f"ember {em.__version__}", f"numpy      {np.__version__}",
                   f"ml_dtypes  {ml_dtypes.__version__}", "Python     3.", "CPU "):
        assert needle in r.stdout, (needle, r.stdout)


def test_info_names_the_default_cpu_device(monkeypatch):
    import ember as em
    r = _ember("info")
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("default CPU device:")]
    assert line and f"{em.device('cpu')} (" in line[0], r.stdout
    # without a C compiler: plain NdArray, and why
    monkeypatch.setenv("EMBER_CC", str(ROOT / "no-such-compiler"))
    r = _ember("info")
    assert r.returncode == 0, r.stderr
    assert "default CPU device: ndarray cpu:0 (fusion off: EMBER_CC=" in r.stdout, r.stdout


def test_info_json(capsys):
    from ember.cli.main import main
    assert main(["info", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    by_name = {b["name"]: b for b in rep["backends"]}
    assert by_name["ndarray"]["usable"] and by_name["ndarray"]["reason"] is None
    import ember as em
    if em.cuda.is_available():
        assert by_name["cuda"]["usable"] and "cuda:0" in by_name["cuda"]["detail"]
    else:
        assert not by_name["cuda"]["usable"] and by_name["cuda"]["reason"].strip()
    assert "autodiff(ndarray)" in rep["stacks"]
    assert rep["cpu"]["logical_cpus"] is None or rep["cpu"]["logical_cpus"] >= 1


def test_demo_loss_decreases(tmp_path):
    r = _ember("demo", "--epochs", "3", "--artifact-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr + r.stdout
    losses = [float(m) for m in re.findall(r"^epoch\s+\d+/3\s+train loss\s+([0-9.]+)",
                                           r.stdout, re.M)]
    assert len(losses) == 3, r.stdout
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[0] < np.log(10) and losses[-1] < 0.8 * losses[0], losses
    acc = re.search(r"^validation accuracy: ([0-9.]+)%", r.stdout, re.M)
    assert acc and float(acc.group(1)) > 70.0, r.stdout
    assert "training summary: 3 of 3 epochs" in r.stdout
    assert re.search(r"^  true \d", r.stdout, re.M) and re.search(r"^  pred \d", r.stdout, re.M)
    assert (tmp_path / "summary.txt").exists() and (tmp_path / "checkpoint" / "epoch-3").is_dir()


def test_demo_cnn_reaches_95_percent():
    from ember.cli.demo import train
    h = train(epochs=4, renderer=None, log=None)      # the fast config; the default is 8
    assert len(h["loss"]) == 4
    assert h["val_accuracy"][-1] >= 0.95, h["val_accuracy"]
    assert h["loss"][-1] < 0.3 * h["loss"][0], h["loss"]


def test_cli_usage_errors(capsys):
    from ember.cli.main import main
    assert main([]) == 2                      # no command: help, failure status
    with pytest.raises(SystemExit) as e:
        main(["demo", "--epochs", "0"])
    assert e.value.code == 2
    assert "--epochs must be >= 1" in capsys.readouterr().err


def test_load_digits():
    from ember.datasets import load_digits
    images, labels = load_digits()
    flat, labels2 = load_digits(flatten=True)
    assert images.shape == (1797, 8, 8) and images.dtype == np.float32
    assert flat.shape == (1797, 64) and np.array_equal(flat.reshape(-1, 8, 8), images)
    assert labels.shape == (1797,) and labels.dtype == np.int64
    assert np.array_equal(labels, labels2)
    assert images.min() == 0 and images.max() == 16
    assert np.array_equal(images, np.round(images))          # pixel counts
    counts = np.bincount(labels, minlength=10)
    assert len(counts) == 10 and counts.sum() == 1797 and counts.min() >= 170
    # The first sample is a zero: a ring of ink around an empty centre.
    assert labels[0] == 0 and images[0, 3:5, 3:5].max() == 0 and images[0, 1:7, 1:7].max() > 10


def test_bundled_file_is_the_attributed_one():
    data = ROOT / "ember" / "datasets" / "data"
    assert hashlib.sha256((data / "digits.csv.gz").read_bytes()).hexdigest() == DIGITS_SHA256
    note = (data / "DIGITS_LICENSE.md").read_text()
    assert DIGITS_SHA256 in note and "CC BY 4.0" in note


def test_packaging_ships_the_data_and_the_console_script():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = cfg["tool"]["setuptools"]["package-data"]["ember.datasets"]
    data = ROOT / "ember" / "datasets"
    shipped = {p.relative_to(data).as_posix() for g in globs for p in data.glob(g)}
    assert {"data/digits.csv.gz", "data/DIGITS_LICENSE.md"} <= shipped
    target = cfg["project"]["scripts"]["ember"]
    mod, _, fn = target.partition(":")
    import importlib
    assert callable(getattr(importlib.import_module(mod), fn))
    assert "torch==2.13.0" in cfg["project"]["optional-dependencies"]["test"]


# -- the README's code and the examples stay true ---------------------------------------------
_PRINT_WITH_OUTPUT = re.compile(r"^(\s*)print\((.*)\)\s+#\s*(\S.*?)\s*$")


def _readme_program():
    """The README's ```python blocks as one program, each ``print(...)  # expected`` turned
    into a check of the printed text (a trailing ``...`` makes it a prefix check)."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)
    lines, checks = [], 0
    for block in blocks:
        for line in block.splitlines():
            m = _PRINT_WITH_OUTPUT.match(line)
            if m:
                indent, args, expected = m.groups()
                line = f"{indent}_check({expected!r}, {args})"
                checks += 1
            lines.append(line)
    return "\n".join(lines), checks


def test_readme_examples_run_and_print_what_they_say():
    program, expected_checks = _readme_program()
    assert expected_checks >= 10
    seen = []

    def _check(expected, *args):
        got = " ".join(str(a) for a in args)
        if expected.endswith("..."):
            assert got.startswith(expected[:-3].rstrip()), (expected, got)
        else:
            assert got == expected, (expected, got)
        seen.append(expected)

    exec(compile(program, "README.md", "exec"), {"_check": _check})
    assert len(seen) == expected_checks, "a README print did not run (an expected error " \
                                         "was not raised?)"


def test_example_linear_regression():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    r = subprocess.run([sys.executable, "examples/linear_regression.py"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    m = re.search(r"w = (-?[0-9.]+) .* b = (-?[0-9.]+)", r.stdout)
    assert m and abs(float(m.group(1)) - 3) < 0.05 and abs(float(m.group(2)) + 2) < 0.05, \
        r.stdout


def test_bench_overhead_smoke(tmp_path):
    out = tmp_path / "bench.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    r = subprocess.run([sys.executable, "bench/overhead.py", "--quick", "--repeat", "1",
                        "--json", str(out)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr + r.stdout
    res = json.loads(out.read_text())
    for name in ("numpy", "ember NdArray", "ember Autodiff(NdArray)", "ember Fusion(NdArray)",
                 "ember Autodiff(Fusion(NdArray))"):
        assert res["per_op_us"][name] > 0
    for name in ("ember Autodiff(NdArray)", "ember Autodiff(Fusion(NdArray))"):
        assert res["mlp_steps_per_s"].get(name, 0) > 0, res["absent"]
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    assert ("torch eager" in res["per_op_us"]) == have_torch
    assert ("torch" in res["absent"]) == (not have_torch)
    assert "(a) per-op overhead" in r.stdout and "(b) MLP 784-256-10" in r.stdout
