#!/usr/bin/env python
"""ember on one NVIDIA GPU against PyTorch eager, torch.compile and JAX jit, in one process
(issue 5, "Performance"; DESIGN.md §7).

Rows (``--rows 2,4`` runs a subset; every contender of a row is measured in the same run):

1. device-to-device copy of 2^28 f32, TB/s counting bytes read + written: ``torch copy_``,
   ``cupy memcpy`` (cudaMemcpyAsync) and ``cupy copy kernel`` (an ElementwiseKernel
   ``y = x``). The best of them is *the copy bandwidth*, the reference of rows 2 and 4.
2. custom GELU ``y = x * (erf(x / sqrt(2)) + 1) / 2`` on 2^28 f32 (written exactly so in
   every contender), TB/s of one read of x and one write of y: torch eager, torch.compile,
   JAX jit, a CuPy ElementwiseKernel and ember. Targets: ember >= 95% of the copy bandwidth
   and >= 1.0x torch.compile.
3. first compile of a new fused kernel: in a fresh subprocess with empty ``EMBER_CACHE_DIR``
   and ``CUPY_CACHE_DIR`` (CUDA initialized and the input uploaded beforehand), the wall time
   of the first GELU call up to its result being ready, NVRTC included, against
   torch.compile's first call (fresh Inductor and Triton cache dirs) and JAX's (info). A
   first call that compiled no fused kernel (a device without fusion) is marked WRONG.
   Target ember <= 0.5 s.
4. layer norm after swap_dims: ``x`` [64, 256, 4096] f32; ``y = layer_norm(x.swap_dims(1, 2))``
   over the last dim (256) with weight and bias [256], eps 1e-5 (mean, biased variance), the
   result [64, 4096, 256] contiguous. The bandwidth floor is one read of x and one write of y
   at the copy bandwidth. Target ember <= 1.3x the floor.
5. matmul 8192 x 8192 x 8192, TFLOP/s (2 n^3 flops): bf16 (bf16 in and out); tf32 (f32 in
   and out; ember ``em.set_matmul_precision("tf32")``, torch
   ``torch.backends.cuda.matmul.allow_tf32 = True``, JAX ``precision=TF32_TF32_F32``); and,
   for information, full-precision f32. Target ember >= 0.95x torch for bf16 and tf32. Each
   result is checked against float64 on a corner, so a "tf32" that is not, or an "f32" that
   is really tf32, shows.
6. per-op overhead, ``a + b`` on 4-element f32 tensors, eager style: 1000 ops issued, then one
   synchronize; µs per op (best of repeats). torch eager launches a kernel per op. ember's
   target row is "each result materialized": ``(a + b).primitive`` flushes the fusion stream,
   so every op runs as a kernel when it is issued, as in torch. For information: ember with
   results discarded (fusion may drop dead work) and a chain ``c = c + b`` (fusion may fuse
   it). Target ember <= 1.5x torch.
7. MLP 784-256-10 (relu) training step, batch 64, cross-entropy, AdamW (lr 1e-3, weight decay
   0.01): ms/step, torch eager against ember (Autodiff(Fusion(Cuda))). Target <= 1.0x torch.
8. LeNet-style CNN training step, batch 64, 1x28x28 inputs: conv 5x5 6 channels (no padding),
   relu, max-pool 2, conv 5x5 16 channels, relu, max-pool 2, linear 256-120, relu, 120-84,
   relu, 84-10; cross-entropy, AdamW as row 7. Target <= 1.5x torch eager.
9. GPT-style model training step: token + learned position embeddings, 6 pre-norm blocks (causal
   self-attention with 6 heads, a 4x GELU MLP), a final layer norm, a linear head; d 384,
   seq 256, batch 32, vocab 8192, no dropout, cross-entropy over every position, AdamW as row
   7. torch eager (attention through ``F.scaled_dot_product_attention``), torch.compile (the
   model compiled, the optimizer eager; the first step's time reported as its compile time)
   and ember (nn.Embedding, nn.TransformerEncoder(norm_first=True), causal=True). Target ember
   <= 1.0x torch eager; the ratio to torch.compile is reported.

Training rows build the ember model first and copy its initial weights into the PyTorch twin
(linear weights transposed); the two losses on the first batch are compared before anything
is timed. Each step runs forward, loss, backward and the optimizer on a batch already on the
device, with no host read; the clock stops after a synchronize. Training rows and rows 4-5
run torch with TF32 off (PyTorch's matmul default; cuDNN's default TF32 for convs is turned
off too) so every contender computes in f32, except the tf32 matmul.

Timing: synchronize, run the call ``n`` times (``n`` calibrated to about 0.2 s), synchronize,
stop the clock; best of repeats (the median is saved too). Each contender first gets a timed
first call (its compile time, where it compiles) and warm-up calls; then the repeats of a
row's contenders are interleaved (A B C A B C ...), so a drift of the GPU's clocks or
temperature falls on all of them alike. Each row has a time budget that bounds its repeats.
Between rows, and in a row after its contenders' first calls, the Python heap is collected and
frozen (``gc.freeze``), so objects earlier rows or the first calls (compilation) left alive are
not walked by later full collections; a row notes the full collections that still fell in its
timing. On a GPU, ``nvidia-smi`` samples the SM clock, power and throttle
reasons in the background (`gpu_telemetry`): each row notes its clock range, peak power and
how often a power or thermal cap held while it was timed. Each timed row also notes the host's
speed after its timing (`host_loop_ns`: a fixed pure-Python loop, against the run's start):
host-bound rows (6-9) slow down in a process on a busy or throttled VM, GPU-bound peers do not.
Inductor and Triton get empty cache dirs for the run, so torch.compile's compile times are
those of a first run. A contender that is not installed, or fails, is reported *absent* with
the reason; each ember measurement is independent, so one failure hides no other. Results are
checked against float64 references on samples; a wrong result is marked WRONG and cannot meet
a target.

``--device cpu`` runs the same logic on the CPU at tiny sizes (torch CPU, ember
``em.device("cpu")``, NumPy instead of CuPy) to test the script: its numbers mean nothing.
``--quick`` is a smoke test with short runs; its numbers are never to be recorded.

``--fusion on`` measures ember on ``em.device(..., fusion=True)`` (Fusion(Cuda) before it is
the default), ``--fusion off`` on the plain backend.

    python bench/gpu.py [--rows 1,2,...] [--quick] [--json out.json] [--skip torch.compile]
                        [--fusion default|on|off]
    python bench/gpu.py --device cpu --quick --rows 1,2,6
"""
import os

# JAX must not take 75% of the GPU's memory at import (the other contenders share the GPU).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import argparse  # noqa: E402
import atexit  # noqa: E402
import contextlib  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
try:
    import ember as em  # noqa: E402
except ImportError:            # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))
    import ember as em  # noqa: E402
import numpy as np  # noqa: E402

import gpu_telemetry  # noqa: E402  (bench/, the script's own directory)

SQRT2 = math.sqrt(2.0)
LN_EPS = 1e-5
LR, WEIGHT_DECAY = 1e-3, 0.01

#: row 9's GPT with all its layers at sizes where its arithmetic is negligible: its host time
#: (bench/gpt_host.py on the CPU, ``bench/gpu_profile.py --sizes host`` on the GPU)
HOST_GPT = {"layers": 6, "d": 32, "heads": 2, "seq": 16, "batch": 2, "vocab": 64}

# Problem sizes: the on a GPU; tiny ones on the CPU (a test of the script's logic).
SIZES = {
    "cuda": {"elems": 1 << 28, "ln": (64, 256, 4096), "mm": 8192, "ops": 1000,
             "compile_elems": 1 << 20, "mlp": (784, 256, 10), "batch": 64,  # rows 7, 8
             "gpt": {"layers": 6, "d": 384, "heads": 6, "seq": 256, "batch": 32,
                     "vocab": 8192}},
    "cpu": {"elems": 1 << 16, "ln": (2, 16, 64), "mm": 128, "ops": 1000,
            "compile_elems": 1 << 12, "mlp": (784, 256, 10), "batch": 16,
            "gpt": {"layers": 1, "d": 32, "heads": 2, "seq": 16, "batch": 2, "vocab": 64}},
}

# Seconds each row may spend in its timing loops (compiles come on top); --quick: a tenth.
ROW_BUDGET_S = {1: 10, 2: 30, 4: 20, 5: 45, 6: 15, 7: 10, 8: 10, 9: 40}
COMPILE_TIMEOUT_S = 300

TARGETS = {
    "gelu_of_copy": 0.95, "gelu_over_compile": 1.0, "first_compile_s": 0.5,
    "ln_over_floor": 1.3, "matmul_over_torch": 0.95, "overhead_over_torch": 1.5,
    "mlp_over_torch": 1.0, "lenet_over_torch": 1.5, "gpt_over_torch": 1.0,
}



def row_title(number: int, sizes: dict) -> str:
    """The row's name, with the sizes of this run (the issue's on a GPU)."""
    n = sizes["elems"]
    n_s = f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)
    g = sizes["gpt"]
    return {
        1: f"device-to-device copy, {n_s} f32 (read + write)",
        2: f"custom GELU x*(erf(x/sqrt2)+1)/2, {n_s} f32",
        3: "first compile of a new fused kernel (fresh process, empty caches)",
        4: f"layer norm after swap_dims(1, 2), {list(sizes['ln'])} f32",
        5: f"matmul {sizes['mm']}^3",
        6: f"per-op overhead, a + b on 4 x f32, {sizes['ops']} ops then one sync",
        7: f"MLP {'-'.join(map(str, sizes['mlp']))} training step, batch {sizes['batch']}, "
           f"AdamW",
        8: f"LeNet-style CNN training step, batch {sizes['batch']}, AdamW",
        9: f"GPT-style model training step ({g['layers']} layers, d {g['d']}, {g['heads']} "
           f"heads, seq {g['seq']}, batch {g['batch']}, vocab {g['vocab']}), AdamW",
    }[number]

