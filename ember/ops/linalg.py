"""linalg ops (declared by their family module)."""
