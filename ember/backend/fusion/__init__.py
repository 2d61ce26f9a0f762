"""The Fusion decorator: lazy op streams planned into generated kernels (DESIGN.md §5)."""
from .backend import Fusion  # noqa: F401
from .stream import FusionPrim  # noqa: F401
from .stats import stats, reset_stats  # noqa: F401