FAMILIES = ("torch", "torch.compile", "jax", "cupy", "ember")


FUSION_ARG = {"default": None, "on": True, "off": False}


def ember_device(kind: str, fusion: str = "default"):
    """ember's device for this run: ``em.device(kind)`` (on the GPU: Fusion(Cuda) once fusion
    is the default there), or with ``fusion="on"``/``"off"`` that device with fusion forced
    on or off."""
    f = FUSION_ARG[fusion]
    return em.device(kind) if f is None else em.device(kind, fusion=f)


def _absent(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:240] if str(e) else type(e).__name__


# -- contenders: the frameworks, imported once, each possibly absent ---------------------------
def _visible_gpu() -> str:
    """nvidia-smi's ``--id`` of the GPU the contenders use: the first entry of
    ``CUDA_VISIBLE_DEVICES`` (an index or a UUID, both of which nvidia-smi takes), else 0."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return first or "0"


class Ctx:
    """What every row needs: the frameworks on the chosen device (or why not), sizes, timing
    settings, the copy bandwidth once measured."""

    def __init__(self, args):
        self.device = args.device
        self.fusion = args.fusion
        self.tracebacks = bool(args.tracebacks)
        self.quick = bool(args.quick)
        self.sizes = SIZES[args.device]
        self.skip = {s.strip() for s in (args.skip or "").split(",") if s.strip()}
        self.repeat = args.repeat or (2 if self.quick else 5)
        self.target_s = 0.02 if self.quick else 0.2
        self.budget_scale = 0.1 if self.quick else 1.0
        self.log = (lambda s: None) if args.quiet else \
            (lambda s: print(s, file=sys.stderr, flush=True))
        self.absent: dict[str, str] = {}
        self.copy_bw = None             # bytes/s, set by row 1
        self.host_loop_ns = host_loop_ns()  # the host's speed at the start (`host_loop_ns`)
        self.torch = self._torch()
        self.jax, self.jax_dev = self._jax()
        self.xp = self._array_library()
        self.em_dev = self._ember()
        self.telemetry = gpu_telemetry.Telemetry(_visible_gpu()) if self.device == "cuda" \
            else None

    # each of these returns None and notes the reason when the framework cannot run
    def _torch(self):
        if "torch" in self.skip and "torch.compile" in self.skip:
            self.absent["torch"] = "skipped (--skip)"
            return None
        try:
            import torch
        except Exception as e:  # noqa: BLE001  (absent or broken: reported, never fatal)
            self.absent["torch"] = _absent(e)
            return None
        if self.device == "cuda" and not torch.cuda.is_available():
            self.absent["torch"] = "torch.cuda.is_available() is False " \
                                   f"(torch {torch.__version__})"
            return None
        self.tdev = torch.device(self.device)
        if self.device == "cpu":
            torch.set_num_threads(1)       # as ember's NdArray; the CPU mode only tests logic
        # rows 7-9 turn TF32 off on purpose (see _NoTf32); Inductor's advice is not wanted
        warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores")
        return torch

    def _jax(self):
        if "jax" in self.skip:
            self.absent["jax"] = "skipped (--skip)"
            return None, None
        if self.device == "cpu":
            os.environ.setdefault("JAX_PLATFORMS", "cpu")
        try:
            import jax
            dev = jax.devices("gpu" if self.device == "cuda" else "cpu")[0]
        except Exception as e:  # noqa: BLE001
            self.absent["jax"] = _absent(e)
            return None, None
        return jax, dev

    def _array_library(self):
        """CuPy on the GPU; NumPy stands in on the CPU (the same calls, to test them)."""
        if "cupy" in self.skip:
            self.absent["cupy"] = "skipped (--skip)"
            return None
        if self.device == "cpu":
            return np
        try:
            import cupy
            cupy.cuda.runtime.getDeviceCount()
        except Exception as e:  # noqa: BLE001
            self.absent["cupy"] = _absent(e)
            return None
        return cupy

    def _ember(self):
        if "ember" in self.skip:
            self.absent["ember"] = "skipped (--skip)"
            return None
        try:
            return ember_device(self.device, self.fusion)
        except Exception as e:  # noqa: BLE001  (the Cuda backend may not be there yet)
            self.absent["ember"] = _absent(e)
            return None

    # -- synchronization ------------------------------------------------------------------
    def torch_sync(self, _=None):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def xp_sync(self, _=None):
        if self.xp is not np:
            self.xp.cuda.get_current_stream().synchronize()

    def jax_sync(self, out=None):
        if out is not None:
            self.jax.block_until_ready(out)

    def ember_sync(self, _=None):
        self.em_dev.sync()

    def unavailable(self, family: str) -> str | None:
        """Why a contender of ``family`` cannot run, or None."""
        if family in self.skip:
            return "skipped (--skip)"
        base = {"torch.compile": "torch"}.get(family, family)
        return self.absent.get(base)

    def free(self) -> None:
        """Hand cached device memory back between rows, so contenders do not starve; then
        freeze the Python heap (``gc.freeze``): what earlier rows' contenders left alive
        (torch.compile's graphs, JAX's traces) is not walked by the full collections of the
        rows after (7 of them, 349 ms in all, fell in row 9's timing of GPU run 15), as it
        would not be in a process running one framework. All contenders alike; rows note the
        full collections still seen while timed."""
        gc.collect()
        gc.freeze()
        if self.torch is not None and self.device == "cuda":
            self.torch.cuda.empty_cache()
        if self.xp is not None and self.xp is not np:
            self.xp.get_default_memory_pool().free_all_blocks()
        cuda = getattr(em, "cuda", None)
        if self.em_dev is not None and cuda is not None and hasattr(cuda, "empty_cache"):
            try:
                cuda.empty_cache()
            except Exception:  # noqa: BLE001
                pass


# -- timing ---------------------------------------------------------------------------------
#: iterations of `host_loop_ns`'s loop
HOST_LOOP = 100_000


def host_loop_ns(rounds: int = 5) -> float:
    """The host's speed now: nanoseconds an iteration of a fixed pure-Python loop, the best of
    ``rounds`` (about 25 ms in all). A process on a busy or throttled VM shows it as a larger
    number; host-bound rows (6-9) slow down with it while GPU-bound peers do not."""
    best = math.inf
    for _ in range(rounds):
        t0 = time.perf_counter()
        acc = 0
        for i in range(HOST_LOOP):
            acc += i * i
        best = min(best, time.perf_counter() - t0)
    return best / HOST_LOOP * 1e9


class GcWatch:
    """Counts Python's full (generation 2) garbage collections and their time while entered:
    a pause of the host shows in a host-bound row, and the row notes it."""

    def __init__(self):
        self.full, self.full_ms, self._t0 = 0, 0.0, None

    def _callback(self, phase, info):
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            self.full += 1
            self.full_ms += (time.perf_counter() - self._t0) * 1e3
            self._t0 = None

    def __enter__(self):
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self._callback)
        return False


class Timed:
    """A contender ready to be timed: ``fn()`` runs one call, ``sync(out)`` waits for the
    device (``out``: the last call's result), ``finish(m)`` turns the timing ``m`` into the
    row's result dict (checks included)."""

    __slots__ = ("fn", "sync", "finish", "warmup")

    def __init__(self, fn, sync, finish, warmup: int = 2):
        self.fn, self.sync, self.finish, self.warmup = fn, sync, finish, warmup


def first_call(fn, sync) -> float:
    """Seconds of one synchronized call (compiles included on a first call)."""
    sync(None)
    t0 = time.perf_counter()
    out = fn()
    sync(out)
    return time.perf_counter() - t0


def _repeat(t: Timed, n: int) -> float:
    """Seconds of ``n`` calls between two synchronizations."""
    t.sync(None)
    t0 = time.perf_counter()
    out = None
    for _ in range(n):
        out = t.fn()
    t.sync(out)
    return time.perf_counter() - t0


def _calibrate(t: Timed, target_s: float) -> tuple[int, float]:
    """After the warm-up calls: ``n`` calls take about ``target_s``; returns ``n`` and the
    seconds of the last ``n`` calls (a first sample)."""
    t0 = time.perf_counter()
    out = None
    for _ in range(t.warmup):
        out = t.fn()
    t.sync(out)
    del out
    per_call = (time.perf_counter() - t0) / max(t.warmup, 1)
    n = max(1, min(1 << 16, int(target_s / max(per_call, 1e-7))))
    while True:
        dt = _repeat(t, n)
        if dt >= 0.5 * target_s or n >= 1 << 16:
            return n, dt
        n = min(1 << 16, max(2 * n, int(n * target_s / max(dt, 1e-9))))


def time_group(timed: dict, ctx: "Ctx", budget_s: float, gc_watch=None) -> dict:
    """Seconds per call of each contender: its first call (compiles included), warm-up
    calls and calibration in turn, then the repeats of all contenders interleaved (A B C A B
    C ...) so that a drift of the GPU's clocks or temperature falls on all alike; at most
    ``ctx.repeat`` repeats each, fewer when ``budget_s`` runs out. Only the interleaved
    repeats are results (a calibration ran alone: the first contender's on a GPU still cool,
    at boost clocks an H200 under a long bf16 product does not keep); the calibration sample
    counts only for a contender that got no repeat. Before the repeats the heap is collected
    and frozen (what the first calls built is not walked again); ``gc_watch`` (a `GcWatch`)
    is entered for the repeats. Returns ``{name: timing dict}``, or ``{name: exception}`` for a
    contender that failed."""
    out, state = {}, {}
    for name, t in timed.items():
        try:
            first = first_call(t.fn, t.sync)
            n, dt = _calibrate(t, ctx.target_s)
            state[name] = {"n": n, "times": [], "calibration": dt / n, "first_call_s": first,
                           "last": dt}
        except Exception as e:  # noqa: BLE001
            out[name] = e
    # what the first calls built and keep (torch.compile's graphs of this row's model, ember's
    # plans and kernels) is frozen too, as between rows: full collections during the repeats
    # walk only what the repeats allocate
    gc.collect()
    gc.freeze()
    with gc_watch if gc_watch is not None else contextlib.nullcontext():
        _interleave(timed, state, out, ctx.repeat, budget_s)
    for name, s in state.items():
        if name not in out:
            ts = s["times"] or [s["calibration"]]
            out[name] = {"best_s": min(ts), "median_s": statistics.median(ts), "calls": s["n"],
                         "repeats": len(ts), "first_call_s": s["first_call_s"]}
    return out


def _interleave(timed: dict, state: dict, out: dict, repeat: int, budget_s: float) -> None:
    """The repeats of `time_group`: each contender's in turn until each has ``repeat`` or
    the budget would run out; a contender that fails gets its exception in ``out``."""
    start = time.perf_counter()
    while True:
        progressed = False
        for name, s in state.items():
            if name in out or len(s["times"]) >= repeat:
                continue
            if time.perf_counter() - start + s["last"] > budget_s:
                continue
            try:
                s["last"] = _repeat(timed[name], s["n"])
            except Exception as e:  # noqa: BLE001
                out[name] = e
                continue
            s["times"].append(s["last"] / s["n"])
            progressed = True
        if not progressed:
            break


class Row:
    """One row's results: contenders' values (or why absent), checks, targets."""

    def __init__(self, ctx: "Ctx", number: int, unit: str, higher_is_better: bool,
                 definition: str):
        self.number, self.unit, self.higher = number, unit, higher_is_better
        self.title = row_title(number, ctx.sizes)
        self.order: list[str] = []          # contenders in the order they ran
        self.definition = definition
        self.results: dict[str, dict] = {}
        self.absent: dict[str, str] = {}
        self.targets: list[dict] = []
        self.notes: list[str] = []
        self.telemetry = None               # the GPU's clock and power while timed
        self.host_loop_ns = None            # the host's speed after the timing (`host_loop_ns`)

    def _available(self, ctx: "Ctx", name: str, family: str) -> bool:
        self.order.append(name)
        why = ctx.unavailable(family)
        if why is not None:
            self.absent[name] = why
            return False
        ctx.log(f"  row {self.number}: {name} ...")
        return True

    def _fail(self, ctx: "Ctx", name: str, e: BaseException) -> None:
        self.absent[name] = _absent(e)
        ctx.log(f"  row {self.number}: {name} absent: {self.absent[name]}")
        if ctx.tracebacks:
            traceback.print_exception(e, file=sys.stderr)

    def run_group(self, ctx: "Ctx", specs, budget_s: float) -> None:
        """``specs``: ``(name, family, prepare)`` with ``prepare() -> Timed``. Each contender
        is prepared (inputs on the device, models built), then all are timed together by
        `time_group`; any exception makes that contender absent and no other."""
        timed = {}
        for name, family, prepare in specs:
            if self._available(ctx, name, family):
                try:
                    timed[name] = prepare()
                except Exception as e:  # noqa: BLE001  (an op not there yet, a peer failing)
                    self._fail(ctx, name, e)
        t0 = time.time()
        gcw = GcWatch()
        measured = time_group(timed, ctx, budget_s * ctx.budget_scale, gcw)
        if ctx.telemetry is not None:
            self.telemetry = ctx.telemetry.window(t0, time.time())
            if self.telemetry is not None:
                self.notes.append(gpu_telemetry.describe(self.telemetry))
        self.host_loop_ns = host_loop_ns()
        ref = ctx.host_loop_ns
        self.notes.append(f"host: Python's reference loop {self.host_loop_ns:.1f} ns an "
                          f"iteration after the timing ({ref:.1f} at the run's start)")
        if gcw.full:
            self.notes.append(f"Python's full garbage collections while timed: {gcw.full}, "
                              f"{gcw.full_ms:.0f} ms in all ({gc.get_freeze_count()} objects "
                              f"frozen)")
        for name, t in timed.items():
            m = measured[name]
            if isinstance(m, BaseException):
                self._fail(ctx, name, m)
                continue
            try:
                self.results[name] = t.finish(m)
            except Exception as e:  # noqa: BLE001
                self._fail(ctx, name, e)
        timed.clear()
        ctx.free()

    def run(self, name: str, family: str, ctx: "Ctx", body) -> None:
        """``body()`` -> a result dict with ``value`` (an untimed contender, e.g. a child
        process); an exception makes it absent."""
        if not self._available(ctx, name, family):
            return
        try:
            self.results[name] = body()
        except Exception as e:  # noqa: BLE001
            self._fail(ctx, name, e)

    def value(self, name: str):
        r = self.results.get(name)
        return None if r is None else r.get("value")

    def ok(self, name: str) -> bool:
        r = self.results.get(name)
        return r is not None and not r.get("wrong")

    def target(self, what: str, ratio, limit: float, op: str, why_na: str | None = None,
               contender: str = "ember"):
        met = None
        if ratio is not None:
            met = ratio >= limit if op == ">=" else ratio <= limit
            if not self.ok(contender):
                met = False
        elif why_na is None:
            why_na = f"{contender} absent" if contender not in self.results else "no peer"
        self.targets.append({"what": what, "value": ratio, "limit": limit, "op": op,
                             "met": met, "why_not_measured": None if ratio is not None
                             else why_na})

    def to_json(self) -> dict:
        return {"title": self.title, "unit": self.unit, "order": self.order,
                "higher_is_better": self.higher, "definition": self.definition,
                "results": self.results, "absent": self.absent, "targets": self.targets,
                "notes": self.notes, "telemetry": self.telemetry,
                "host_loop_ns": self.host_loop_ns}


def _ratio(a, b):
    return a / b if a is not None and b else None


# -- host data ------------------------------------------------------------------------------
def host_normal(shape, seed: int, scale: float = 1.0) -> np.ndarray:
    """Normal f32 of ``shape`` from a 2^22-element random block repeated (large arrays are
    made quickly; the values' period does not matter to bandwidth or flops)."""
    n = int(np.prod(shape))
    block = np.random.default_rng(seed).standard_normal(min(n, 1 << 22), dtype=np.float32)
    return (np.resize(block, n) * np.float32(scale)).reshape(shape)


def _check(got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> dict:
    got = np.asarray(got, dtype=np.float64)
    err = np.abs(got - ref)
    bad = ~(err <= atol + rtol * np.abs(ref))
    return {"max_abs_err": float(err.max()) if err.size else 0.0, "wrong": bool(bad.any())}


def _ember_host(t) -> np.ndarray:
    return np.asarray(t.numpy(), dtype=np.float64)


def _fusion_counts():
    try:
        return em.fusion.stats()
    except Exception:  # noqa: BLE001
        return None


def _is_fusion(dev) -> bool:
    b = dev.backend
    while b is not None:
        if type(b).__name__ == "Fusion":
            return True
        b = getattr(b, "inner", None)
    return False


def _per_call_counts(ctx: "Ctx", fn, calls: int = 1) -> dict:
    """What one call did on a Fusion device: ``{"fusion_per_call": {counter: n}}`` with the
    counters of em.fusion.stats() that count launches or ops (kernels, inner_ops,
    eager_ops, ...), over ``calls`` (e.g. 1000 ops in one call of row 6)."""
    if not _is_fusion(ctx.em_dev):
        return {}
    s0 = _fusion_counts()
    out = fn()
    ctx.ember_sync(out)
    s1 = _fusion_counts()
    if s0 is None or s1 is None:
        return {}
    keys = [k for k in s1 if k == "kernels" or (k.endswith("_ops") and k != "recorded_ops")]
    return {"fusion_per_call": {k: (s1[k] - s0.get(k, 0)) / calls for k in keys}}


def _cuda_kernel_variant(numel: int):
    """The launch variant the autotuner left on the generated CUDA kernel of ``numel``
    elements (e.g. ``"ept=4"``; ``"default"``), or None where there is none: what decided
    row 2 in this process."""
    try:
        from ember.kernel.cuda.runtime import default_runtime
        progs = [p for p in list(default_runtime()._programs.values()) if p.numel == numel]
    except Exception:  # noqa: BLE001  (no CUDA runtime here)
        return None
    if not progs:
        return None
    v = progs[-1].variant
    text = " ".join(f"{k}={getattr(v, k)}" for k in ("block", "vec", "ept", "tpr", "by")
                    if getattr(v, k))
    return (text or "default") + ("" if progs[-1].tuned else " (untuned)")


# -- row 1: copy bandwidth ------------------------------------------------------------------
def row_copy(ctx: Ctx) -> Row:
    n = ctx.sizes["elems"]
    nbytes = 2 * 4 * n
    row = Row(ctx, 1, "TB/s", True, f"{n} f32 copied device to device; TB/s = 2 * 4 * {n} "
                                    f"bytes (read + write) / seconds")
    host = host_normal((n,), 1)
    lib = "numpy" if ctx.xp is np else "cupy"

    def timed(fn, sync, dst, to_host):
        def finish(m):
            r = {"value": nbytes / m["best_s"] / 1e12, "ms": m["best_s"] * 1e3, **m}
            r.update(_check(to_host(dst[:4096]), host[:4096], 0, 0))
            return r
        return Timed(fn, sync, finish)

    def torch_copy():
        src = ctx.torch.from_numpy(host).to(ctx.tdev)
        dst = ctx.torch.empty_like(src)
        return timed(lambda: dst.copy_(src), ctx.torch_sync, dst, lambda a: a.cpu().numpy())

    def xp_memcpy():
        xp = ctx.xp
        src = xp.asarray(host)
        dst = xp.empty_like(src)
        if xp is np:
            fn = (lambda: np.copyto(dst, src))
        else:
            fn = (lambda: dst.data.copy_from_device_async(src.data, src.nbytes))
        return timed(fn, ctx.xp_sync, dst, lambda a: _to_host(xp, a))

    def xp_kernel():
        xp = ctx.xp
        if xp is np:
            raise RuntimeError("an ElementwiseKernel needs CuPy (--device cuda)")
        k = xp.ElementwiseKernel("float32 x", "float32 y", "y = x", "ember_bench_copy")
        src = xp.asarray(host)
        dst = xp.empty_like(src)
        return timed(lambda: k(src, dst), ctx.xp_sync, dst, lambda a: _to_host(xp, a))

    row.run_group(ctx, [("torch copy_", "torch", torch_copy),
                        (f"{lib} memcpy", "cupy", xp_memcpy),
                        (f"{lib} copy kernel", "cupy", xp_kernel)], ROW_BUDGET_S[1])
    good = [r["value"] for r in row.results.values() if not r.get("wrong")]
    if good:
        ctx.copy_bw = max(good) * 1e12
        row.notes.append(f"copy bandwidth (the best of these) = {max(good):.3f} TB/s: the "
                         f"reference of rows 2 and 4")
    return row


def _to_host(xp, a) -> np.ndarray:
    return a if xp is np else xp.asnumpy(a)


def ensure_copy_bw(ctx: Ctx, rows: dict) -> None:
    """Rows 2 and 4 need the copy bandwidth: measure row 1 if it was not asked for."""
    if ctx.copy_bw is None and 1 not in rows:
        ctx.log("row 1 (copy bandwidth, needed as the reference) ...")
        rows[1] = row_copy(ctx)


# -- row 2: GELU ----------------------------------------------------------------------------
def gelu_ref(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x * (np.vectorize(math.erf)(x / SQRT2) + 1.0) / 2.0


def row_gelu(ctx: Ctx) -> Row:
    n = ctx.sizes["elems"]
    nbytes = 2 * 4 * n
    row = Row(ctx, 2, "TB/s", True, f"y = x * (erf(x / sqrt(2)) + 1) / 2 on {n} f32 (normal "
                                    f"values); TB/s = 2 * 4 * {n} bytes / seconds")
    host = host_normal((n,), 2, scale=2.0)
    k = 4096
    ref = gelu_ref(np.concatenate([host[:k], host[-k:]]))

    def timed(fn, sync, head_tail, extra=None):
        """``head_tail(k)`` -> the first and the last ``k`` values of a fresh result."""
        def finish(m):
            r = {"value": nbytes / m["best_s"] / 1e12, "ms": m["best_s"] * 1e3, **m}
            r.update(_check(np.concatenate(head_tail(k)), ref, 1e-5, 1e-6))
            if ctx.copy_bw:
                r["of_copy"] = r["value"] * 1e12 / ctx.copy_bw
            r.update(extra() if extra else {})
            return r
        return Timed(fn, sync, finish)

    def tgelu(x):
        return x * (ctx.torch.erf(x / SQRT2) + 1) / 2

    def torch_timed(f):
        x = ctx.torch.from_numpy(host).to(ctx.tdev)

        def head_tail(i):
            y = f(x)
            return y[:i].cpu().numpy(), y[-i:].cpu().numpy()
        return timed(lambda: f(x), ctx.torch_sync, head_tail)

    def jax_jit():
        jax = ctx.jax
        from jax.scipy.special import erf
        x = jax.device_put(host, ctx.jax_dev)
        f = jax.jit(lambda x: x * (erf(x / SQRT2) + 1) / 2)

        def head_tail(i):
            y = f(x)
            assert y.dtype == jax.numpy.float32, y.dtype
            return np.asarray(y[:i]), np.asarray(y[-i:])
        return timed(lambda: f(x), ctx.jax_sync, head_tail)

    def cupy_kernel():
        xp = ctx.xp
        if xp is np:
            raise RuntimeError("an ElementwiseKernel needs CuPy (--device cuda)")
        kern = xp.ElementwiseKernel("float32 x", "float32 y",
                                    "y = x * (erff(x / 1.41421356237309505f) + 1.0f) / 2.0f",
                                    "ember_bench_gelu")
        x = xp.asarray(host)
        y = xp.empty_like(x)
        return timed(lambda: kern(x, y), ctx.xp_sync,
                     lambda i: (xp.asnumpy(y[:i]), xp.asnumpy(y[-i:])))

    def egelu(x):
        return x * ((x / SQRT2).erf() + 1) / 2

    def ember():
        dev = ctx.em_dev
        x = em.tensor(host, device=dev)
        dev.sync()
        # .primitive materializes the result (a fusion stream drops results nobody holds)
        fn = (lambda: egelu(x).primitive)

        def head_tail(i):
            y = egelu(x)
            return _ember_host(y[:i]), _ember_host(y[n - i:])
        return timed(fn, ctx.ember_sync, head_tail,
                     lambda: {**_per_call_counts(ctx, fn), "device": str(dev),
                              "kernel_variant": _cuda_kernel_variant(n)})

    row.run_group(ctx, [
        ("torch eager", "torch", lambda: torch_timed(tgelu)),
        ("torch.compile", "torch.compile", lambda: torch_timed(ctx.torch.compile(tgelu))),
        ("jax jit", "jax", jax_jit),
        (f"{'cupy' if ctx.xp is not np else 'numpy'} ElementwiseKernel", "cupy", cupy_kernel),
        ("ember", "ember", ember)], ROW_BUDGET_S[2])

    e, c = row.value("ember"), row.value("torch.compile")
    bw = ctx.copy_bw / 1e12 if ctx.copy_bw else None
    row.target("ember >= 95% of the copy bandwidth", _ratio(e, bw), TARGETS["gelu_of_copy"],
               ">=", None if bw or e is None else "no copy bandwidth")
    row.target("ember >= 1.0x torch.compile", _ratio(e, c), TARGETS["gelu_over_compile"],
               ">=", None if c or e is None else "torch.compile absent")
    return row


# -- row 3: first compile -------------------------------------------------------------------
_EMBER_CHILD = r"""
import json, math, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
import ember as em
fusion = {"default": None, "on": True, "off": False}[sys.argv[4]]
dev = em.device(sys.argv[2]) if fusion is None else em.device(sys.argv[2], fusion=fusion)
n = int(sys.argv[3])
x = em.tensor(np.linspace(-4, 4, n, dtype=np.float32), device=dev)
dev.sync()
def run(f):
    s0 = em.fusion.stats()
    t0 = time.perf_counter()
    y = f(x)
    y.primitive          # materialize: a fusion stream drops results nobody holds
    dev.sync()
    t = time.perf_counter() - t0
    s1 = em.fusion.stats()
    return {"seconds": t, "compiles": s1["compiles"] - s0["compiles"],
            "compile_time_s": s1["compile_time_s"] - s0["compile_time_s"],
            "kernels": s1["kernels"] - s0["kernels"]}
out = {"device": str(dev)}
out["gelu"] = run(lambda x: x * ((x / math.sqrt(2.0)).erf() + 1) / 2)
out["gelu_again"] = run(lambda x: x * ((x / math.sqrt(2.0)).erf() + 1) / 2)
out["another_new"] = run(lambda x: x * (x * 1.702).sigmoid())
print("RESULT " + json.dumps(out))
"""

_TORCH_CHILD = r"""
import json, math, sys, time
import torch
dev = torch.device(sys.argv[1])
n = int(sys.argv[2])
x = torch.linspace(-4, 4, n, device=dev)
torch.ones(1, device=dev).add_(1)
if dev.type == "cuda":
    torch.cuda.synchronize()
def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()
f = torch.compile(lambda x: x * (torch.erf(x / math.sqrt(2.0)) + 1) / 2)
t0 = time.perf_counter(); y = f(x); sync(); t1 = time.perf_counter()
y = f(x); sync(); t2 = time.perf_counter()
print("RESULT " + json.dumps({"gelu": {"seconds": t1 - t0}, "gelu_again": {"seconds": t2 - t1},
                              "torch": torch.__version__}))
"""

_JAX_CHILD = r"""
import json, math, sys, time
import numpy as np
import jax
dev = jax.devices(sys.argv[1])[0]
n = int(sys.argv[2])
x = jax.device_put(np.linspace(-4, 4, n, dtype=np.float32), dev)
jax.block_until_ready(x + 1)      # CUDA and XLA initialized (a first, other, computation)
from jax.scipy.special import erf
f = jax.jit(lambda x: x * (erf(x / math.sqrt(2.0)) + 1) / 2)
t0 = time.perf_counter(); y = f(x); y.block_until_ready(); t1 = time.perf_counter()
y = f(x); y.block_until_ready(); t2 = time.perf_counter()
print("RESULT " + json.dumps({"gelu": {"seconds": t1 - t0}, "gelu_again": {"seconds": t2 - t1},
                              "jax": jax.__version__}))
"""


def _child(code: str, argv: list, env_extra: dict, timeout: float) -> dict:
    env = dict(os.environ, **env_extra)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"]
                                     if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", code, *map(str, argv)], env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"no result in {timeout:.0f} s") from None
    wall = time.perf_counter() - t0
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            out = json.loads(line[7:])
            out["process_wall_s"] = wall
            return out
    tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
    raise RuntimeError(f"child exited {p.returncode}: {tail[:200]}")


def row_first_compile(ctx: Ctx) -> Row:
    n = ctx.sizes["compile_elems"]
    row = Row(ctx, 3, "s", False, f"a fresh Python process with empty kernel caches, the "
                                  f"device initialized and x ({n} f32) uploaded: wall time of "
                                  f"the first GELU call until its result is ready (compiles "
                                  f"included)")
    timeout = COMPILE_TIMEOUT_S

    def ember():
        with tempfile.TemporaryDirectory(prefix="ember-bench-cache-") as cache:
            # CuPy's kernel cache too: the Cuda backend may compile through CuPy
            env = {"EMBER_CACHE_DIR": cache, "CUPY_CACHE_DIR": os.path.join(cache, "cupy")}
            argv = [ROOT, ctx.device, n, ctx.fusion]
            cold = _child(_EMBER_CHILD, argv, env, timeout)
            warm = _child(_EMBER_CHILD, argv, env, timeout)
        g = cold["gelu"]
        r = {"value": g["seconds"], "compiles": g["compiles"],
             "compile_time_s": g["compile_time_s"], "kernels": g["kernels"],
             "second_call_s": cold["gelu_again"]["seconds"],
             "another_new_kernel_s": cold["another_new"]["seconds"],
             "fresh_process_disk_cache_s": warm["gelu"]["seconds"],
             "fresh_process_disk_cache_compiles": warm["gelu"]["compiles"],
             "device": cold["device"]}
        if g["compiles"] == 0:
            r["wrong"] = True
            row.notes.append(f"ember compiled no kernel on {cold['device']}: the first-call "
                             f"time is not a compile time")
        return r
    row.run("ember", "ember", ctx, ember)

    def torch_compiled():
        with tempfile.TemporaryDirectory(prefix="ember-bench-inductor-") as d:
            env = {"TORCHINDUCTOR_CACHE_DIR": os.path.join(d, "inductor"),
                   "TRITON_CACHE_DIR": os.path.join(d, "triton")}
            out = _child(_TORCH_CHILD, [ctx.device, n], env, timeout)
        return {"value": out["gelu"]["seconds"], "second_call_s": out["gelu_again"]["seconds"]}
    row.run("torch.compile", "torch.compile", ctx, torch_compiled)

    def jax_jit():
        out = _child(_JAX_CHILD, ["gpu" if ctx.device == "cuda" else "cpu", n],
                     {"JAX_ENABLE_COMPILATION_CACHE": "false"}, timeout)
        return {"value": out["gelu"]["seconds"], "second_call_s": out["gelu_again"]["seconds"]}
    row.run("jax jit", "jax", ctx, jax_jit)

    e = row.value("ember")
    row.target(f"ember first call <= {TARGETS['first_compile_s']} s", e,
               TARGETS["first_compile_s"], "<=")
    c = row.value("torch.compile")
    if e is not None and c:
        row.notes.append(f"ember / torch.compile first call = {e / c:.3f}")
    return row


# -- row 4: layer norm after swap_dims ------------------------------------------------------
def row_layer_norm(ctx: Ctx) -> Row:
    b, c, t = ctx.sizes["ln"]
    nbytes = 2 * 4 * b * c * t
    row = Row(ctx, 4, "ms", False, f"x [{b}, {c}, {t}] f32; y = layer_norm(x.swap_dims(1, 2)) "
                                   f"over the last dim ({c}), weight and bias [{c}], eps "
                                   f"{LN_EPS:g}; y [{b}, {t}, {c}] contiguous; floor = "
                                   f"{nbytes} bytes at the copy bandwidth")
    host = host_normal((b, c, t), 4, scale=3.0) + np.float32(0.5)
    w = (1.0 + 0.1 * np.random.default_rng(40).standard_normal(c)).astype(np.float32)
    bias = (0.1 * np.random.default_rng(41).standard_normal(c)).astype(np.float32)
    rb, rt = min(b, 2), min(t, 8)
    xs = host[:rb, :, :rt].astype(np.float64).transpose(0, 2, 1)       # [rb, rt, c]
    mu = xs.mean(-1, keepdims=True)
    var = ((xs - mu) ** 2).mean(-1, keepdims=True)
    ref = (xs - mu) / np.sqrt(var + LN_EPS) * w + bias
    floor_ms = nbytes / ctx.copy_bw * 1e3 if ctx.copy_bw else None

    def timed(fn, sync, corner, extra=None):
        """``corner()`` -> y[:2, :8] of a fresh result, on the host."""
        def finish(m):
            r = {"value": m["best_s"] * 1e3, **m, "tb_per_s": nbytes / m["best_s"] / 1e12}
            r.update(_check(corner(), ref, 1e-4, 1e-5))
            if floor_ms:
                r["over_floor"] = r["value"] / floor_ms
            r.update(extra() if extra else {})
            return r
        return Timed(fn, sync, finish)

    def tln(x, w_, b_):
        return ctx.torch.nn.functional.layer_norm(x.transpose(1, 2), (c,), w_, b_, LN_EPS)

    def torch_timed(f):
        x, w_, b_ = (ctx.torch.from_numpy(a).to(ctx.tdev) for a in (host, w, bias))
        return timed(lambda: f(x, w_, b_), ctx.torch_sync,
                     lambda: f(x, w_, b_)[:rb, :rt].cpu().numpy())

    def jax_jit():
        jax = ctx.jax
        jnp = jax.numpy

        def jln(x, w_, b_):
            xt = jnp.swapaxes(x, 1, 2)
            mean = xt.mean(-1, keepdims=True)
            xc = xt - mean
            v = (xc * xc).mean(-1, keepdims=True)
            return xc * jax.lax.rsqrt(v + LN_EPS) * w_ + b_
        args = [jax.device_put(a, ctx.jax_dev) for a in (host, w, bias)]
        f = jax.jit(jln)
        return timed(lambda: f(*args), ctx.jax_sync, lambda: np.asarray(f(*args)[:rb, :rt]))

    def ember():
        dev = ctx.em_dev
        x, w_, b_ = (em.tensor(a, device=dev) for a in (host, w, bias))
        dev.sync()

        def f():
            return em.layer_norm(x.swap_dims(1, 2), (c,), w_, b_, LN_EPS)
        fn = (lambda: f().primitive)        # materialized, as in row 2
        return timed(fn, ctx.ember_sync, lambda: _ember_host(f()[0:rb, 0:rt]),
                     lambda: {**_per_call_counts(ctx, fn), "device": str(dev)})

    row.run_group(ctx, [
        ("torch eager", "torch", lambda: torch_timed(tln)),
        ("torch.compile", "torch.compile", lambda: torch_timed(ctx.torch.compile(tln))),
        ("jax jit", "jax", jax_jit),
        ("ember", "ember", ember)], ROW_BUDGET_S[4])
    if floor_ms:
        row.notes.append(f"bandwidth floor = {floor_ms:.4f} ms ({nbytes} bytes at the copy "
                         f"bandwidth {ctx.copy_bw / 1e12:.3f} TB/s)")
    e = row.value("ember")
    row.target("ember <= 1.3x the bandwidth floor", _ratio(e, floor_ms),
               TARGETS["ln_over_floor"], "<=",
               None if floor_ms or e is None else "no copy bandwidth")
    return row


# -- row 5: matmul --------------------------------------------------------------------------
def _bf16_round(a: np.ndarray) -> np.ndarray:
    import ml_dtypes
    return a.astype(ml_dtypes.bfloat16).astype(np.float64)


class _Precision:
    """Within the block, torch's and ember's f32 matmuls use TF32 when ``tf32`` (else full
    f32); the settings before are restored after. ``ember_error``: why ember could not be
    set (its tf32 contender is then absent with that reason)."""

    def __init__(self, ctx: Ctx, tf32: bool):
        self.ctx, self.tf32 = ctx, tf32
        self.ember_error = None

    def __enter__(self):
        torch = self.ctx.torch
        if torch is not None:
            self.torch_old = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = self.tf32
        self.ember_old = None
        if self.tf32 and self.ctx.em_dev is not None:
            try:
                if not hasattr(em, "set_matmul_precision"):
                    raise RuntimeError("em.set_matmul_precision does not exist yet")
                get = getattr(em, "get_matmul_precision", None)
                self.ember_old = get() if get is not None else "highest"
                em.set_matmul_precision("tf32")
            except Exception as e:  # noqa: BLE001
                self.ember_error = e
        return self

    def __exit__(self, *exc):
        if self.ctx.torch is not None:
            self.ctx.torch.backends.cuda.matmul.allow_tf32 = self.torch_old
        if self.ember_old is not None:
            em.set_matmul_precision(self.ember_old)
        return False


def row_matmul(ctx: Ctx) -> Row:
    n = ctx.sizes["mm"]
    flops = 2.0 * n ** 3
    row = Row(ctx, 5, "TFLOP/s", True, f"C = A @ B, A and B [{n}, {n}]; TFLOP/s = 2 * {n}^3 / "
                                       f"seconds; bf16: bf16 in and out; tf32 and f32: f32 in "
                                       f"and out")
    a_h = host_normal((n, n), 5)
    b_h = host_normal((n, n), 6)
    ri, rj = min(n, 4), min(n, 256)
    # relative error (max |err| / max |ref|) allowed: above it the precision is not the one
    # named (f32 computed as tf32 gives about 3e-4; tf32 as bf16 about 3e-3)
    tol = {"bf16": 2e-2, "tf32": 2e-3, "f32": 2e-5}

    def timed(prec, fn, sync, corner):
        """``corner()`` -> C[:4, :256] of a fresh product, as f32 on the host."""
        a, b = (a_h, b_h) if prec != "bf16" else (_bf16_round(a_h), _bf16_round(b_h))
        ref = a[:ri].astype(np.float64) @ b[:, :rj].astype(np.float64)

        def finish(m):
            rel = float(np.abs(np.asarray(corner(), np.float64) - ref).max() /
                        np.abs(ref).max())
            return {"value": flops / m["best_s"] / 1e12, "ms": m["best_s"] * 1e3, **m,
                    "rel_err": rel, "wrong": rel > tol[prec]}
        return Timed(fn, sync, finish)

    def torch_mm(prec):
        torch = ctx.torch
        a, b = (torch.from_numpy(h).to(ctx.tdev) for h in (a_h, b_h))
        if prec == "bf16":
            a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
        return timed(prec, lambda: a @ b, ctx.torch_sync,
                     lambda: (a[:ri] @ b)[:, :rj].float().cpu().numpy())

    def jax_mm(prec):
        jax = ctx.jax
        jnp = jax.numpy
        a, b = (jax.device_put(h, ctx.jax_dev) for h in (a_h, b_h))
        if prec == "bf16":
            a, b = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
            f = jax.jit(lambda a, b: a @ b)
        else:
            algo = getattr(jax.lax.DotAlgorithmPreset,
                           {"tf32": "TF32_TF32_F32", "f32": "F32_F32_F32"}[prec])
            f = jax.jit(lambda a, b: jnp.matmul(a, b, precision=algo))
        return timed(prec, lambda: f(a, b), ctx.jax_sync,
                     lambda: np.asarray(f(a, b)[:ri, :rj].astype(jnp.float32)))

    def ember_mm(prec, setting):
        if setting.ember_error is not None:
            raise setting.ember_error
        dev = ctx.em_dev
        a, b = (em.tensor(h, device=dev) for h in (a_h, b_h))
        if prec == "bf16":
            a, b = a.cast(em.bf16), b.cast(em.bf16)
        dev.sync()
        t = timed(prec, lambda: (a @ b).primitive, ctx.ember_sync,
                  lambda: _ember_host((a[0:ri] @ b)[:, 0:rj].cast(em.f32)))
        finish = t.finish
        t.finish = lambda m: {**finish(m), "device": str(dev)}
        return t

    for prec in ("bf16", "tf32", "f32"):
        with _Precision(ctx, prec == "tf32") as setting:
            row.run_group(ctx, [
                (f"{prec} torch", "torch", lambda p=prec: torch_mm(p)),
                (f"{prec} jax jit", "jax", lambda p=prec: jax_mm(p)),
                (f"{prec} ember", "ember", lambda p=prec, s=setting: ember_mm(p, s))],
                ROW_BUDGET_S[5] / 3)
        t, e = row.value(f"{prec} torch"), row.value(f"{prec} ember")
        if prec != "f32":
            row.target(f"ember {prec} >= 0.95x torch", _ratio(e, t),
                       TARGETS["matmul_over_torch"], ">=", contender=f"{prec} ember",
                       why_na=None if e is not None and t else
                       (f"{prec} ember absent" if e is None else "torch absent"))
    row.notes.append("f32 lines: full precision (torch allow_tf32=False, JAX F32_F32_F32, "
                     "ember's default), for information")
    return row


# -- row 6: per-op overhead -----------------------------------------------------------------
def row_overhead(ctx: Ctx) -> Row:
    nops = ctx.sizes["ops"]
    row = Row(ctx, 6, "µs/op", False, f"a, b: 4-element f32 on the device; {nops} ops issued "
                                      f"in a Python loop, then one synchronize; µs per op")
    a_h = np.arange(4, dtype=np.float32)
    b_h = a_h + 1
    one = a_h + b_h
    chain = a_h.astype(np.float64) + nops * b_h

    def timed(loop, sync, check, extra=None):
        """``check()`` -> (a fresh result on the host, its float64 reference)."""
        def finish(m):
            got, ref = check()
            r = {"value": m["best_s"] / nops * 1e6, **m, **_check(got, ref, 1e-6, 1e-6)}
            r.update(extra() if extra else {})
            return r
        return Timed(loop, sync, finish)

    def torch_add(kind):
        a, b = (ctx.torch.from_numpy(h).to(ctx.tdev) for h in (a_h, b_h))
        if kind == "chain":
            def loop():
                c = a
                for _ in range(nops):
                    c = c + b
                return c
            return timed(loop, ctx.torch_sync, lambda: (loop().cpu().numpy(), chain))

        def loop():
            for _ in range(nops):
                c = a + b
            return c
        return timed(loop, ctx.torch_sync, lambda: (loop().cpu().numpy(), one))

    def ember_add(kind):
        dev = ctx.em_dev
        a, b = (em.tensor(h, device=dev) for h in (a_h, b_h))
        dev.sync()
        if kind == "materialized":
            def loop():
                for _ in range(nops):
                    c = (a + b).primitive
                return c
            check = (lambda: (_ember_host(a + b), one))
        elif kind == "discarded":
            def loop():
                for _ in range(nops):
                    c = a + b
                return c
            check = (lambda: (_ember_host(loop()), one))
        else:
            def loop():
                c = a
                for _ in range(nops):
                    c = c + b
                return c
            check = (lambda: (_ember_host(loop()), chain))
        return timed(loop, ctx.ember_sync, check,
                     lambda: {**_per_call_counts(ctx, loop, nops), "device": str(dev)})

    row.run_group(ctx, [
        ("torch eager", "torch", lambda: torch_add("one")),
        ("torch eager, chain c = c + b", "torch", lambda: torch_add("chain")),
        ("ember, each result materialized", "ember", lambda: ember_add("materialized")),
        ("ember, results discarded", "ember", lambda: ember_add("discarded")),
        ("ember, chain c = c + b", "ember", lambda: ember_add("chain"))], ROW_BUDGET_S[6])
    row.notes.append("target on 'each result materialized' ((a + b).primitive: every op runs "
                     "when issued, as in torch eager); the other ember lines may fuse or drop "
                     "work")
    e, t = row.value("ember, each result materialized"), row.value("torch eager")
    row.target("ember <= 1.5x torch eager", _ratio(e, t), TARGETS["overhead_over_torch"], "<=",
               contender="ember, each result materialized",
               why_na=None if e is not None and t else
               ("ember absent" if e is None else "torch absent"))
    return row


# -- rows 7-9: training steps ---------------------------------------------------------------
def copy_weights(torch, ember_model, net) -> None:
    """ember's params into ``net`` by path; linear weights transposed (ember [in, out],
    PyTorch [out, in]); every tensor of ``net`` must be set, with its exact shape."""
    src = {k: v.numpy() for k, v in ember_model.state_dict().items()}
    dst = net.state_dict()
    if set(src) != set(dst):
        raise RuntimeError(f"the PyTorch twin does not match the ember model: only ember "
                           f"{sorted(set(src) - set(dst))[:4]}, only PyTorch "
                           f"{sorted(set(dst) - set(src))[:4]}")
    linear = {f"{name}.weight" for name, mod in net.named_modules()
              if isinstance(mod, torch.nn.Linear)}
    new = {}
    for k, t in dst.items():
        a = src[k].T if k in linear else src[k]
        if tuple(a.shape) != tuple(t.shape):
            raise RuntimeError(f"{k}: ember {a.shape} vs PyTorch {tuple(t.shape)}")
        new[k] = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    net.load_state_dict(new)


def ember_models():
    from ember import nn

    class Mlp(em.Module):
        def __init__(self, sizes, *, device):
            self.fc1 = nn.Linear(sizes[0], sizes[1], device=device)
            self.fc2 = nn.Linear(sizes[1], sizes[2], device=device)

        def forward(self, x):
            return self.fc2(self.fc1(x).relu())

    class LeNet(em.Module):
        def __init__(self, *, device):
            self.conv1 = nn.Conv2d(1, 6, 5, device=device)
            self.conv2 = nn.Conv2d(6, 16, 5, device=device)
            self.pool = nn.MaxPool2d(2)
            self.fc1 = nn.Linear(16 * 4 * 4, 120, device=device)
            self.fc2 = nn.Linear(120, 84, device=device)
            self.fc3 = nn.Linear(84, 10, device=device)

        def forward(self, x):
            x = self.pool(self.conv1(x).relu())
            x = self.pool(self.conv2(x).relu())
            x = x.reshape(x.shape[0], -1)
            return self.fc3(self.fc2(self.fc1(x).relu()).relu())

    class Gpt(em.Module):
        def __init__(self, cfg, *, device):
            d = cfg["d"]
            self.tok = nn.Embedding(cfg["vocab"], d, device=device)
            self.pos = nn.Embedding(cfg["seq"], d, device=device)
            self.encoder = nn.TransformerEncoder(d, 4 * d, cfg["heads"], cfg["layers"],
                                                 dropout=0.0, norm_first=True,
                                                 activation="gelu", device=device)
            self.norm = nn.LayerNorm(d, device=device)
            self.head = nn.Linear(d, cfg["vocab"], device=device)
            self.positions = em.arange(cfg["seq"], device=device)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(self.positions)
            return self.head(self.norm(self.encoder(x, causal=True)))
    return Mlp, LeNet, Gpt


def torch_models(torch):
    nn, F = torch.nn, torch.nn.functional

    class Mlp(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.fc1 = nn.Linear(sizes[0], sizes[1])
            self.fc2 = nn.Linear(sizes[1], sizes[2])

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 6, 5)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.pool = nn.MaxPool2d(2)
            self.fc1 = nn.Linear(16 * 4 * 4, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = self.pool(torch.relu(self.conv1(x)))
            x = self.pool(torch.relu(self.conv2(x)))
            x = x.flatten(1)
            return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))

    class Attention(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.query, self.key = nn.Linear(d, d), nn.Linear(d, d)
            self.value, self.output = nn.Linear(d, d), nn.Linear(d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = (lin(x).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                       for lin in (self.query, self.key, self.value))
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.output(ctx.transpose(1, 2).reshape(b, t, d))

    class FeedForward(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.linear_inner, self.linear_outer = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            return self.linear_outer(F.gelu(self.linear_inner(x)))

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.mha, self.pwff = Attention(d, heads), FeedForward(d)
            self.norm_1, self.norm_2 = nn.LayerNorm(d), nn.LayerNorm(d)

        def forward(self, x):
            x = x + self.mha(self.norm_1(x))
            return x + self.pwff(self.norm_2(x))

    class Encoder(nn.Module):
        def __init__(self, d, heads, n):
            super().__init__()
            self.layers = nn.ModuleList(Block(d, heads) for _ in range(n))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    class Gpt(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            d = cfg["d"]
            self.tok, self.pos = nn.Embedding(cfg["vocab"], d), nn.Embedding(cfg["seq"], d)
            self.encoder = Encoder(d, cfg["heads"], cfg["layers"])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, cfg["vocab"])
            self.register_buffer("positions", torch.arange(cfg["seq"]), persistent=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(self.positions)
            return self.head(self.norm(self.encoder(x)))
    return Mlp, LeNet, Gpt


def training_data(kind: str, ctx: Ctx):
    """(inputs, int64 targets) on the host; the GPT's targets are one per position."""
    rng = np.random.default_rng({"mlp": 7, "lenet": 8, "gpt": 9}[kind])
    if kind == "mlp":
        bs = ctx.sizes["batch"]
        return (rng.standard_normal((bs, ctx.sizes["mlp"][0]), dtype=np.float32),
                rng.integers(0, ctx.sizes["mlp"][2], bs))
    if kind == "lenet":
        bs = ctx.sizes["batch"]
        return (rng.standard_normal((bs, 1, 28, 28), dtype=np.float32),
                rng.integers(0, 10, bs))
    g = ctx.sizes["gpt"]
    return (rng.integers(0, g["vocab"], (g["batch"], g["seq"])),
            rng.integers(0, g["vocab"], (g["batch"], g["seq"])))


class _NoTf32:
    """Within the block torch computes f32 matmuls and convs in full f32 (PyTorch's matmul
    default; cuDNN's default of TF32 convs turned off), as ember does by default."""

    def __init__(self, torch):
        self.torch = torch

    def __enter__(self):
        if self.torch is not None:
            b = self.torch.backends
            self.old = (b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32)
            b.cuda.matmul.allow_tf32 = b.cudnn.allow_tf32 = False
        return self

    def __exit__(self, *exc):
        if self.torch is not None:
            b = self.torch.backends
            b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = self.old
        return False


def row_training(ctx: Ctx, number: int, kind: str, target_key: str,
                 with_compile: bool = False) -> Row:
    x_h, y_h = training_data(kind, ctx)
    shape = "x".join(map(str, x_h.shape))
    row = Row(ctx, number, "ms/step", False, f"inputs {shape} on the device; forward, "
                                             f"cross-entropy (mean), backward, AdamW step (lr "
                                             f"{LR:g}, weight decay {WEIGHT_DECAY:g}); ms per "
                                             f"step")
    state: dict = {}
    first_logits: dict = {}      # contender -> logits of the first sample, before training

    def ember_model(dev):
        Mlp, LeNet, Gpt = ember_models()
        dev.seed(0)
        if kind == "mlp":
            return Mlp(ctx.sizes["mlp"], device=dev)
        if kind == "lenet":
            return LeNet(device=dev)
        return Gpt(ctx.sizes["gpt"], device=dev)

    def ember_weights():
        """The initial weights both frameworks start from: an ember model on the CPU (so
        they exist even when ember on the GPU is absent)."""
        if "cpu_model" not in state:
            state["cpu_model"] = ember_model(em.device("cpu"))
        return state["cpu_model"]

    def torch_step(compiled: bool):
        torch = ctx.torch
        F = torch.nn.functional
        Mlp, LeNet, Gpt = torch_models(torch)
        net = Mlp(ctx.sizes["mlp"]) if kind == "mlp" else LeNet() if kind == "lenet" \
            else Gpt(ctx.sizes["gpt"])
        copy_weights(torch, ember_weights(), net)
        net = net.to(ctx.tdev)
        x = torch.from_numpy(x_h).to(ctx.tdev)
        y = torch.from_numpy(y_h).to(ctx.tdev)
        model = torch.compile(net) if compiled else net
        opt = torch.optim.AdamW(net.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)

        def loss_of(out):
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        with torch.no_grad():
            out0 = net(x)
            loss0 = loss_of(out0).item()
            if not compiled:
                first_logits["torch"] = out0[:1].cpu().numpy()

        def step():
            opt.zero_grad(set_to_none=True)
            loss = loss_of(model(x))
            loss.backward()
            opt.step()
            return loss

        def finish(m):
            r = {"value": m["best_s"] * 1e3, **m, "loss0": loss0}
            if compiled:
                r["compile_s"] = m["first_call_s"]
            return r
        return Timed(step, ctx.torch_sync, finish, warmup=3)

    def ember_step():
        from ember import nn, optim
        dev = ctx.em_dev.autodiff()
        model = ember_model(dev).load_state_dict(ember_weights().state_dict())
        x = em.tensor(x_h, device=dev)
        y = em.tensor(y_h, device=dev)
        loss_fn = nn.CrossEntropyLoss()
        opt = optim.AdamW(lr=LR, weight_decay=WEIGHT_DECAY)

        def loss_of(out):
            return loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        with em.no_grad():
            out0 = model(x)
            loss0 = float(loss_of(out0))
            first_logits["ember"] = out0[0:1].numpy()
        holder = {"m": model}

        def step():
            m_ = holder["m"]
            loss = loss_of(m_(x))
            grads = em.GradientsParams.from_grads(loss.backward(), m_)
            holder["m"] = opt.step(LR, m_, grads)
            return loss

        def finish(m):
            return {"value": m["best_s"] * 1e3, **m, "loss0": loss0,
                    **_per_call_counts(ctx, step), "device": str(dev)}
        return Timed(step, lambda _=None: dev.sync(), finish, warmup=3)

    specs = [("torch eager", "torch", lambda: torch_step(False))]
    if with_compile:
        specs.append(("torch.compile", "torch.compile", lambda: torch_step(True)))
    specs.append(("ember", "ember", ember_step))
    with _NoTf32(ctx.torch):
        row.run_group(ctx, specs, ROW_BUDGET_S[number])

    # the same model from the same weights: the first logits and losses must agree
    ref = row.results.get("torch eager", {}).get("loss0")
    r = row.results.get("ember")
    if ref is not None and r is not None:
        r["loss0_rel_diff"] = abs(r["loss0"] - ref) / max(abs(ref), 1e-12)
        a, b = first_logits["ember"], first_logits["torch"]
        r["logits0_rel_diff"] = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))
        if r["loss0_rel_diff"] > 1e-3 or r["logits0_rel_diff"] > 1e-3:
            r["wrong"] = True
            row.notes.append(f"ember: first loss {r['loss0']:.6g} vs torch eager {ref:.6g}, "
                             f"logits differ by {r['logits0_rel_diff']:.1e} of their "
                             f"largest: not the same function")
    e, t = row.value("ember"), row.value("torch eager")
    limit = TARGETS[target_key]
    row.target(f"ember <= {limit:g}x torch eager", _ratio(e, t), limit, "<=",
               None if e is None or t else "torch absent")
    if with_compile:
        c = row.value("torch.compile")
        if e is not None and c:
            row.notes.append(f"ember / torch.compile = {e / c:.3f}")
    return row


# -- report ---------------------------------------------------------------------------------
def _git_commit() -> str | None:
    if os.environ.get("EMBER_COMMIT"):
        return os.environ["EMBER_COMMIT"]
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True, timeout=10).stdout
        return (commit + ("+dirty" if dirty.strip() else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def _gpu_info(ctx: Ctx) -> dict:
    info: dict = {}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                            "--format=csv,noheader"], capture_output=True, text=True,
                           timeout=20)
        if q.returncode == 0 and q.stdout.strip():
            name, mem, driver = [s.strip() for s in q.stdout.splitlines()[0].split(",")]
            info.update(name=name, memory=mem, driver=driver)
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    if "name" not in info and ctx.torch is not None and ctx.device == "cuda":
        info["name"] = ctx.torch.cuda.get_device_name(0)
    if ctx.torch is not None and ctx.device == "cuda":
        cap = ctx.torch.cuda.get_device_capability(0)
        info["compute_capability"] = f"{cap[0]}.{cap[1]}"
        info["torch_cuda"] = ctx.torch.version.cuda
    if ctx.xp is not None and ctx.xp is not np:
        try:
            info["cuda_runtime"] = ctx.xp.cuda.runtime.runtimeGetVersion()
            info.setdefault("name", ctx.xp.cuda.runtime.getDeviceProperties(0)["name"]
                            .decode())
        except Exception:  # noqa: BLE001
            pass
    return info


def _version(mod: str):
    try:
        from importlib.metadata import version
        return version(mod)
    except Exception:  # noqa: BLE001
        return None


def machine(ctx: Ctx) -> dict:
    from ember.cli.info import cpu_count, cpu_name
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _git_commit(),
        "device": ctx.device,
        "gpu": _gpu_info(ctx) if ctx.device == "cuda" else None,
        "telemetry": None if ctx.telemetry is None else (ctx.telemetry.why or "nvidia-smi"),
        "cpu": cpu_name(),
        "cpus": cpu_count()[1],
        "host_loop_ns": ctx.host_loop_ns,
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": platform.python_version(),
        "ember": em.__version__,
        "ember_device": str(ctx.em_dev) if ctx.em_dev is not None else None,
        "numpy": np.__version__,
        "torch": ctx.torch.__version__ if ctx.torch is not None else _version("torch"),
        "triton": _version("triton"),
        "jax": ctx.jax.__version__ if ctx.jax is not None else _version("jax"),
        "jaxlib": _version("jaxlib"),
        "cupy": ctx.xp.__version__ if ctx.xp is not None and ctx.xp is not np
        else _version("cupy"),
    }


def _fmt(v) -> str:
    if v is None:
        return "absent"
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"


_EXTRA_KEYS = (("of_copy", "of copy {:.0%}"), ("over_floor", "x floor {:.2f}"),
               ("first_call_s", "first call {:.3f} s"), ("compile_s", "compile {:.1f} s"),
               ("rel_err", "rel err {:.1e}"),
               ("max_abs_err", "max err {:.1e}"), ("loss0_rel_diff", "loss0 diff {:.1e}"),
               ("logits0_rel_diff", "logits0 diff {:.1e}"),
               ("compiles", "compiles {:d}"), ("second_call_s", "2nd call {:.4f} s"),
               ("another_new_kernel_s", "another new kernel {:.3f} s"),
               ("fresh_process_disk_cache_s", "fresh process, disk cache {:.3f} s"),
               ("kernel_variant", "kernel variant {}"))


def _verdict(t: dict) -> str:
    if t["met"] is None:
        return f"n/a ({t['why_not_measured']})"
    return "met" if t["met"] else "NOT MET"


def report(res: dict) -> str:
    m = res["machine"]
    g = m.get("gpu") or {}
    lines = []
    if res["quick"] or m["device"] == "cpu":
        lines.append("*** smoke test (--quick or --device cpu): do not record these "
                     "numbers ***")
    where = f"GPU: {g.get('name', 'unknown')} ({g.get('memory', '?')}, driver " \
            f"{g.get('driver', '?')}, compute capability {g.get('compute_capability', '?')})" \
        if m["device"] == "cuda" else f"CPU (logic test, tiny sizes): {m['cpu']}, " \
                                      f"{m['cpus']} CPUs"
    lines += [f"ember {m['ember']} (commit {m['commit']}) on {m['ember_device'] or 'absent'}, "
              f"{m['date']}", where,
              f"Python {m['python']}, numpy {m['numpy']}, torch {m['torch'] or 'absent'}, "
              f"triton {m['triton'] or 'absent'}, jax {m['jax'] or 'absent'}, cupy "
              f"{m['cupy'] or 'absent'}",
              f"host: {m['cpu']}, {m['cpus']} CPUs; Python's reference loop "
              f"{m['host_loop_ns']:.1f} ns an iteration at the start", ""]
    for num in sorted(res["rows"], key=int):
        r = res["rows"][num]
        lines.append(f"({num}) {r['title']} [{r['unit']}, "
                     f"{'higher' if r['higher_is_better'] else 'lower'} is better]")
        lines.append(f"    {r['definition']}")
        for name in r["order"]:
            c = r["results"].get(name)
            if c is None:
                lines.append(f"  {name:<36}{'absent':>10}  {r['absent'].get(name, '?')}")
                continue
            extra = []
            for key, spec in _EXTRA_KEYS:
                if c.get(key) is not None:
                    try:
                        extra.append(spec.format(c[key]))
                    except (ValueError, TypeError):
                        pass
            fused = c.get("fusion_per_call")
            if fused:
                extra.append("per call: " + " ".join(f"{k} {v:g}" for k, v in fused.items()))
            if c.get("wrong"):
                extra.append("WRONG")
            lines.append(f"  {name:<36}{_fmt(c['value']):>10}  {', '.join(extra)}")
        for note in r["notes"]:
            lines.append(f"  note: {note}")
        for t in r["targets"]:
            v = "" if t["value"] is None else f"{t['value']:.3f} "
            lines.append(f"  target: {t['what']}: {v}{t['op']} {t['limit']:g}: {_verdict(t)}")
        lines.append("")
    lines.append(f"targets ({g.get('name', 'unknown GPU')}, ember on "
                 f"{m['ember_device'] or 'absent'}, commit {m['commit']})"
                 if m["device"] == "cuda" else "targets (CPU logic test: meaningless)")
    lines.append(f"  {'row':<5}{'target':<44}{'measured':>10}  verdict")
    for num in sorted(res["rows"], key=int):
        for t in res["rows"][num]["targets"]:
            v = "-" if t["value"] is None else f"{t['value']:.3f}"
            lines.append(f"  {num:<5}{t['what']:<44}{v:>10}  {_verdict(t)}")
    if res["absent"]:
        lines.append("")
        for name, why in res["absent"].items():
            lines.append(f"absent: {name}: {why}")
    return "\n".join(lines)


ROW_FUNCS = {
    1: row_copy,
    2: row_gelu,
    3: row_first_compile,
    4: row_layer_norm,
    5: row_matmul,
    6: row_overhead,
    7: lambda ctx: row_training(ctx, 7, "mlp", "mlp_over_torch"),
    8: lambda ctx: row_training(ctx, 8, "lenet", "lenet_over_torch"),
    9: lambda ctx: row_training(ctx, 9, "gpt", "gpt_over_torch", with_compile=True),
}


def fresh_compile_caches() -> dict:
    """Empty Inductor and Triton cache dirs for this run (removed at exit), so the compile
    times reported are those of a first run; dirs the user set are kept (and noted)."""
    out = {}
    tmp = None
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        if os.environ.get(var):
            out[var] = os.environ[var] + " (set by the user: may be warm)"
            continue
        if tmp is None:
            tmp = tempfile.mkdtemp(prefix="ember-bench-compile-")
            atexit.register(shutil.rmtree, tmp, True)
        os.environ[var] = os.path.join(tmp, var.split("_")[0].lower())
        out[var] = "fresh"
    return out


def parse_rows(spec: str) -> list[int]:
    if spec.strip() in ("", "all"):
        return sorted(ROW_FUNCS)
    out = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    bad = [r for r in out if r not in ROW_FUNCS]
    if bad:
        raise ValueError(f"unknown rows {bad}; rows are 1-{max(ROW_FUNCS)}")
    return sorted(set(out))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=textwrap.dedent(__doc__.split("\n\n", 1)[1]))
    ap.add_argument("--rows", default="all", help="comma-separated rows (1-9) or ranges "
                    "('2,4', '1-3'); default: all")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cuda (default), or cpu: tiny sizes, to test this script")
    ap.add_argument("--quick", action="store_true", help="short runs (a smoke test; never "
                    "record its numbers)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="timing repeats per contender (default 5, 2 with --quick)")
    ap.add_argument("--skip", default="", help=f"comma-separated contender families to "
                    f"leave out (reported absent): {', '.join(FAMILIES)}")
    ap.add_argument("--fusion", choices=tuple(FUSION_ARG), default="default",
                    help="ember's device: em.device(DEVICE) as it is (default), or with "
                    "fusion=True (on) or fusion=False (off)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    ap.add_argument("--tracebacks", action="store_true", help="print the traceback of each "
                    "contender that fails (to stderr)")
    args = ap.parse_args(argv)
    try:
        rows = parse_rows(args.rows)
    except ValueError as e:
        ap.error(f"--rows: {e}")
    unknown = {s.strip() for s in args.skip.split(",") if s.strip()} - set(FAMILIES)
    if unknown:
        ap.error(f"--skip: unknown {sorted(unknown)}; choose from {', '.join(FAMILIES)}")
    if args.repeat is not None and args.repeat < 1:
        ap.error("--repeat must be >= 1")

    t_start = time.perf_counter()
    caches = fresh_compile_caches()
    ctx = Ctx(args)
    if ctx.telemetry is not None:
        atexit.register(ctx.telemetry.close)
    done: dict[int, Row] = {}
    if any(r in rows for r in (2, 4)):
        if 1 in rows:
            ctx.log("row 1 ...")
            done[1] = row_copy(ctx)
        ensure_copy_bw(ctx, done)
    for r in rows:
        if r in done:
            continue
        ctx.log(f"row {r} ...")
        t0 = time.perf_counter()
        done[r] = ROW_FUNCS[r](ctx)
        ctx.log(f"row {r} done in {time.perf_counter() - t0:.1f} s")
        ctx.free()
    res = {"machine": machine(ctx), "quick": ctx.quick, "rows_asked": rows,
           "rows": {str(k): v.to_json() for k, v in sorted(done.items())},
           "absent": ctx.absent, "targets": TARGETS,
           "seconds": time.perf_counter() - t_start, "compile_caches": caches,
           "settings": {"repeat": ctx.repeat, "target_s": ctx.target_s,
                        "budget_scale": ctx.budget_scale, "sizes": ctx.sizes}}
    print(report(res))
    print(f"\n{res['seconds']:.0f} s in all")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
