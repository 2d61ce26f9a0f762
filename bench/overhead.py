#!/usr/bin/env python
"""ember's overhead against its peers, measured in one process (DESIGN.md §7).

(a) per-op overhead: ``a + b`` on 4-element f32 tensors, in µs per op (best of several
    ``timeit`` repeats), for ember NdArray and Autodiff(NdArray) (``b`` requires grad) --
    and the same on Fusion(NdArray), ``em.device("cpu")``, where an op that small runs at
    once on NdArray -- against NumPy and PyTorch CPU eager (plain, and with
    ``requires_grad``);
(b) training step of a 784-256-10 MLP, batch 64, on one thread: forward, cross-entropy,
    backward and an SGD update, in steps per second, ember on Autodiff(Fusion(NdArray)) and
    on Autodiff(NdArray) against PyTorch.

``--fusion on|off|both`` (default both) picks the ember stacks. Prints ratio tables and the
targets (NdArray <= 2 µs/op, Autodiff <= 4 µs/op, MLP ember >= PyTorch, Fusion no slower
than NdArray); ``--json PATH`` saves everything with the machine, versions and commit. A
peer that is not installed, or an ember op that does not exist yet, is reported as absent,
not skipped. Every thread pool, ember's kernels included, runs one thread.

    python bench/overhead.py [--quick] [--fusion both] [--json results.json]
"""
import os

# One thread everywhere: set before NumPy or PyTorch is imported, so their pools start small.
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS",
                "EMBER_NUM_THREADS")
for _v in _THREAD_VARS:
    os.environ[_v] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import timeit  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
try:
    import ember as em  # noqa: E402
except ImportError:            # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))
    import ember as em  # noqa: E402
import numpy as np  # noqa: E402

TARGET_NDARRAY_US = 2.0
TARGET_AUTODIFF_US = 4.0
TARGET_MLP_RATIO = 1.0
TARGET_FUSION_RATIO = 1.0   # Fusion(NdArray) steps/s >= NdArray steps/s
FUSION_MODES = {"on": (True,), "off": (False,), "both": (True, False)}


def _stack(fused: bool) -> str:
    return "Fusion(NdArray)" if fused else "NdArray"


def _absent(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:200]


def _import_torch():
    try:
        import torch
    except Exception as e:  # noqa: BLE001  (absent or broken: reported, never fatal)
        return None, _absent(e)
    torch.set_num_threads(1)
    return torch, None


def _thread_limits():
    """threadpoolctl's limit of every BLAS/OpenMP pool to one thread, if it is installed."""
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        return None, "threadpoolctl not installed (thread env vars set to 1)"
    limiter = threadpool_limits(limits=1)
    pools = [f"{p.get('internal_api')}:{p.get('num_threads')}" for p in threadpool_info()]
    return limiter, ", ".join(pools) or "no pools loaded"


# -- (a) per-op overhead --------------------------------------------------------------------
def time_stmt(stmt: str, env: dict, repeat: int, min_time: float) -> float:
    """Best time of one execution of ``stmt`` in µs over ``repeat`` timeit runs."""
    timer = timeit.Timer(stmt, globals=env)
    number = 1
    while True:                       # like Timer.autorange, with our own minimum time
        if timer.timeit(number) >= min_time:
            break
        number *= 2 if number < 8 else 4
    return min(timer.repeat(repeat, number)) / number * 1e6


def bench_per_op(torch, repeat: int, min_time: float, modes=(True, False)) -> dict:
    out: dict = {}
    a_np = np.arange(4, dtype=np.float32)
    b_np = np.arange(4, dtype=np.float32) + 1
    out["numpy"] = time_stmt("a + b", {"a": a_np, "b": b_np}, repeat, min_time)

    for fused in modes:
        cpu = em.device("cpu", fusion=fused)
        a, b = em.tensor(a_np, device=cpu), em.tensor(b_np, device=cpu)
        out[f"ember {_stack(fused)}"] = time_stmt("a + b", {"a": a, "b": b}, repeat, min_time)
        ad = cpu.autodiff()
        a, b = em.tensor(a_np, device=ad), em.tensor(b_np, device=ad).require_grad()
        out[f"ember Autodiff({_stack(fused)})"] = time_stmt("a + b", {"a": a, "b": b}, repeat,
                                                          min_time)

    if torch is not None:
        ta, tb = torch.from_numpy(a_np.copy()), torch.from_numpy(b_np.copy())
        out["torch eager"] = time_stmt("a + b", {"a": ta, "b": tb}, repeat, min_time)
        tb = tb.clone().requires_grad_(True)
        out["torch eager requires_grad"] = time_stmt("a + b", {"a": ta, "b": tb}, repeat,
                                                     min_time)
    return out


