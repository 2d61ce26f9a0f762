"""`Gradients`: the value `backward()` returns, mapping tracked tensors to their gradients."""
from __future__ import annotations


class Gradients:
    """Gradients of leaf tensors, keyed by their stable ids. Nothing else is mutated by
    backward: read a gradient with ``tensor.grad(grads)``."""

    __slots__ = ("_grads",)

    def __init__(self, grads=None):
        self._grads = dict(grads or {})

    def get(self, key):
        return self._grads.get(key)

    def remove(self, key):
        return self._grads.pop(key, None)

    def replace(self, key, value):
        self._grads[key] = value

    def keys(self):
        return self._grads.keys()

    def items(self):
        return self._grads.items()

    def __len__(self):
        return len(self._grads)

    def __contains__(self, key):
        return key in self._grads

    def __repr__(self):
        return f"Gradients({len(self._grads)} tensors)"
