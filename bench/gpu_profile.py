#!/usr/bin/env python
"""Where a GPU training step's time goes: GPU busy time against host time, per framework.

For each model of ``bench/gpu.py``'s training rows (``mlp``, ``lenet``, ``gpt``), ember on
``Autodiff(Fusion(Cuda))`` and PyTorch eager run the same step (forward, cross-entropy,
backward, AdamW) from the same weights. For each contender it reports:

- the wall time per step (synchronized, best of a few runs);
- the GPU busy time per step and the kernels that take it, from ``torch.profiler``'s CUDA
  activity (CUPTI sees every kernel on the device, CuPy's and ember's too);
- for ember, the host time by function from ``cProfile`` (top entries by own time and by
  cumulative time), the host time per op on Fusion and on Cuda (by op, and on Cuda by
  operand shapes: ``{model}-ops.txt``), and the per-step counts of ``em.fusion.stats()``;
- for ember, the time on the stream of each Cuda op and each generated kernel (CUDA events
  recorded around it, by op or kernel and operand shapes; ``*`` marks a non-contiguous
  operand: ``{model}-events.txt``). The GPU profile names every generated kernel
  ``ember_kernel``; this says which is which. An event pair spans the GPU's idle time too
  when the host is behind, so on a host-bound step small items read high.

A step whose wall time is far above its GPU busy time is host-bound: the host path is where
to look. A GPU-bound step (the GPT at its real sizes) hides its host costs: launches wait
for room in the GPU's queue, and the per-op times include the waits. ``--sizes host`` runs
the GPT at the sizes of ``bench/gpt_host.py`` (6 layers, d 32, 2 heads, seq 16, batch 2,
vocab 64), where its GPU work is negligible: the wall time is the host time, and so is each
op's. This is a diagnostic, not a benchmark: its numbers are not targets and are not
recorded as results in BENCHMARKS.md.

    python bench/gpu_profile.py [--models mlp,lenet,gpt] [--steps 20] [--sizes real|host]
                                [--out DIR]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
import gpu as G  # noqa: E402  (bench/gpu.py: models, sizes, data)

em = G.em
np = G.np


def _ember_step(kind: str, sizes: dict):
    from ember import nn, optim
    Mlp, LeNet, Gpt = G.ember_models()
    dev = em.device("cuda").autodiff()
    dev.seed(0)
    model = (Mlp(sizes["mlp"], device=dev) if kind == "mlp" else
             LeNet(device=dev) if kind == "lenet" else Gpt(sizes["gpt"], device=dev))
    ctx = type("Ctx", (), {"sizes": sizes})()
    x_h, y_h = G.training_data(kind, ctx)
    x, y = em.tensor(x_h, device=dev), em.tensor(y_h, device=dev)
    loss_fn, opt = nn.CrossEntropyLoss(), optim.AdamW(lr=G.LR, weight_decay=G.WEIGHT_DECAY)
    holder = {"m": model}

    def step():
        m_ = holder["m"]
        out = m_(x)
        loss = loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        grads = em.GradientsParams.from_grads(loss.backward(), m_)
        holder["m"] = opt.step(G.LR, m_, grads)
    return step, lambda: dev.sync(), model, dev


def _torch_step(kind: str, sizes: dict, ember_model):
    import torch
    F = torch.nn.functional
    Mlp, LeNet, Gpt = G.torch_models(torch)
    net = Mlp(sizes["mlp"]) if kind == "mlp" else LeNet() if kind == "lenet" \
        else Gpt(sizes["gpt"])
    cpu_model = ember_model.to_device(em.device("cpu"))
    G.copy_weights(torch, cpu_model, net)
    net = net.cuda()
    ctx = type("Ctx", (), {"sizes": sizes})()
    x_h, y_h = G.training_data(kind, ctx)
    x, y = torch.from_numpy(x_h).cuda(), torch.from_numpy(y_h).cuda()
    opt = torch.optim.AdamW(net.parameters(), lr=G.LR, weight_decay=G.WEIGHT_DECAY)

    def step():
        opt.zero_grad(set_to_none=True)
        out = net(x)
        F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
        opt.step()
    return step, torch.cuda.synchronize


def _wall_ms(step, sync, steps: int) -> float:
    best = float("inf")
    for _ in range(3):
        sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        best = min(best, (time.perf_counter() - t0) / steps)
    return best * 1e3


def _gpu_kernels(step, sync, steps: int) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        sync()
    by_name: dict = {}
    api: dict = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            d = by_name.setdefault(ev.name, [0, 0.0])
            d[0] += 1
            d[1] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time
        elif ev.name.startswith("cu"):  # CUDA runtime/driver calls, as CUPTI saw them
            d = api.setdefault(ev.name, [0, 0.0])
            d[0] += 1
            d[1] += ev.cpu_time_total
    busy_us = sum(v[1] for v in by_name.values()) / steps
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:25]
    return {"gpu_busy_ms": busy_us / 1e3,
            "kernels_per_step": sum(v[0] for v in by_name.values()) / steps,
            "top": [{"name": k[:110], "calls_per_step": v[0] / steps,
                     "us_per_step": v[1] / steps} for k, v in top],
            "api": [{"name": k[:80], "calls_per_step": v[0] / steps, "us_per_step": v[1] / steps}
                    for k, v in sorted(api.items(), key=lambda kv: -kv[1][1])[:15]]}


def _op_host_times(step, sync, device, steps: int, top: int = 30) -> str:
    """Host time per op on the backend below Autodiff (Fusion) and below that (Cuda), by op
    and by operand shapes: each layer's ``execute`` timed around the call (nested: Fusion's
    includes Cuda's, and the flushes its op caused)."""
    import collections
    layers = [("fusion", device.inner), ("cuda", device.inner.inner)]
    by_op = {n: collections.defaultdict(lambda: [0, 0.0]) for n, _ in layers}
    by_key = collections.defaultdict(lambda: [0, 0.0])
    pc = time.perf_counter

    def shapes(prims):
        return " ".join(str(tuple(p.shape)) if hasattr(p, "shape") else type(p).__name__
                        for p in prims)

    def timed(name, run):
        def execute(op, prims, attrs, meta, dev):
            t = pc()
            try:
                return run(op, prims, attrs, meta, dev)
            finally:
                d = pc() - t
                a = by_op[name][op.name]
                a[0] += 1
                a[1] += d
                if name == "cuda":
                    a = by_key[(op.name, shapes(prims))]
                    a[0] += 1
                    a[1] += d
        return execute

    saved = [(dev, dev._execute) for _, dev in layers]
    for (name, dev), (_, run) in zip(layers, saved):
        dev._execute = timed(name, run)
    try:
        sync()
        t0 = pc()
        for _ in range(steps):
            step()
        sync()
        wall = (pc() - t0) / steps
    finally:
        for dev, run in saved:
            dev._execute = run
    lines = [f"step {wall * 1e3:.3f} ms with the timers on"]
    for name, _ in layers:
        d = by_op[name]
        lines.append(f"{name}: {sum(v[1] for v in d.values()) / steps * 1e3:.3f} ms in "
                     f"{sum(v[0] for v in d.values()) / steps:.0f} calls a step; op, calls "
                     f"a step, us a call, us a step")
        for k, (c, t) in sorted(d.items(), key=lambda kv: -kv[1][1])[:top]:
            lines.append(f"  {k:30s} {c / steps:7.1f} {t / c * 1e6:8.1f} {t / steps * 1e6:9.1f}")
    lines.append("cuda, by operand shapes: op, operands, calls a step, us a call")
    for (k, sh), (c, t) in sorted(by_key.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"  {k:26s} {sh[:72]:72s} {c / steps:6.1f} {t / c * 1e6:8.1f}")
    return "\n".join(lines)


