"""The GPU's SM clock, power and throttle reasons while a benchmark row is timed, sampled in
the background by ``nvidia-smi``.

A kernel close to compute-bound slows when the board reaches its power cap and lowers its
clock, while a lighter peer does not: on an H200, bench row 2's GELU ran at 99% of the copy
bandwidth in bursts and 89-94% in the table's sustained timing, at 1.4-1.97 GHz under the
700 W cap (BENCHMARKS.md, run 16). `bench/gpu.py` notes each row's clock range, peak power
and how often a cap held, so a table says which conditions its figures were taken in.

One ``nvidia-smi -lms`` process samples for the whole run (a process a sample would cost
the host-bound rows host time). It writes through a pseudo-terminal so that each sample
arrives as it is taken (into a pipe it would be block-buffered), and each sample carries
nvidia-smi's own timestamp, which the row windows (``time.time()``) are matched against.
"""
from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import threading
import time
from typing import NamedTuple

QUERY = "timestamp,clocks.sm,power.draw,power.limit,clocks_throttle_reasons.active"

#: the throttle-reason bits of ``clocks_throttle_reasons.active`` that slow a busy GPU
SLOWDOWNS = {0x4: "power cap", 0x8: "hardware slowdown", 0x20: "thermal (software)",
             0x40: "thermal (hardware)", 0x80: "power brake"}


class Sample(NamedTuple):
    t: float            # seconds since the epoch (nvidia-smi's timestamp, local time)
    sm_mhz: float
    watts: float
    limit_w: float
    reasons: int


def _number(s: str) -> float:
    try:
        return float(s)
    except ValueError:          # "[N/A]", "[Not Supported]"
        return float("nan")


def parse_line(line: str) -> Sample | None:
    """A sample from one line of ``--format=csv,noheader,nounits`` output of `QUERY`, or
    None for a line that is not one (a header, an error message)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 5:
        return None
    try:
        t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        reasons = int(parts[4], 16)
    except ValueError:
        return None
    return Sample(t, _number(parts[1]), _number(parts[2]), _number(parts[3]), reasons)


def summarize(samples) -> dict | None:
    """The clock range, peak power and the share of samples each slowdown held in, or None
    without samples."""
    samples = list(samples)
    if not samples:
        return None
    clocks = [s.sm_mhz for s in samples if s.sm_mhz == s.sm_mhz]
    watts = [s.watts for s in samples if s.watts == s.watts]
    limits = [s.limit_w for s in samples if s.limit_w == s.limit_w]
    held = {name: sum(1 for s in samples if s.reasons & bit) / len(samples)
            for bit, name in SLOWDOWNS.items()}
    return {"samples": len(samples),
            "sm_mhz": [min(clocks), max(clocks)] if clocks else None,
            "peak_w": max(watts) if watts else None,
            "limit_w": max(limits) if limits else None,
            "slowdowns": {k: round(v, 3) for k, v in held.items() if v > 0}}


def describe(summary: dict) -> str:
    """One line for a row's notes."""
    parts = []
    if summary["sm_mhz"]:
        lo, hi = summary["sm_mhz"]
        parts.append(f"SM clock {lo:.0f}-{hi:.0f} MHz" if lo != hi else
                     f"SM clock {lo:.0f} MHz")
    if summary["peak_w"] is not None:
        limit = f" of {summary['limit_w']:.0f} W" if summary["limit_w"] else ""
        parts.append(f"power up to {summary['peak_w']:.0f} W{limit}")
    slow = summary["slowdowns"]
    parts.append(", ".join(f"{name} in {share:.0%} of samples" for name, share in slow.items())
                 if slow else "no slowdown")
    n = summary["samples"]
    return f"GPU while timed ({n} sample{'' if n == 1 else 's'}): " + "; ".join(parts)


class Telemetry:
    """Samples of one GPU (``index``: nvidia-smi's ``--id``, an index or a UUID) every
    ``period_ms`` from now until `close`; ``why`` says why there are none (no nvidia-smi,
    it failed to start)."""

    def __init__(self, index: int | str = 0, period_ms: int = 200, exe: str | None = None):
        self.samples: list[Sample] = []
        self.why = None
        self._proc = None
        self._fd = None
        exe = exe or shutil.which("nvidia-smi")
        if exe is None:
            self.why = "nvidia-smi not found"
            return
        if not hasattr(os, "openpty"):
            self.why = "no pseudo-terminals on this platform"
            return
        master, slave = os.openpty()
        try:
            self._proc = subprocess.Popen(
                [exe, f"--id={index}", f"--query-gpu={QUERY}",
                 "--format=csv,noheader,nounits", f"-lms={period_ms}"],
                stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.DEVNULL,
                close_fds=True)
        except OSError as e:
            os.close(master)
            self.why = f"nvidia-smi did not start: {e}"
            return
        finally:
            os.close(slave)
        self._fd = master
        self._thread = threading.Thread(target=self._read, name="gpu-telemetry", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._fd, 4096)
            except OSError:             # the process ended (EIO on the pseudo-terminal)
                break
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                s = parse_line(line.decode(errors="replace"))
                if s is not None:
                    self.samples.append(s)

    def window(self, t0: float, t1: float, settle_s: float = 0.5) -> dict | None:
        """`summarize` of the samples taken between ``t0`` and ``t1`` (``time.time()``),
        waiting up to ``settle_s`` for the last of them to arrive."""
        if self._proc is None:
            return None
        deadline = time.time() + settle_s
        while time.time() < deadline and not (self.samples and self.samples[-1].t >= t1):
            if self._proc.poll() is not None:
                break
            time.sleep(0.02)
        return summarize(s for s in list(self.samples) if t0 <= s.t <= t1)

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        if self._fd is not None:
            self._thread.join(timeout=2)
            os.close(self._fd)
            self._fd = None
