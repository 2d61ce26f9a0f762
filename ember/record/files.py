"""Records on disk: saving modules (and plain named tensors) as safetensors or msgpack,
reading them back with the format detected from the content."""
from __future__ import annotations

import dataclasses
import json
import os
import warnings

import numpy as np

from .. import dtype as dt
from ..errors import RecordError
from . import msgpack_format, safetensors_format
from .load import apply_arrays

__all__ = ["FORMAT_VERSION", "FORMATS", "PRECISIONS", "Record", "save_record", "load_record",
           "save_module", "load_module_record", "detect_format"]

FORMAT_VERSION = 1                  # bump when the layout changes; readers refuse newer
FORMATS = ("safetensors", "msgpack")
PRECISIONS = ("full", "half")
_ALIASES = {"safetensors": "safetensors", "st": "safetensors", "msgpack": "msgpack",
            "mpk": "msgpack"}


@dataclasses.dataclass
class Record:
    """A record read from disk: ``tensors`` {name: ndarray} in file order, ``ids``
    {name: param id} (empty when the file has none), ``metadata`` (the user metadata given to
    `save_record`), and what wrote it."""
    path: str
    format: str
    tensors: dict
    ids: dict
    metadata: dict
    precision: str = "full"
    format_version: int = FORMAT_VERSION
    ember_version: str | None = None
    kind: str = "tensors"
    dtypes: dict = dataclasses.field(default_factory=dict)


def _version() -> str:
    import ember
    return getattr(ember, "__version__", "unknown")


def _norm_format(format) -> str:
    f = _ALIASES.get(str(format).lower()) if isinstance(format, str) else None
    if f is None:
        raise RecordError(f"unknown record format {format!r}; valid: {', '.join(FORMATS)}")
    return f


def _host(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "numpy") and hasattr(x, "dtype") and hasattr(x, "device"):
        return np.asarray(x.numpy())     # an ember Tensor (or Param) on any device
    return np.asarray(x)


def _write(path, format, arrays, meta: dict) -> None:
    meta = {k: v for k, v in meta.items() if v is not None}
    if format == "safetensors":
        safetensors_format.write_safetensors(
            path, arrays, {"format": "ember", "format_version": str(FORMAT_VERSION), **meta})
    else:
        msgpack_format.write_msgpack(path, arrays, meta, format_version=FORMAT_VERSION)


def save_record(tensors, path, *, format: str = "safetensors", metadata: dict | None = None,
                ids: dict | None = None) -> None:
    """Save named tensors (a mapping name -> Tensor or ndarray) to ``path`` atomically, with
    JSON-serializable ``metadata``. The building block for checkpoints of anything that is
    not a module (optimizer state, a training loop's counters)."""
    format = _norm_format(format)
    arrays = [(str(k), _host(v)) for k, v in
              (tensors.items() if hasattr(tensors, "items") else tensors)]
    try:
        user = json.dumps(metadata) if metadata is not None else None
    except TypeError as e:
        raise RecordError(f"save_record: metadata must be JSON-serializable ({e})") from None
    _write(path, format, arrays, {"kind": "tensors", "ember_version": _version(),
                                  "user_metadata": user,
                                  "param_ids": json.dumps(ids) if ids else None})


def detect_format(path) -> str:
    """``"safetensors"`` or ``"msgpack"`` from the file's first bytes; RecordError naming the
    file for anything else (a PyTorch checkpoint, an empty or foreign file)."""
    p = os.fspath(path)
    try:
        with open(path, "rb") as f:
            head = f.read(16)
            size = os.fstat(f.fileno()).st_size
    except OSError as e:
        raise RecordError(f"{p}: cannot open record: {e.strerror or e}") from None
    if size == 0:
        raise RecordError(f"{p}: empty file, not a record (truncated?)")
    if safetensors_format.looks_like_safetensors(head, size):
        return "safetensors"
    if head[:4] == b"PK\x03\x04" or (len(head) > 1 and head[0] == 0x80 and 2 <= head[1] <= 5):
        raise RecordError(f"{p}: looks like a PyTorch checkpoint, not an ember record; use "
                          f"ember.record.import_pytorch(path, module)")
    ext = os.path.splitext(p)[1].lower()
    if ext == ".safetensors" and len(head) >= 8:
        return "safetensors"    # a damaged one: the reader says exactly what is wrong
    if msgpack_format.looks_like_msgpack(head) or ext in (".mpk", ".msgpack"):
        return "msgpack"
    raise RecordError(f"{p}: not an ember record (neither safetensors nor msgpack; the file "
                      f"starts with {head[:8]!r}) — corrupt or truncated?")


