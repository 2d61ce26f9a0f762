"""Elementwise functions of the Tensor API and their operator overloads."""
from __future__ import annotations

from .. import dtype as dt
from ..ops import elementwise as E
from .dispatch import binary, unary


def add(a, b):
    return binary(E.ADD, a, b)


def sub(a, b):
    return binary(E.SUB, a, b)


def mul(a, b):
    return binary(E.MUL, a, b)


def div(a, b):
    """True division; int inputs give float results."""
    return binary(E.DIV, a, b)


def neg(x):
    return unary(E.NEG, x)


def exp(x):
    return unary(E.EXP, x)


def log(x):
    return unary(E.LOG, x)


def cast(x, dtype):
    """``x`` converted to ``dtype`` (float to int truncates toward zero)."""
    dtype = dt.as_dtype(dtype)
    if x._dtype is dtype:
        return x
    return unary(E.CAST, x, {"dtype": dtype})


def equal(a, b):
    return binary(E.EQUAL, a, b)


class ElementwiseMethods:
    __slots__ = ()
    add = add
    sub = sub
    mul = mul
    div = div
    neg = neg
    exp = exp
    log = log
    equal = equal

    def __add__(self, o):
        return binary(E.ADD, self, o)

    def __radd__(self, o):
        return binary(E.ADD, o, self)

    def __sub__(self, o):
        return binary(E.SUB, self, o)

    def __rsub__(self, o):
        return binary(E.SUB, o, self)

    def __mul__(self, o):
        return binary(E.MUL, self, o)

    def __rmul__(self, o):
        return binary(E.MUL, o, self)

    def __truediv__(self, o):
        return binary(E.DIV, self, o)

    def __rtruediv__(self, o):
        return binary(E.DIV, o, self)

    def __neg__(self):
        return unary(E.NEG, self)

    def __pos__(self):
        return self

    def __eq__(self, o):
        return binary(E.EQUAL, self, o)
