"""Small data sets bundled with ember, loaded with NumPy only (no downloads)."""
from .digits import load_digits  # noqa: F401

__all__ = ["load_digits"]
