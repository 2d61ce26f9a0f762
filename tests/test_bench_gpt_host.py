"""bench/gpt_host.py, run briefly: the table and the JSON come out, with both contenders
where PyTorch is installed, and the op counts of ember's GPT step on the Cuda backend's op
set -- which the one-op gradients of linear layers and attention keep to at most 150 a
backward pass (290 as matmul, add and softmax_backward rules, 344 before the matmul
transpose flags)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_gpt_host_runs_and_counts_the_backward_ops(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpt_host
    finally:
        sys.path.remove(str(ROOT / "bench"))
    out = tmp_path / "gpt_host.json"
    assert gpt_host.main(["--steps", "10", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "GPT training step host time" in text and "ember per step" in text
    res = json.loads(out.read_text())
    assert set(res["ms"]["ember"]) == {"forward", "backward", "optimizer", "step"}
    assert all(v > 0 for v in res["ms"]["ember"].values())
    counts = res["ember_per_step"]
    assert counts["ops_optimizer"] == 1                  # AdamW as adam_update_many
    assert 0 < counts["ops_backward"] <= 150, counts
    assert counts["kernel_outputs"] > 0, counts
    try:
        import torch  # noqa: F401
    except ImportError:
        assert "torch eager" not in res["ms"]
    else:
        assert "torch eager" in res["ms"] and "ember / torch" in text
