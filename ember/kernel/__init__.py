"""Kernels: the IR (`ir`), its math library, renderers, compile caches and autotune
(DESIGN.md §5)."""
