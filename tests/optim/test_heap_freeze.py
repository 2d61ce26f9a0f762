"""The first optimizer step of a process freezes the heap (`ember.heap`); each case runs in a
fresh interpreter, since freezing is process-wide."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = textwrap.dedent("""
    import gc, json, sys
    import ember as em
    from ember import nn, optim
    setting = sys.argv[1]
    if setting == "off-by-call":
        em.set_auto_freeze_heap(False)
    dev = em.device("cpu").autodiff()
    dev.seed(0)
    model = nn.LinearConfig(4, 3).init(dev)
    x = em.tensor([[1.0, 2.0, 3.0, 4.0]], device=dev)
    opt = optim.AdamW(lr=0.1)
    before = gc.get_freeze_count()
    counts = []
    for _ in range(3):
        loss = model(x).sum()
        grads = em.GradientsParams.from_grads(loss.backward(), model)
        model = opt.step(None, model, grads)
        counts.append(gc.get_freeze_count())
    manual = em.freeze_heap() if setting == "manual" else None
    print(json.dumps({"before": before, "after": counts, "manual": manual}))
""")


def _run(setting, env_value=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("EMBER_AUTO_FREEZE_HEAP", None)
    if env_value is not None:
        env["EMBER_AUTO_FREEZE_HEAP"] = env_value
    out = subprocess.run([sys.executable, "-c", _SCRIPT, setting], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    import json
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_first_step_freezes_once():
    r = _run("default")
    assert r["before"] == 0
    first, second, third = r["after"]
    assert first > 1000            # the imports, the model, the optimizer state
    # once per process: later steps freeze nothing more (frozen objects of the first step
    # that died since are freed by reference counting, so the count may only fall)
    assert third <= second <= first


@pytest.mark.parametrize("how", ["env", "call"])
def test_auto_freeze_can_be_turned_off(how):
    r = _run("off-by-call" if how == "call" else "default", "0" if how == "env" else None)
    assert r["before"] == 0 and r["after"] == [0, 0, 0]


def test_freeze_heap_by_hand():
    r = _run("manual", "0")
    assert r["after"] == [0, 0, 0] and r["manual"] > 1000
