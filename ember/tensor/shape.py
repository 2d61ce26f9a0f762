"""`Shape`: a tuple of dim sizes with a few conveniences."""
from __future__ import annotations

import operator


class Shape(tuple):
    """The dims of a tensor. Compares equal to a plain tuple."""

    __slots__ = ()

    def __new__(cls, *dims):
        if len(dims) == 1 and not hasattr(dims[0], "__index__"):
            dims = dims[0]
        return super().__new__(cls, (operator.index(d) for d in dims))

    @property
    def dims(self) -> tuple:
        return tuple(self)

    def num_elements(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n

    numel = num_elements

    def __repr__(self):
        return f"Shape{tuple.__repr__(tuple(self))}"
