#!/usr/bin/env python
"""Host time of a GPT training step, measured on the CPU at tiny sizes (issue 5, row 9).

On the GPU the GPT step of ``bench/gpu.py`` row 9 is host-bound: each op's trip through the
Tensor API, Autodiff, Fusion and the Cuda backend costs more than its kernel. This script
measures that trip without a GPU: the same model (6 layers, d 32, 2 heads, seq 16, batch 2,
vocab 64: arithmetic negligible) trained with AdamW on ``Autodiff(Fusion(StandIn))``, where
``StandIn`` is NdArray listing the Cuda backend's ``fused_ops`` -- what runs as one op on
the GPU runs as one op here, so the ops recorded, planned and dispatched are the GPU
step's -- against PyTorch eager on the CPU with the same model, one thread each, in one
process, interleaved. Per phase (forward with the loss, backward, optimizer step) the 25th
percentile of the step times, in ms, and ember's op counts per step (ops reaching Fusion,
kernels launched, ops on the inner backend, elements the generated kernels write).

    python bench/gpt_host.py [--steps N] [--json PATH]
"""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "EMBER_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import collections  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
import gpu as G  # noqa: E402  (the models, sizes' shape and optimizer settings of row 9)

em = G.em
import numpy as np  # noqa: E402
from ember import nn, optim  # noqa: E402
from ember.backend import Autodiff, Fusion, NdArray  # noqa: E402
from ember.backend.cuda.backend import Cuda  # noqa: E402  (its class attributes only)
from ember.backend.fusion import stream as fusion_stream  # noqa: E402
from ember.backend.fusion.planner import _KernelStep  # noqa: E402

CFG = G.HOST_GPT
PHASES = ("forward", "backward", "optimizer", "step")


class StandIn(NdArray):
    """NdArray running as one op what the Cuda backend runs as one op."""
    fused_ops = frozenset(Cuda.fused_ops)


def _ember(steps):
    dev = Autodiff(Fusion(StandIn(), "c", 0)).device(0)
    dev.seed(0)
    model = G.ember_models()[2](CFG, device=dev)
    ctx = type("Ctx", (), {"sizes": {"gpt": CFG}})()
    xh, yh = G.training_data("gpt", ctx)
    x, y = em.tensor(xh, device=dev), em.tensor(yh, device=dev)
    loss_fn = nn.CrossEntropyLoss()
    opt = optim.AdamW(lr=G.LR, weight_decay=G.WEIGHT_DECAY)
    counts = collections.Counter()
    fdev = dev.inner
    execute = fdev._execute

    def counting(op, prims, attrs, meta, device):
        counts[phase[0]] += 1
        return execute(op, prims, attrs, meta, device)
    phase = ["forward"]
    state = {"m": model}

    def step():
        m = state["m"]
        t0 = time.perf_counter()
        phase[0] = "forward"
        out = m(x)
        loss = loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        t1 = time.perf_counter()
        phase[0] = "backward"
        grads = em.GradientsParams.from_grads(loss.backward(), m)
        t2 = time.perf_counter()
        phase[0] = "optimizer"
        state["m"] = opt.step(G.LR, m, grads)
        dev.sync()
        t3 = time.perf_counter()
        return t1 - t0, t2 - t1, t3 - t2, t3 - t0

    for _ in range(10):
        step()
    fdev._execute = counting
    em.fusion.reset_stats()
    written = [0]
    run_plan = fusion_stream._run

    def counting_run(entry, sub, *a, **k):
        """(the elements the plan's generated kernels write: on the GPU, memory traffic)"""
        for st in entry.steps:
            if isinstance(st[-1], _KernelStep):
                written[0] += sum(math.prod(shape) for _, shape in st[-1].outs)
        return run_plan(entry, sub, *a, **k)
    fusion_stream._run = counting_run
    try:
        step()
    finally:
        fdev._execute = execute
        fusion_stream._run = run_plan
    per_step = {f"ops_{k}": v for k, v in counts.items()}
    st = em.fusion.stats()
    per_step.update(kernels=st["kernels"], inner_ops=st["inner_ops"] + st["eager_ops"],
                    flushes=st["flushes"], kernel_outputs=written[0])
    return step, per_step


def _torch(steps):
    try:
        import torch
    except ImportError as e:
        return None, f"absent ({e})"
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = G.torch_models(torch)[2](CFG)
    ctx = type("Ctx", (), {"sizes": {"gpt": CFG}})()
    xh, yh = G.training_data("gpt", ctx)
    x, y = torch.from_numpy(xh), torch.from_numpy(yh)
    opt = torch.optim.AdamW(model.parameters(), lr=G.LR, weight_decay=G.WEIGHT_DECAY)
    F = torch.nn.functional

    def step():
        t0 = time.perf_counter()
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        return t1 - t0, t2 - t1, t3 - t2, t3 - t0
    for _ in range(10):
        step()
    return step, torch.__version__


def _commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300, help="timed steps each (default 300)")
    ap.add_argument("--json", help="also write the results as JSON")
    args = ap.parse_args(argv)
    if args.steps < 10:
        ap.error("--steps must be at least 10")
    # torch first: its import and model exist before ember's first optimizer step, which
    # freezes the heap (`ember.heap`), as in a program that imports first and trains after
    torch_step, torch_info = _torch(args.steps)
    ember_step, counts = _ember(args.steps)
    times = {"ember": [], "torch eager": []}
    for _ in range(args.steps):            # interleaved: one step each in turn
        times["ember"].append(ember_step())
        if torch_step is not None:
            times["torch eager"].append(torch_step())
    res = {}
    for name, ts in times.items():
        if ts:
            a = np.asarray(ts) * 1e3
            res[name] = {p: float(np.percentile(a[:, i], 25)) for i, p in enumerate(PHASES)}
    lines = [f"GPT training step host time, {CFG} (ms, 25th percentile of {args.steps} "
             f"interleaved steps, one thread)",
             f"ember {em.__version__} (commit {_commit()}) on "
             f"autodiff(fusion(ndarray as the Cuda backend's op set)); torch {torch_info}; "
             f"{platform.processor() or platform.machine()}",
             "  " + "contender".ljust(14) + "".join(p.rjust(11) for p in PHASES)]
    for name, r in res.items():
        lines.append("  " + name.ljust(14) + "".join(f"{r[p]:11.3f}" for p in PHASES))
    if "torch eager" in res:
        lines.append("  " + "ember / torch".ljust(14) + "".join(
            f"{res['ember'][p] / res['torch eager'][p]:10.2f}x" for p in PHASES))
    lines.append("  ember per step: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print("\n".join(lines))
    if args.json:
        out = {"config": CFG, "steps": args.steps, "ms": res, "ember_per_step": counts,
               "commit": _commit(), "torch": torch_info,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "machine": platform.processor() or platform.machine()}
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
