"""A real process interrupted with SIGINT (Ctrl-C) mid-training saves a checkpoint, and the
same command with --resume finishes the run with no epoch lost."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ember.train import Checkpointer
from ember.train.logger import read_epochs_csv

ROOT = Path(__file__).resolve().parents[2]
EPOCHS = 10


def _cmd(art, *extra):
    return [sys.executable, "-m", "ember.cli", "demo", "--plain", "--epochs", str(EPOCHS),
            "--samples", "2", "--artifact-dir", str(art), *extra]


def _default_sigint():
    """In the child before exec: SIGINT back to its default action, which a runner started
    in the background (``cmd &`` in a script ignores SIGINT) would otherwise pass on."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.skipif(os.name != "posix", reason="SIGINT to a child process")
def test_sigint_then_resume_loses_no_epoch(tmp_path):
    art = tmp_path / "run"
    p = subprocess.Popen(_cmd(art), cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    out = []
    watchdog = threading.Timer(120, p.kill)
    watchdog.start()
    try:
        # wait for the first epoch to end, then press Ctrl-C
        for line in p.stdout:
            out.append(line)
            if re.match(rf"epoch\s+1/{EPOCHS}\s", line):
                p.send_signal(signal.SIGINT)
                break
        rest, err = p.communicate(timeout=120)
    finally:
        watchdog.cancel()
        if p.poll() is None:
            p.kill()
    text = "".join(out) + rest
    assert p.returncode == 130, text + err
    assert "stopping after this step" in err
    assert "--resume" in text and "(interrupted)" in text
    cps = Checkpointer(art / "checkpoint").list()
    assert cps, text
    stopped_at = cps[-1].learner_state()
    assert 1 <= stopped_at["epoch"] < EPOCHS, stopped_at["epoch"]

    r = subprocess.run(_cmd(art, "--resume"), cwd=ROOT, env=_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"resuming from {cps[-1].name}" in r.stdout
    summary = json.loads((art / "summary.json").read_text())
    assert summary["stopped"] == "finished" and summary["epochs_done"] == EPOCHS
    epochs = sorted(int(e) for e in summary["history"]["splits"]["train"]["loss"])
    assert epochs == list(range(1, EPOCHS + 1))
    assert [row["epoch"] for row in read_epochs_csv(art / "train" / "epochs.csv")] == \
        list(range(1, EPOCHS + 1))
    # every epoch's step log is complete: 1438 items in batches of 32 -> 45 steps
    for e in range(1, EPOCHS + 1):
        rows = (art / "train" / f"epoch-{e}" / "loss.csv").read_text().splitlines()
        assert [int(r.split(",")[0]) for r in rows[1:]] == list(range(1, 46)), e
    assert f"after {EPOCHS} epochs" in r.stdout