# -- (b) MLP training step ------------------------------------------------------------------
MLP = (784, 256, 10)
BATCH = 64
LR = 0.01


def _data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, MLP[0]), dtype=np.float32)
    y = rng.integers(0, MLP[2], BATCH)
    return x, y, np.eye(MLP[2], dtype=np.float32)[y]


def _steps_per_s(step, sync, steps: int, repeat: int) -> float:
    for _ in range(3):                # warm-up: allocators, caches, lazy imports
        step()
    sync()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        best = min(best, time.perf_counter() - t0)
    return steps / best


def _calibrate(step, sync, min_time: float) -> int:
    """Steps that take about ``min_time`` seconds."""
    step()
    sync()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        sync()
        if time.perf_counter() - t0 >= min_time or n >= 1 << 14:
            return n
        n *= 2


def ember_mlp_step(fused: bool = False):
    """A closure running one training step with ember on Autodiff(Fusion(NdArray)) or
    Autodiff(NdArray): the same code as `ember demo` (ember.cli.demo), at the benchmark's
    sizes."""
    from ember.cli.demo import cross_entropy, forward, init_params, sgd_step
    dev = em.device("cpu", fusion=fused).autodiff()
    dev.seed(0)
    x_np, _, t_np = _data()
    x, t = em.tensor(x_np, device=dev), em.tensor(t_np, device=dev)
    state = {"p": init_params(dev, *MLP)}

    def step():
        p = state["p"]
        grads = cross_entropy(forward(p, x), t).backward()
        state["p"] = sgd_step(p, grads, LR, dev)
    return step, dev.sync


def torch_mlp_step(torch):
    """The same step in PyTorch eager: autograd.grad (functional, like ember) and an in-place
    SGD update under no_grad."""
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    x_np, y_np, _ = _data()
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    params = [
        (torch.randn(MLP[0], MLP[1], generator=g) * (2 / MLP[0]) ** 0.5).requires_grad_(),
        torch.zeros(MLP[1], requires_grad=True),
        (torch.randn(MLP[1], MLP[2], generator=g) * (2 / MLP[1]) ** 0.5).requires_grad_(),
        torch.zeros(MLP[2], requires_grad=True),
    ]
    w1, b1, w2, b2 = params

    def step():
        loss = F.cross_entropy(torch.relu(x @ w1 + b1) @ w2 + b2, y)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, gr in zip(params, grads):
                p.sub_(LR * gr)
    return step, lambda: None


def bench_mlp(torch, repeat: int, min_time: float, modes=(True, False)) -> tuple[dict, dict]:
    out, absent = {}, {}
    runners = {f"ember Autodiff({_stack(f)})": (lambda f=f: ember_mlp_step(f)) for f in modes}
    if torch is not None:
        runners["torch eager"] = lambda: torch_mlp_step(torch)
    for name, make in runners.items():
        try:
            step, sync = make()
            steps = _calibrate(step, sync, min_time)
            out[name] = _steps_per_s(step, sync, steps, repeat)
        except Exception as e:  # noqa: BLE001  (an op that has not landed yet)
            absent[name] = _absent(e)
    return out, absent


# -- report ---------------------------------------------------------------------------------
def _machine(torch, pools: str) -> dict:
    from ember.cli.info import cpu_count, cpu_name
    commit = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True, timeout=10).stdout
        commit = (commit + ("+dirty" if dirty.strip() else "")) or None
    except (OSError, subprocess.SubprocessError):
        pass
    import ml_dtypes
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "cpu": cpu_name(),
        "cpus": cpu_count()[1],
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": platform.python_version(),
        "ember": em.__version__,
        "numpy": np.__version__,
        "ml_dtypes": ml_dtypes.__version__,
        "torch": torch.__version__ if torch is not None else None,
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "thread_pools": pools,
    }


def _fmt(v, spec):
    return format(v, spec) if v is not None else "absent"


def _verdict(ok):
    return "n/a" if ok is None else ("met" if ok else "MISSED")


