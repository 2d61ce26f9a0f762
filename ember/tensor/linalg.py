"""linalg functions of the Tensor API."""
from __future__ import annotations


class LinalgMethods:
    __slots__ = ()
