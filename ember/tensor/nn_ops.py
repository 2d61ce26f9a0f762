"""nn_ops functions of the Tensor API."""
from __future__ import annotations


class NNMethods:
    __slots__ = ()
