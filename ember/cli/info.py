"""`ember info`: which backends run here (and why the others do not), versions, the CPU."""
from __future__ import annotations

import json
import os
import platform
import sys


def cpu_name() -> str:
    """The CPU's model name, as the OS reports it (best effort)."""
    try:
        if sys.platform.startswith("linux"):
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key.strip() in ("model name", "Model", "Hardware", "cpu model"):
                        return value.strip()
        elif sys.platform == "darwin":
            import subprocess
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                 capture_output=True, text=True, timeout=5)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
    except Exception:  # a probe must never take `ember info` down
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_count() -> tuple[int | None, int | None]:
    """(logical CPUs of the machine, CPUs this process may run on)."""
    total = os.cpu_count()
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = total
    return total, usable


def versions() -> dict[str, str]:
    import ml_dtypes
    import numpy

    from .. import __version__
    return {
        "ember": __version__,
        "numpy": numpy.__version__,
        "ml_dtypes": getattr(ml_dtypes, "__version__", "unknown"),
        "python": f"{platform.python_version()} ({platform.python_implementation()})",
    }


def default_cpu() -> dict:
    """``em.device("cpu")``: Fusion(NdArray) and the C compiler of its kernels, or plain
    NdArray and why fusion is off."""
    from ..backend.fusion import Fusion
    from ..backend.ndarray import NdArray
    from ..tensor.device import device
    fused = Fusion(NdArray())
    out = {"device": str(device("cpu")), "fusion": fused.fusing, "compiler": None,
           "reason": None}
    comp = getattr(fused.runtime, "compiler", None)
    if comp is not None:
        version = (getattr(comp, "version", "") or "").splitlines()
        out["compiler"] = version[0] if version else comp.argv[0]
    elif not fused.fusing:
        if os.environ.get("EMBER_FUSION_RUNTIME", "") == "none":
            out["reason"] = "EMBER_FUSION_RUNTIME=none"
        else:
            out["reason"] = getattr(NdArray(), "kernel_runtime_reason", None) or \
                "no kernel runtime"
    return out


def report() -> dict:
    """Everything `ember info` prints, as plain data."""
    from ..backend.stacks import backend_info, stacks
    total, usable = cpu_count()
    return {
        "versions": versions(),
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cpu": {"name": cpu_name(), "logical_cpus": total, "usable_cpus": usable},
        "default_cpu": default_cpu(),
        "backends": [{"name": b.name, "usable": b.reason is None, "reason": b.reason,
                      "detail": b.detail} for b in backend_info()],
        "stacks": [s.name for s in stacks()],
    }


def run_info(as_json: bool = False) -> int:
    r = report()
    if as_json:
        print(json.dumps(r, indent=2))
        return 0
    v = r["versions"]
    cpu = r["cpu"]
    print(f"ember {v['ember']}")
    print(f"  Python     {v['python']}")
    print(f"  numpy      {v['numpy']}")
    print(f"  ml_dtypes  {v['ml_dtypes']}")
    print(f"  platform   {r['platform']}")
    print(f"  CPU        {cpu['name']} ({cpu['usable_cpus']} of {cpu['logical_cpus']} "
          f"logical CPUs usable)")
    usable = [b for b in r["backends"] if b["usable"]]
    unusable = [b for b in r["backends"] if not b["usable"]]
    width = max((len(b["name"]) for b in r["backends"]), default=0)
    print("\nusable backends:")
    for b in usable:
        print(f"  {b['name']:<{width}}  yes" + (f"  {b['detail']}" if b.get("detail") else ""))
    if not usable:
        print("  (none)")
    print("\nnot usable here:")
    for b in unusable:
        print(f"  {b['name']:<{width}}  {b['reason']}")
    if not unusable:
        print("  (none)")
    d = r["default_cpu"]
    how = f"C kernels by {d['compiler']}" if d["fusion"] else f"fusion off: {d['reason']}"
    print(f"\ndefault CPU device: {d['device']} ({how})")
    print("\nstacks tested by the conformance suite: " + ", ".join(r["stacks"]))
    return 0
