"""The registry of backend stacks that tests and `ember info` iterate over.

A backend or decorator joins the conformance suite by registering a stack here; no test code
changes. A stack that cannot run on this machine says why, and is reported as skipped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Stack:
    name: str                              # e.g. "ndarray", "autodiff(ndarray)"
    make_device: Callable[[], object]      # returns a Device
    availability: Callable[[], str | None]  # None when usable, else the reason it is not
    autodiff: bool = False


STACKS: dict[str, Stack] = {}


def register_stack(name, make_device, availability=lambda: None, *, autodiff=False):
    STACKS[name] = Stack(name, make_device, availability, autodiff)


def stacks() -> list[Stack]:
    return list(STACKS.values())


@dataclass(frozen=True)
class BackendInfo:
    name: str
    reason: str | None   # None when usable
    detail: str | None = None   # what a usable backend runs on (e.g. its GPUs)


BACKEND_PROBES: dict[str, Callable[[], str | None]] = {}
BACKEND_DETAILS: dict[str, Callable[[], str]] = {}


def register_probe(name: str, probe: Callable[[], str | None], detail=None) -> None:
    """``probe()`` returns None when the backend is usable here, else why not; ``detail()``,
    asked only when it is usable, says what it runs on."""
    BACKEND_PROBES[name] = probe
    if detail is not None:
        BACKEND_DETAILS[name] = detail


def backend_info() -> list[BackendInfo]:
    out = []
    for name, probe in BACKEND_PROBES.items():
        try:
            reason = probe()
        except Exception as e:  # a probe must never take `ember info` down
            reason = f"probe failed: {type(e).__name__}: {e}"
        detail = None
        if reason is None and name in BACKEND_DETAILS:
            try:
                detail = BACKEND_DETAILS[name]()
            except Exception as e:
                detail = f"(details unavailable: {type(e).__name__}: {e})"
        out.append(BackendInfo(name, reason, detail))
    return out
