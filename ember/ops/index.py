"""index ops (declared by their family module)."""
