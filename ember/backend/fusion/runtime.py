"""Which kernel runtime a Fusion backend uses, and the NumPy-interpreter runtime for tests.

A kernel runtime has ``compile(kernel) -> program`` and ``launch(program, inputs, args) ->
outputs`` (contiguous NumPy arrays). It may list ``features``; ``"broadcast_reduce"`` means it
runs `Reduce` kernels with ``broadcast=True`` itself (otherwise fusion splits them in two).

``Fusion(inner)`` takes ``inner.kernel_runtime`` (the generated-C runtime on NdArray). With
no runtime it runs unfused: every op goes straight to the inner backend, with identical
results, and ember says so once. ``EMBER_FUSION_RUNTIME`` overrides the choice for tests:
``interpret`` (the IR interpreter, slow, exact), ``none`` (unfused), ``auto`` (default).
"""
from __future__ import annotations

import functools

import os
import threading
import time
import warnings

_said = set()
_said_lock = threading.Lock()


class InterpretRuntime:
    """Runs kernels with the NumPy IR interpreter (`ember.kernel.interpret`): a reference
    runtime for tests and for checking plans without a C compiler."""

    name = "interpret"

    features = frozenset({"broadcast_reduce"})

    def __init__(self):
        from ...kernel import interpret
        self._evaluate = interpret.evaluate
        self._native = frozenset(getattr(interpret, "FEATURES", ()))

    def available(self) -> bool:
        return True

    def compile(self, kernel):
        return kernel

    def launch(self, program, inputs, args):
        if getattr(program, "broadcast", False) and "broadcast_reduce" not in self._native:
            # one kernel, evaluated in its two sweeps: reduce, then the broadcast epilogue
            from .lower import split_broadcast
            red, ew = split_broadcast(program)
            (mid,) = self._evaluate(red, list(inputs), list(args))
            return self._evaluate(ew, list(inputs) + [mid], list(args))
        return self._evaluate(program, list(inputs), list(args))

    def source(self, program) -> str:
        return repr(program)


def compile_counted(runtime, kernels) -> tuple:
    """``runtime``'s programs of ``kernels``, their compiles counted in `em.fusion.stats()`
    (``compiles``, ``compile_time_s``: memory and disk cache hits included)."""
    from .stats import add
    t0 = time.perf_counter()
    programs = tuple([runtime.compile(k) for k in kernels])
    add("compile_time_s", time.perf_counter() - t0)
    add("compiles", len(programs))
    return programs


def launcher_of(runtime, program):
    """``run(inputs, args=()) -> outputs`` for ``program``: the runtime's launcher where it
    has one (a caller whose inputs keep their layouts: checked once), else its launch."""
    launcher = getattr(runtime, "launcher", None)
    if launcher is not None:
        return launcher(program)
    return functools.partial(_launch, runtime.launch, program)


def _launch(launch, program, inputs, args=()):
    return launch(program, inputs, args)


def _say_once(key, text):
    with _said_lock:
        if key in _said:
            return
        _said.add(key)
    warnings.warn(text, RuntimeWarning, stacklevel=4)


def resolve(inner, spec: str = "auto"):
    """The kernel runtime for ``Fusion(inner)`` (None: run unfused)."""
    if spec == "auto":
        spec = os.environ.get("EMBER_FUSION_RUNTIME", "auto") or "auto"
    if spec == "none":
        return None
    if spec == "interpret":
        try:
            return InterpretRuntime()
        except ImportError as e:
            _say_once(("interpret",), f"ember: EMBER_FUSION_RUNTIME=interpret, but the IR "
                                      f"interpreter is missing ({e}); running unfused")
            return None
    if spec not in ("auto", "c", "native"):
        raise ValueError(f"Fusion: unknown kernel runtime {spec!r}; valid: 'auto', "
                         f"'interpret', 'none'")
    rt = None
    try:
        rt = getattr(inner, "kernel_runtime", None)
    except Exception as e:  # a broken runtime must not take the backend down
        why = f"{type(e).__name__}: {e}"
    else:
        why = getattr(inner, "kernel_runtime_reason", None) or \
            f"{inner.describe()} has no kernel runtime"
    if rt is None and not getattr(inner, "kernel_runtime_warned", False):
        _say_once(("none", inner.describe()),
                  f"ember: fusion is off on {inner.describe()}: {why}. Ops run unfused on "
                  f"{inner.describe()}, with identical results.")
    return rt
