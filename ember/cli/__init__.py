"""The `ember` command line: `ember info`, `ember demo` (DESIGN.md §2, top layer)."""