def events_table(marks, steps: int, elapsed_ms, top: int = 45) -> str:
    """The `_op_event_times` report from ``marks`` ``[(key, start, end)]``, ``key`` =
    ``(what, name, operands)``, with ``elapsed_ms(start, end)`` (a GPU-free function of its
    own: tested without a GPU)."""
    import collections
    acc = collections.defaultdict(lambda: [0, 0.0])
    for key, a, b in marks:
        acc[key][0] += 1
        acc[key][1] += elapsed_ms(a, b)
    total = sum(v[1] for v in acc.values()) / steps
    by = collections.defaultdict(float)
    for (what, name, _), (_, t) in acc.items():
        by[(what, name)] += t / steps
    lines = [f"{len(marks) / steps:.0f} timed items a step, {total:.3f} ms a step on the "
             f"stream (events); by op or kernel, us a step:"]
    for (what, name), t in sorted(by.items(), key=lambda kv: -kv[1])[:25]:
        lines.append(f"  {t * 1e3:9.1f}  {what:6s} {name}")
    lines.append("by operand shapes: us a step, calls a step, what, name, operands")
    for (what, name, sh), (c, t) in sorted(acc.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"  {t / steps * 1e3:9.1f} {c / steps:6.1f}x  {what:6s} {name[:44]:44s} "
                     f"{sh[:90]}")
    return "\n".join(lines)


