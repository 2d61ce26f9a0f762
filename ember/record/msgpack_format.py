"""ember's msgpack record format (Burn's NamedMpk in spirit): one msgpack map

    {"format": "ember-record", "format_version": 1, "metadata": {str: str},
     "tensors": [{"name": str, "dtype": "f32", "shape": [..], "data": <bin, little-endian>},
                 ...]}

Needs the ``msgpack`` package (the ``train`` extra)."""
from __future__ import annotations

import os
import sys

import numpy as np

from .. import dtype as dt
from ..errors import RecordError
from .atomic import atomic_write

__all__ = ["write_msgpack", "read_msgpack", "looks_like_msgpack", "FORMAT_NAME"]

FORMAT_NAME = "ember-record"


def _msgpack():
    try:
        import msgpack
    except ImportError:
        raise RecordError("the msgpack record format needs the 'msgpack' package: "
                          "pip install msgpack (or ember[train]); the default format, "
                          "safetensors, needs nothing extra") from None
    return msgpack


def looks_like_msgpack(head: bytes) -> bool:
    """Whether ``head`` starts a msgpack map (fixmap, map16 or map32)."""
    return bool(head) and (0x80 <= head[0] <= 0x8F or head[0] in (0xDE, 0xDF))


def _le(arr: np.ndarray) -> bytes:
    arr = np.ascontiguousarray(arr)
    if sys.byteorder == "big" and arr.dtype.itemsize > 1:
        arr = arr.byteswap()
    return arr.tobytes()


def write_msgpack(path, tensors, metadata: dict | None = None,
                  format_version: int = 1) -> None:
    """Write ``tensors`` (a mapping or (name, array) pairs) and ``metadata`` (str -> str) to
    ``path`` atomically."""
    msgpack = _msgpack()
    items = list(tensors.items() if hasattr(tensors, "items") else tensors)
    entries = []
    for name, arr in items:
        arr = np.asarray(arr)
        try:
            d = dt.from_numpy(arr.dtype)
        except Exception:
            raise RecordError(f"msgpack record: {name!r} has dtype {arr.dtype}, which has no "
                              f"ember dtype") from None
        entries.append({"name": name, "dtype": d.short, "shape": list(arr.shape),
                        "data": _le(arr)})
    doc = {"format": FORMAT_NAME, "format_version": format_version,
           "metadata": dict(metadata or {}), "tensors": entries}
    packed = msgpack.packb(doc, use_bin_type=True)
    with atomic_write(path, "wb") as f:
        f.write(packed)


def read_msgpack(path) -> tuple[dict, dict, int]:
    """``({name: ndarray}, metadata, format_version)`` from an ember msgpack record; a
    corrupt or truncated file raises RecordError naming the file."""
    msgpack = _msgpack()
    p = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise RecordError(f"{p}: cannot open: {e.strerror or e}") from None
    try:
        doc = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as e:   # msgpack raises several unrelated types on bad input
        what = "truncated" if "incomplete" in str(e).lower() else "corrupt"
        raise RecordError(f"{p}: {what} msgpack record ({type(e).__name__}: {e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        raise RecordError(f"{p}: not an ember msgpack record (no 'format': "
                          f"{FORMAT_NAME!r} entry)")
    version = doc.get("format_version")
    metadata = doc.get("metadata", {})
    entries = doc.get("tensors")
    if not isinstance(version, int) or not isinstance(metadata, dict) or \
            not isinstance(entries, list):
        raise RecordError(f"{p}: corrupt msgpack record: format_version, metadata or "
                          f"tensors missing or of the wrong type")
    out = {}
    for i, e in enumerate(entries):
        try:
            name, code, shape, data = e["name"], e["dtype"], tuple(e["shape"]), e["data"]
            d = dt.from_name(code)
            if not isinstance(name, str) or not isinstance(data, bytes) or \
                    not all(isinstance(s, int) and s >= 0 for s in shape):
                raise ValueError
        except Exception:
            raise RecordError(f"{p}: corrupt msgpack record: tensor entry {i} is malformed"
                              ) from None
        count = int(np.prod(shape, dtype=np.int64))
        if len(data) != count * d.itemsize:
            raise RecordError(f"{p}: corrupt msgpack record: {name!r} of shape {list(shape)} "
                              f"{d.short} needs {count * d.itemsize} bytes, has {len(data)}")
        if name in out:
            raise RecordError(f"{p}: corrupt msgpack record: {name!r} appears twice")
        arr = np.frombuffer(data, dtype=d.np.newbyteorder("<") if d.itemsize > 1 and
                            sys.byteorder == "big" else d.np)
        out[name] = arr.astype(d.np, copy=True).reshape(shape)
    return out, metadata, version
