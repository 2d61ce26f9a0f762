"""activation functions of the Tensor API."""
from __future__ import annotations


class ActivationMethods:
    __slots__ = ()
