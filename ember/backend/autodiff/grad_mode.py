"""Whether autodiff records ops, per thread (`em.no_grad()`, `em.enable_grad()`).

The mode is thread-local. So that the per-op check is cheap, ``ACTIVE[0]`` counts the
`no_grad`/`enable_grad` blocks open in any thread: while it is 0 every thread is in the
default mode (recording) and the thread-local is not read at all.
"""
from __future__ import annotations

import functools
import threading

_state = threading.local()
ACTIVE = [0]            # open no_grad/enable_grad blocks, all threads together
_lock = threading.Lock()


def is_grad_enabled() -> bool:
    """Whether autodiff devices record graphs in this thread."""
    return ACTIVE[0] == 0 or getattr(_state, "enabled", True)


class no_grad:
    """Context manager and decorator in which autodiff devices record no graph, in this
    thread only. ``with em.no_grad(): ...``, ``@em.no_grad()`` or ``@em.no_grad``."""

    __slots__ = ("_prev",)
    _value = False

    def __new__(cls, fn=None):
        self = object.__new__(cls)
        self._prev = []
        if fn is not None:
            if not callable(fn):
                raise TypeError(f"{cls.__name__}: expected a function to decorate, got "
                                f"{type(fn).__name__}")
            return self(fn)
        return self

    def __enter__(self):
        self._prev.append(getattr(_state, "enabled", True))
        _state.enabled = self._value
        with _lock:
            ACTIVE[0] += 1
        return self

    def __exit__(self, *exc):
        _state.enabled = self._prev.pop()
        with _lock:
            ACTIVE[0] -= 1
        return False

    def __call__(self, fn):
        cls = type(self)

        @functools.wraps(fn)
        def wrapper(*a, **k):
            with cls():
                return fn(*a, **k)
        return wrapper

    def __repr__(self):
        return f"ember.{type(self).__name__}()"


class enable_grad(no_grad):
    """Turns recording back on inside a `no_grad` block (this thread only)."""

    __slots__ = ()
    _value = True
