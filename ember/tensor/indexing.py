"""indexing functions of the Tensor API."""
from __future__ import annotations


class IndexingMethods:
    __slots__ = ()