def _op_event_times(step, sync, device, steps: int) -> str:
    """Each Cuda op's and generated kernel's span on the thread's stream (CUDA events),
    aggregated by `events_table`."""
    import cupy as cp
    from ember.kernel.cuda import runtime as kr
    cuda_dev = device.inner.inner
    backend = cuda_dev.backend
    stream = backend.scope(cuda_dev.index).stream
    marks = []

    def shapes(prims):
        return " ".join(f"{tuple(p.shape)}{'' if p.flags.c_contiguous else '*'}"
                        if hasattr(p, "flags") else type(p).__name__ for p in prims[:5])

    def timed(what, name, operands, run, *args):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(stream)
        try:
            return run(*args)
        finally:
            b.record(stream)
            marks.append(((what, name, shapes(operands)), a, b))

    run_op = cuda_dev._execute
    launch = kr.CudaKernelRuntime._launch

    def execute(op, prims, attrs, meta, dev):
        return timed("op", op.name, prims, run_op, op, prims, attrs, meta, dev)

    def _launch(rt, program, inputs, args, outputs, variant=None):
        return timed("kernel", repr(program)[:60], inputs, launch, rt, program, inputs, args,
                     outputs, variant)

    cuda_dev._execute = execute
    kr.CudaKernelRuntime._launch = _launch
    try:
        sync()
        for _ in range(steps):
            step()
        sync()
    finally:
        cuda_dev._execute = run_op
        kr.CudaKernelRuntime._launch = launch
    return events_table(marks, steps, cp.cuda.get_elapsed_time)


def _host_profile(step, sync, steps: int) -> str:
    pr = cProfile.Profile()
    sync()
    pr.enable()
    for _ in range(steps):
        step()
    sync()
    pr.disable()
    out = io.StringIO()
    st = pstats.Stats(pr, stream=out)
    st.sort_stats("tottime").print_stats(35)
    st.sort_stats("cumulative").print_stats(45)
    return out.getvalue()


def profile_sizes(which: str) -> dict:
    """The models' sizes: bench/gpu.py's on the GPU (``real``), or those with the GPT at
    ``gpu.HOST_GPT`` (``host``)."""
    sizes = dict(G.SIZES["cuda"])
    if which == "host":
        sizes["gpt"] = dict(G.HOST_GPT)
    return sizes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,lenet,gpt")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--sizes", choices=("real", "host"), default="real",
                    help="host: the GPT at sizes where its GPU work is negligible")
    ap.add_argument("--out", default="bench/results/profile")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = profile_sizes(args.sizes)
    summary = {}
    for kind in args.models.split(","):
        steps = max(3, args.steps // (5 if kind == "gpt" else 1))
        e_step, e_sync, model, e_dev = _ember_step(kind, sizes)
        t_step, t_sync = _torch_step(kind, sizes, model)
        for s, y in ((e_step, e_sync), (t_step, t_sync)):
            for _ in range(3):
                s()
            y()
        em.fusion.reset_stats() if hasattr(em.fusion, "reset_stats") else None
        before = dict(em.fusion.stats())
        for _ in range(steps):
            e_step()
        e_sync()
        after = dict(em.fusion.stats())
        counts = {k: (after[k] - before.get(k, 0)) / steps for k in after
                  if isinstance(after[k], (int, float))}
        res = {
            "ember_ms": _wall_ms(e_step, e_sync, steps),
            "torch_ms": _wall_ms(t_step, t_sync, steps),
            "ember_gpu": _gpu_kernels(e_step, e_sync, steps),
            "torch_gpu": _gpu_kernels(t_step, t_sync, steps),
            "ember_fusion_counts_per_step": counts,
        }
        (out / f"{kind}-host.txt").write_text(_host_profile(e_step, e_sync, steps))
        (out / f"{kind}-ops.txt").write_text(_op_host_times(e_step, e_sync, e_dev, steps))
        (out / f"{kind}-events.txt").write_text(_op_event_times(e_step, e_sync, e_dev, steps))
        summary[kind] = res
        print(f"{kind}: ember {res['ember_ms']:.3f} ms/step (GPU busy "
              f"{res['ember_gpu']['gpu_busy_ms']:.3f} ms, "
              f"{res['ember_gpu']['kernels_per_step']:.0f} kernels), torch "
              f"{res['torch_ms']:.3f} ms/step (GPU busy {res['torch_gpu']['gpu_busy_ms']:.3f} "
              f"ms, {res['torch_gpu']['kernels_per_step']:.0f} kernels)", flush=True)
        for who in ("ember_gpu", "torch_gpu"):
            print(f"  {who} top kernels:")
            for k in res[who]["top"][:12]:
                print(f"    {k['us_per_step']:9.1f} us  x{k['calls_per_step']:5.1f}  {k['name']}")
            print(f"  {who} host time in CUDA API calls:")
            for k in res[who]["api"][:10]:
                print(f"    {k['us_per_step']:9.1f} us  x{k['calls_per_step']:5.1f}  {k['name']}")
        print(f"  ember fusion counts per step: "
              f"{ {k: round(v, 1) for k, v in counts.items() if v} }")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
