"""The NdArray backend: CPU tensors stored as NumPy arrays (bf16 through ml_dtypes)."""
from .backend import NdArray  # noqa: F401
