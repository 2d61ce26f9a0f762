"""ember's exceptions. Each message names the op, the shapes, dtypes or devices involved,
and what would be valid. This module imports nothing from ember, so every layer can use it."""


class EmberError(Exception):
    """Base class of every error ember raises on bad input."""


class ShapeError(EmberError, ValueError):
    """Shapes that do not fit an op: broadcasting, element counts, inner dims."""


class DTypeError(EmberError, TypeError):
    """A dtype an op does not accept, or a cast that is not allowed."""


class DeviceError(EmberError, ValueError):
    """Tensors on different devices in one op, or a device that cannot be used."""


class IndexError_(EmberError, IndexError):
    """A dim or an index out of range."""


class AutodiffError(EmberError, RuntimeError):
    """A backward pass that cannot run: no graph, a freed graph, a non-scalar root."""


class RecordError(EmberError, ValueError):
    """A record (checkpoint, state dict) whose keys or shapes do not match a module."""


class ConfigError(EmberError, ValueError):
    """A config (``@em.config``) or module option that does not fit: unknown or missing keys,
    a pattern that matches nothing."""


class BackendUnavailableError(EmberError, RuntimeError):
    """A backend that cannot run on this machine; the message says why."""


class OutOfMemoryError(EmberError, MemoryError):
    """A device ran out of memory; the message names the op, the size asked for and what is
    in use."""


class DatasetError(EmberError, ValueError):
    """A data set file or record that cannot be read (a bad CSV row, a truncated IDX file, a
    broken image, a SQLite value of the wrong type); the message names the file and the
    record."""


# `ember.errors.IndexError` reads naturally; the trailing underscore only avoids shadowing
# the builtin inside this module.
IndexError = IndexError_  # noqa: A001

__all__ = [
    "EmberError", "ShapeError", "DTypeError", "DeviceError", "IndexError", "AutodiffError",
    "RecordError", "ConfigError", "BackendUnavailableError", "DatasetError",
    "OutOfMemoryError",
]
