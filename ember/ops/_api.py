"""Late access to the Tensor API for derivative rules.

Derivatives are written with ember ops so that backward passes run (and fuse) like forward
passes. The Tensor API sits above the registry, so rules reach it through this proxy, which
imports ``ember.tensor.functional`` on first use instead of at import time.
"""


class _TensorAPI:
    __slots__ = ("_mod",)

    def __init__(self):
        self._mod = None

    def __getattr__(self, name):
        mod = self._mod
        if mod is None:
            from ..tensor import functional as mod
            object.__setattr__(self, "_mod", mod)
        return getattr(mod, name)


api = _TensorAPI()


_apply = None


def apply_op(op, inputs, attrs):
    """Run registry op ``op`` on Tensors from a derivative rule (``dispatch.apply``, imported
    on first use for the same reason as `api`)."""
    global _apply
    if _apply is None:
        from ..tensor.dispatch import apply as _a
        _apply = _a
    return _apply(op, inputs, attrs)


def run_op(op, inputs, **attrs):
    """`apply_op` with the attrs as keywords."""
    return apply_op(op, inputs, attrs)