def _json_meta(p, meta, key, default):
    raw = meta.get(key)
    if raw is None:
        return default
    try:
        val = json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        raise RecordError(f"{p}: corrupt record metadata {key!r}") from None
    if not isinstance(val, type(default)):
        raise RecordError(f"{p}: corrupt record metadata {key!r}")
    return val


def load_record(path) -> Record:
    """Read a record (either format, detected from the content). Also reads safetensors files
    written by other tools (no ids, no metadata)."""
    p = os.fspath(path)
    format = detect_format(path)
    if format == "safetensors":
        tensors, meta = safetensors_format.read_safetensors(path)
        version = meta.get("format_version", str(FORMAT_VERSION))
        try:
            version = int(version)
        except ValueError:
            raise RecordError(f"{p}: corrupt record metadata format_version "
                              f"{version!r}") from None
    else:
        tensors, meta, version = msgpack_format.read_msgpack(path)
    if version > FORMAT_VERSION:
        raise RecordError(f"{p}: record format version {version} (written by ember "
                          f"{meta.get('ember_version', '?')}) is newer than this ember "
                          f"({_version()}) reads (up to {FORMAT_VERSION}); upgrade ember")
    precision = meta.get("precision", "full")
    return Record(path=p, format=format, tensors=tensors,
                  ids=_json_meta(p, meta, "param_ids", {}),
                  metadata=_json_meta(p, meta, "user_metadata", {}),
                  precision=precision, format_version=version,
                  ember_version=meta.get("ember_version"), kind=meta.get("kind", "tensors"),
                  dtypes=_json_meta(p, meta, "dtypes", {}))


def save_module(module, path, format: str = "safetensors", precision: str = "full") -> None:
    """Save every param of ``module`` by path (values, dtypes, shapes, param ids) to ``path``
    atomically. ``format``: "safetensors" (default) or "msgpack". ``precision``: "full"
    keeps each param's dtype; "half" stores f32/f64 params as f16 (f16/bf16 and int params
    are kept as they are) and `load_module_record` casts them back to the module's dtypes.
    Values beyond f16's range become inf: a warning names those params."""
    format = _norm_format(format)
    if precision not in PRECISIONS:
        raise RecordError(f"save_module: unknown precision {precision!r}; valid: "
                          f"{', '.join(PRECISIONS)}")
    arrays, ids, dtypes, overflow = [], {}, {}, []
    for path_, prm in module.named_parameters():
        arr = _host(prm)
        dtypes[path_] = prm.dtype.short
        ids[path_] = str(prm.id)
        if precision == "half" and prm.dtype in (dt.float32, dt.float64):
            with np.errstate(over="ignore"):
                half = arr.astype(np.float16)
            if (np.isinf(half) & np.isfinite(arr)).any():
                overflow.append(path_)
            arr = half
        arrays.append((path_, arr))
    if overflow:
        warnings.warn(f"save_module(precision='half'): values of {', '.join(overflow)} are "
                      f"beyond float16's range (65504) and are stored as inf; save with "
                      f"precision='full'", RuntimeWarning, stacklevel=2)
    _write(path, format, arrays, {"kind": "module", "ember_version": _version(),
                                  "precision": precision, "module": type(module).__name__,
                                  "param_ids": json.dumps(ids),
                                  "dtypes": json.dumps(dtypes)})


def load_module_record(module, path, strict: bool = True):
    """A new module with the params of ``module`` replaced by the record at ``path`` (either
    format, detected from the content), cast to the module's dtypes and put on its params'
    devices; param ids are restored from the record. strict (default): missing keys,
    unexpected keys and shape mismatches are all listed in one RecordError and nothing is
    loaded. ``strict=False`` returns ``(module, LoadReport)``."""
    rec = load_record(path)
    return apply_arrays(module, rec.tensors, source=rec.path, strict=strict, ids=rec.ids)
