"""The op registry (DESIGN.md §3). Importing this package declares every primitive op."""
from .registry import OPS, Op, declare, get  # noqa: F401
from . import (  # noqa: F401  (each module declares its ops on import)
    elementwise, reduce, view, index, linalg, linear, creation, nn, sort, activation, optim,
    attention,
)
