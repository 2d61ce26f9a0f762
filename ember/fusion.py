"""``em.fusion``: the Fusion decorator's counters and switches (DESIGN.md §5).

``em.fusion.stats()`` gives the kernels launched, ops run unfused, plan-cache hits and misses
and compile time; ``em.fusion.reset_stats()`` zeroes them. ``EMBER_FUSION_LOG=1`` prints each
new plan and its generated source.
"""
from .backend.fusion import Fusion, FusionPrim, reset_stats, stats  # noqa: F401

__all__ = ["Fusion", "FusionPrim", "stats", "reset_stats"]
