"""Elementwise ops: unary math, binary arithmetic, comparisons, logic, select and cast.

Unary and binary ops broadcast like NumPy. Binary inputs arrive already promoted to one
dtype by the Tensor API (``promote``); a scalar operand stays a Python scalar.
"""
from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ._api import api
from .registry import declare
from .rules import broadcast_shapes, require_kind

FLOAT = "float"
NUMERIC = "float int"
INTEGRAL = "int bool"
ANY = "float int bool"


# -- rule builders --------------------------------------------------------------------------
def unary_infer(name, kinds, out=None):
    """Same shape; dtype kept (or ``out``); input kind must be in ``kinds``."""
    def infer(x):
        d = x._dtype
        if d.kind not in kinds:
            require_kind(name, d, kinds)
        return (x._shape, d if out is None else out)
    return infer


def binary_infer(name, kinds, out=None):
    """Broadcast shapes of tensor or scalar operands; dtype of the (promoted) tensors."""
    def infer(a, b):
        if hasattr(a, "_shape"):
            d = a._dtype
            if hasattr(b, "_shape"):
                sa, sb = a._shape, b._shape
                shape = sa if sa == sb else broadcast_shapes(name, sa, sb)
            else:
                shape = a._shape
        else:
            d, shape = b._dtype, b._shape
        if d.kind not in kinds:
            require_kind(name, d, kinds)
        return (shape, d if out is None else out)
    return infer


def unary(name, numpy, vjp=None, *, kinds=FLOAT, out=None, doc=""):
    return declare(name, "unary", nin=1, infer=unary_infer(name, kinds, out), numpy=numpy,
                   vjp=vjp, doc=doc)


def binary(name, numpy, vjp=None, *, kinds=NUMERIC, out=None, promote="same", doc=""):
    return declare(name, "binary", nin=2, infer=binary_infer(name, kinds, out), numpy=numpy,
                   vjp=vjp, promote=promote, doc=doc)


def _is_t(x):
    return hasattr(x, "_shape")


# -- arithmetic -----------------------------------------------------------------------------
ADD = binary("add", np.add, lambda g, i, o: (g, g))
SUB = binary("sub", np.subtract, lambda g, i, o: (g, -g))
MUL = binary("mul", np.multiply, lambda g, i, o: (g * i[1] if _is_t(i[0]) else None,
                                                  g * i[0] if _is_t(i[1]) else None))
DIV = binary("div", np.true_divide,
             lambda g, i, o: (g / i[1] if _is_t(i[0]) else None,
                              -g * o / i[1] if _is_t(i[1]) else None),
             kinds=FLOAT, promote="float", doc="true division; ints are promoted to float")

NEG = unary("neg", np.negative, lambda g, i, o: (-g,), kinds=NUMERIC)
EXP = unary("exp", np.exp, lambda g, i, o: (g * o,))
LOG = unary("log", np.log, lambda g, i, o: (g / i[0],))


# -- cast -----------------------------------------------------------------------------------
def _cast_infer(x, dtype):
    return (x._shape, dtype)


def _cast_numpy(x, dtype):
    if dtype.kind != "float" and x.dtype.kind == "f":
        # float -> int truncates toward zero, as in C, PyTorch and NumPy; nan/inf give 0
        # rather than undefined values.
        x = np.where(np.isfinite(x), x, 0)
    return np.asarray(x).astype(dtype.np)


def _cast_vjp(g, i, o, dtype):
    src = i[0]._dtype
    return (g.cast(src) if src.is_float and dtype.is_float else None,)


CAST = declare("cast", "cast", nin=1, attrs=("dtype",), infer=_cast_infer, numpy=_cast_numpy,
               vjp=_cast_vjp, doc="convert to another dtype")


# -- comparisons ----------------------------------------------------------------------------
EQUAL = binary("equal", np.equal, kinds=ANY, out=dt.bool_)