def report(res: dict) -> str:
    m, op, mlp = res["machine"], res["per_op_us"], res["mlp_steps_per_s"]
    lines = [f"ember {m['ember']} (commit {m['commit']}), {m['date']}",
             f"{m['cpu']}, {m['cpus']} CPUs usable; Python {m['python']}, numpy {m['numpy']}, "
             f"torch {m['torch'] or 'absent'}; thread pools: {m['thread_pools']}", ""]
    np_us, t_us, trg_us = op.get("numpy"), op.get("torch eager"), \
        op.get("torch eager requires_grad")
    lines.append("(a) per-op overhead, a + b on 4 x f32 (µs/op, best of repeats; lower is "
                 "better)")
    lines.append(f"  {'':<36}{'µs/op':>8}{'x numpy':>10}{'x torch':>10}   target")
    rows = [("numpy", None, None), ("torch eager", None, None),
            ("torch eager requires_grad", None, None)]
    for stack in ("Fusion(NdArray)", "NdArray"):
        rows += [(f"ember {stack}", t_us, TARGET_NDARRAY_US),
                 (f"ember Autodiff({stack})", trg_us, TARGET_AUTODIFF_US)]
    for name, peer, target in rows:
        if name not in op and name.startswith("ember"):
            continue
        v = op.get(name)
        vs_np = f"{v / np_us:.2f}x" if v is not None and np_us else ""
        vs_t = f"{v / peer:.2f}x" if v is not None and peer else ""
        tgt = f"<= {target:g} µs  {_verdict(v <= target if v is not None else None)}" \
            if target else ""
        lines.append(f"  {name:<36}{_fmt(v, '8.2f'):>8}{vs_np:>10}{vs_t:>10}   {tgt}")
    lines.append("  (x torch: plain ember against plain torch, Autodiff against torch with "
                 "requires_grad)")
    lines.append("")
    lines.append(f"(b) MLP {'-'.join(map(str, MLP))}, batch {BATCH}, 1 thread: forward, "
                 f"cross-entropy, backward, SGD (steps/s; higher is better)")
    t = mlp.get("torch eager")
    for name in ("ember Autodiff(Fusion(NdArray))", "ember Autodiff(NdArray)", "torch eager"):
        if name in mlp or name == "torch eager":
            lines.append(f"  {name:<36}{_fmt(mlp.get(name), '8.0f'):>8}")
    for name in ("ember Autodiff(Fusion(NdArray))", "ember Autodiff(NdArray)"):
        e = mlp.get(name)
        if name not in mlp:
            continue
        ratio = e / t if e is not None and t else None
        lines.append(f"  {name[6:]} / torch = {_fmt(ratio, '.2f')}   target >= "
                     f"{TARGET_MLP_RATIO:g}  "
                     f"{_verdict(ratio >= TARGET_MLP_RATIO if ratio is not None else None)}")
    f, u = mlp.get("ember Autodiff(Fusion(NdArray))"), mlp.get("ember Autodiff(NdArray)")
    if f and u:
        lines.append(f"  Fusion / NdArray = {f / u:.2f} (steps/s)   target >= "
                     f"{TARGET_FUSION_RATIO:g}  {_verdict(f / u >= TARGET_FUSION_RATIO)}")
    for name, why in res["absent"].items():
        lines.append(f"  absent: {name}: {why}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--quick", action="store_true", help="short runs (a smoke test; the "
                    "numbers are noisy)")
    ap.add_argument("--repeat", type=int, default=None, help="timing repeats (default 7, "
                    "3 with --quick)")
    ap.add_argument("--fusion", choices=sorted(FUSION_MODES), default="both",
                    help="ember on Fusion(NdArray) (on), on NdArray (off) or both (default)")
    args = ap.parse_args(argv)
    modes = FUSION_MODES[args.fusion]
    repeat = args.repeat or (3 if args.quick else 7)
    min_op, min_mlp = (0.01, 0.05) if args.quick else (0.2, 0.5)

    torch, torch_absent = _import_torch()
    limiter, pools = _thread_limits()
    absent = {"torch": torch_absent} if torch_absent else {}
    per_op = bench_per_op(torch, repeat, min_op, modes)
    mlp, mlp_absent = bench_mlp(torch, repeat if not args.quick else 2, min_mlp, modes)
    absent.update(mlp_absent)
    res = {"machine": _machine(torch, pools), "per_op_us": per_op, "mlp_steps_per_s": mlp,
           "absent": absent,
           "targets": {"ndarray_us": TARGET_NDARRAY_US, "autodiff_us": TARGET_AUTODIFF_US,
                       "mlp_ember_over_torch": TARGET_MLP_RATIO,
                       "mlp_fusion_over_ndarray": TARGET_FUSION_RATIO},
           "fusion": args.fusion,
           "quick": bool(args.quick)}
    print(report(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
        print(f"\nresults written to {args.json}")
    if limiter is not None:
        limiter.restore_original_limits()
    return 0


if __name__ == "__main__":
    sys.exit(main())
