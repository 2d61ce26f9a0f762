"""nn ops (declared by their family module)."""
