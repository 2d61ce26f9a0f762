"""Whether autodiff records ops, per thread (`em.no_grad()`)."""
from __future__ import annotations

import threading

_state = threading.local()


def is_grad_enabled() -> bool:
    return getattr(_state, "enabled", True)


class no_grad:
    """Context manager (and decorator) in which autodiff devices record no graph."""

    __slots__ = ("_prev",)
    _value = False

    def __enter__(self):
        self._prev = is_grad_enabled()
        _state.enabled = self._value

    def __exit__(self, *exc):
        _state.enabled = self._prev
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*a, **k):
            with type(self)():
                return fn(*a, **k)
        return wrapper


class enable_grad(no_grad):
    """Turns recording back on inside a `no_grad` block."""

    __slots__ = ()
    _value = True
