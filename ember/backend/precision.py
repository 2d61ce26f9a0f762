"""The precision of f32 matrix products: ``em.set_matmul_precision``.

``"highest"`` (the default): f32 products accumulate full f32 products, as on the CPU.
``"high"`` and ``"tf32"``: a GPU backend may round f32 operands to TF32 (10 mantissa bits) on
tensor cores, several times faster, as ``torch.backends.cuda.matmul.allow_tf32`` and JAX's
``default_matmul_precision`` allow. The setting is process-wide; backends without such
hardware (NdArray) ignore it. f16 and bf16 products always use tensor cores where present,
accumulating in f32.
"""
from __future__ import annotations

from ..errors import ConfigError

PRECISIONS = ("highest", "high", "tf32")

_current = "highest"


def set_matmul_precision(precision: str) -> None:
    """Choose the precision of f32 matmuls (and convolutions done as matmuls)."""
    global _current
    if precision not in PRECISIONS:
        raise ConfigError(f"set_matmul_precision: unknown precision {precision!r}; valid: "
                          f"{', '.join(repr(p) for p in PRECISIONS)}")
    _current = precision


def get_matmul_precision() -> str:
    return _current


def allow_tf32() -> bool:
    """Whether f32 matmuls may use TF32 tensor cores."""
    return _current != "highest"
