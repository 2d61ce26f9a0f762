"""sort ops (declared by their family module)."""
