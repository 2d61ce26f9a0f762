"""The safetensors file format, read and written with NumPy only.

Layout (https://github.com/huggingface/safetensors): an unsigned 64-bit little-endian header
length N, N bytes of UTF-8 JSON ``{name: {"dtype", "shape", "data_offsets": [begin, end]},
"__metadata__": {str: str}}`` (padded with spaces to a multiple of 8), then the tensors'
little-endian, C-ordered bytes, offsets relative to the end of the header. Files written here
are read by the ``safetensors`` package and the other way round."""
from __future__ import annotations

import json
import mmap
import os
import struct
import sys

import ml_dtypes
import numpy as np

from ..errors import RecordError
from .atomic import atomic_write

__all__ = ["write_safetensors", "read_safetensors", "looks_like_safetensors"]

# safetensors dtype code <-> NumPy dtype. The first block is every ember dtype; the rest
# are read (for imports) and converted to the target's dtype.
_CODES = {
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32), "I16": np.dtype(np.int16), "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8), "BOOL": np.dtype(np.bool_),
    "U16": np.dtype(np.uint16), "U32": np.dtype(np.uint32), "U64": np.dtype(np.uint64),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn), "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
}
_BY_NP = {v: k for k, v in _CODES.items()}
_MAX_HEADER = 100 * 1024 * 1024   # the reference implementation's limit


def _err(path, msg) -> RecordError:
    return RecordError(f"{os.fspath(path)}: {msg}")


def looks_like_safetensors(head: bytes, size: int) -> bool:
    """Whether a file of ``size`` bytes starting with ``head`` (at least 9 bytes) is
    plausibly safetensors: a sane header length followed by ``{`` (a header longer than the
    file still counts: the reader then reports the file as truncated)."""
    if len(head) < 9 or size < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 2 <= n <= _MAX_HEADER and head[8:9] == b"{"


def _le_bytes(arr: np.ndarray):
    arr = np.ascontiguousarray(arr)
    if sys.byteorder == "big" and arr.dtype.itemsize > 1:
        arr = arr.byteswap()
    return memoryview(arr.reshape(-1).view(np.uint8))


def write_safetensors(path, tensors, metadata: dict | None = None) -> None:
    """Write ``tensors`` (a mapping or (name, array) pairs, in file order) and ``metadata``
    (str -> str) to ``path`` atomically."""
    items = list(tensors.items() if hasattr(tensors, "items") else tensors)
    header: dict = {}
    if metadata:
        bad = {k: v for k, v in metadata.items()
               if not isinstance(k, str) or not isinstance(v, str)}
        if bad:
            raise RecordError(f"safetensors metadata must map str to str, got {bad!r}")
        header["__metadata__"] = dict(metadata)
    offset = 0
    arrays = []
    for name, arr in items:
        if not isinstance(name, str) or name == "__metadata__":
            raise RecordError(f"safetensors: invalid tensor name {name!r}")
        if name in header:
            raise RecordError(f"safetensors: tensor name {name!r} appears twice")
        arr = np.asarray(arr)
        code = _BY_NP.get(arr.dtype.newbyteorder("=") if arr.dtype.byteorder not in "=|"
                          else arr.dtype)
        if code is None:
            raise RecordError(f"safetensors: {name!r} has dtype {arr.dtype}, which the format "
                              f"cannot hold; valid: {', '.join(str(d) for d in _BY_NP)}")
        nbytes = arr.size * arr.dtype.itemsize
        header[name] = {"dtype": code, "shape": [int(s) for s in arr.shape],
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
        arrays.append(arr)
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with atomic_write(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for arr in arrays:
            if arr.size:
                f.write(_le_bytes(arr))


def read_safetensors(path) -> tuple[dict, dict]:
    """``({name: ndarray}, metadata)`` from the safetensors file at ``path``, in file order;
    a file that is not valid safetensors (truncated, corrupt header, offsets out of range)
    raises RecordError naming the file."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise _err(path, f"cannot open: {e.strerror or e}") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) < 8:
            raise _err(path, f"not a safetensors file: {size} bytes, too short for the "
                             f"8-byte header length (empty or truncated)")
        (n,) = struct.unpack("<Q", head)
        if n > _MAX_HEADER:
            raise _err(path, f"not a safetensors file: header length {n} is over the "
                             f"{_MAX_HEADER}-byte limit (corrupt)")
        if n > size - 8:
            raise _err(path, f"truncated safetensors file: the header needs {n} bytes, the "
                             f"file has {size - 8} after the length")
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise _err(path, f"corrupt safetensors header (not UTF-8 JSON: {e})") from None
        if not isinstance(header, dict):
            raise _err(path, "corrupt safetensors header: not a JSON object")
        metadata = header.pop("__metadata__", None) or {}
        if not isinstance(metadata, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise _err(path, "corrupt safetensors header: __metadata__ must map str to str")
        data_size = size - 8 - n
        specs = []
        for name, info in header.items():
            try:
                code, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
                dtype = _CODES[code]
                shape = tuple(shape)
                if not all(isinstance(s, int) and s >= 0 for s in shape) or \
                        not (isinstance(begin, int) and isinstance(end, int)):
                    raise ValueError
            except KeyError as e:
                if isinstance(info, dict) and "dtype" in info and e.args[0] == info["dtype"]:
                    raise _err(path, f"tensor {name!r} has dtype {info['dtype']!r}, which "
                                     f"ember cannot read; valid: {', '.join(_CODES)}") from None
                raise _err(path, f"corrupt safetensors header entry for {name!r}: "
                                 f"{info!r}") from None
            except (TypeError, ValueError):
                raise _err(path, f"corrupt safetensors header entry for {name!r}: "
                                 f"{info!r}") from None
            count = 1
            for s in shape:
                count *= s
            if not 0 <= begin <= end or end - begin != count * dtype.itemsize:
                raise _err(path, f"corrupt safetensors header: {name!r} of shape "
                                 f"{list(shape)} {code} needs {count * dtype.itemsize} bytes, "
                                 f"its offsets [{begin}, {end}] disagree")
            if end > data_size:
                raise _err(path, f"truncated safetensors file: {name!r} ends at byte {end} "
                                 f"of the data, which has only {data_size} bytes")
            specs.append((name, dtype, shape, begin, count))
        out = {}
        if not specs:
            return out, dict(metadata)
        base = 8 + n
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        try:
            for name, dtype, shape, begin, count in specs:
                arr = np.frombuffer(buf, dtype=dtype.newbyteorder("<") if dtype.itemsize > 1
                                    and sys.byteorder == "big" else dtype,
                                    count=count, offset=base + begin)
                out[name] = arr.astype(dtype, copy=True).reshape(shape)
                del arr
        finally:
            if isinstance(buf, mmap.mmap):
                buf.close()
        return out, dict(metadata)
