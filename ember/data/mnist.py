"""MNIST-style IDX files (raw or gzip-compressed), read with NumPy; no downloads."""
from __future__ import annotations

import os
import tempfile
import zlib

import numpy as np

from ..errors import DatasetError, DTypeError, ShapeError
from .dataset import Dataset

__all__ = ["MnistDataset", "read_idx", "write_idx"]

# IDX type code -> big-endian NumPy dtype
_CODES = {0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"),
          0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def _read_bytes(path: str) -> tuple[bytes, str | None]:
    """The file's bytes, gunzipped when it is gzip; the second value says why a gzip stream
    ended early (None when complete)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise DatasetError(f"read_idx: cannot open {path}: {e.strerror or e}") from None
    if raw[:2] != b"\x1f\x8b":
        return raw, None
    out = []
    rest = raw
    chunk = 1 << 20
    while rest:
        d = zlib.decompressobj(wbits=31)
        start = 0
        try:
            while start < len(rest) and not d.eof:
                out.append(d.decompress(rest[start:start + chunk]))
                start += chunk
        except zlib.error as e:
            return b"".join(out), f"the gzip data is corrupt ({e})"
        if not d.eof:
            out.append(d.flush())
            return b"".join(out), "the gzip stream ends early"
        rest = d.unused_data + rest[start:]
        if rest[:2] != b"\x1f\x8b":
            break  # trailing bytes after the last member are ignored, as gzip(1) does
    return b"".join(out), None


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The array in an IDX file (``.gz`` or raw), in native byte order. A bad magic number,
    an unknown type code, a truncated file or extra bytes raise `ember.errors.DatasetError`
    naming the file and, for a short file, the first incomplete record."""
    path = os.fspath(path)
    data, gz_problem = _read_bytes(path)
    if len(data) < 4:
        raise DatasetError(f"read_idx({path}): {len(data)} bytes, too short for the IDX "
                           f"header" + (f"; {gz_problem}" if gz_problem else ""))
    if data[0] != 0 or data[1] != 0 or data[2] not in _CODES:
        raise DatasetError(f"read_idx({path}): not an IDX file (magic bytes "
                           f"{data[:4].hex()}; expected 0000 followed by a type code in "
                           f"{[hex(c) for c in _CODES]} and the number of dims)")
    dtype = _CODES[data[2]]
    ndim = data[3]
    head = 4 + 4 * ndim
    if ndim == 0 or len(data) < head:
        raise DatasetError(f"read_idx({path}): the header declares {ndim} dims but the file "
                           f"ends inside it ({len(data)} bytes)" if ndim else
                           f"read_idx({path}): the header declares 0 dims")
    shape = tuple(int(v) for v in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    record = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
    want = shape[0] * record
    have = len(data) - head
    if have < want:
        complete = have // record if record else shape[0]
        why = f"; {gz_problem}" if gz_problem else ""
        raise DatasetError(f"read_idx({path}): truncated: record {complete} of {shape[0]} "
                           f"(shape {list(shape)}) is incomplete; {have} of {want} data bytes "
                           f"are present{why}")
    if gz_problem:
        raise DatasetError(f"read_idx({path}): {gz_problem}")
    if have > want:
        raise DatasetError(f"read_idx({path}): {have - want} bytes after the last of "
                           f"{shape[0]} records (shape {list(shape)}); the file is not one "
                           f"IDX array")
    arr = np.frombuffer(data, dtype=dtype, count=int(np.prod(shape)), offset=head)
    return arr.reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path: str | os.PathLike, array, *, compress: bool | None = None) -> None:
    """Write ``array`` as an IDX file, gzip-compressed when ``compress`` (by default, when
    ``path`` ends in ``.gz``); written atomically."""
    import gzip
    path = os.fspath(path)
    arr = np.asarray(array)
    if arr.ndim == 0 or arr.ndim > 255:
        raise ShapeError(f"write_idx({path}): an IDX array needs 1..255 dims, got shape "
                         f"{arr.shape}")
    code = next((c for c, d in _CODES.items() if d.newbyteorder("=") == arr.dtype), None)
    if code is None:
        raise DTypeError(f"write_idx({path}): IDX holds uint8, int8, int16, int32, float32 "
                         f"or float64, got {arr.dtype}")
    payload = (bytes([0, 0, code, arr.ndim]) + np.asarray(arr.shape, ">u4").tobytes()
               + np.ascontiguousarray(arr, dtype=_CODES[code]).tobytes())
    if compress is None:
        compress = path.endswith(".gz")
    if compress:
        payload = gzip.compress(payload, mtime=0)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".ember-", suffix=".idx.tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


_PREFIX = {"train": "train", "test": "t10k"}


def _find(root: str, prefix: str, kind: str, ndim: int) -> str:
    names = [f"{prefix}-{kind}-idx{ndim}-ubyte", f"{prefix}-{kind}.idx{ndim}-ubyte"]
    for n in names:
        for candidate in (n, n + ".gz"):
            p = os.path.join(root, candidate)
            if os.path.exists(p):
                return p
    raise DatasetError(f"MnistDataset: no {kind} file in {root}; expected one of "
                       f"{[n + s for n in names for s in ('', '.gz')]}")


class MnistDataset(Dataset):
    """MNIST (or Fashion-MNIST, or any IDX pair) read from local files; item ``i`` is
    ``(image, label)``: a uint8 array of shape [28, 28] and an int.

    ``MnistDataset(root, "train")`` finds ``train-images-idx3-ubyte`` and
    ``train-labels-idx1-ubyte`` (``t10k-`` for "test"; ``.gz`` or raw) in ``root``;
    ``MnistDataset.from_files(images, labels)`` names the files. The files are read and
    checked when the dataset is made (about 55 MB of memory for the 70,000 MNIST images)."""

    __slots__ = ("images", "labels", "images_path", "labels_path")

    def __init__(self, root: str | os.PathLike, split: str = "train"):
        root = os.fspath(root)
        if split not in _PREFIX:
            raise DatasetError(f"MnistDataset: split must be 'train' or 'test', got {split!r}")
        self._load(_find(root, _PREFIX[split], "images", 3),
                   _find(root, _PREFIX[split], "labels", 1))

    @classmethod
    def from_files(cls, images: str | os.PathLike, labels: str | os.PathLike) -> "MnistDataset":
        ds = cls.__new__(cls)
        ds._load(os.fspath(images), os.fspath(labels))
        return ds

    def _load(self, images_path: str, labels_path: str) -> None:
        images = read_idx(images_path)
        labels = read_idx(labels_path)
        if images.ndim != 3:
            raise DatasetError(f"MnistDataset: {images_path} holds an array of shape "
                               f"{list(images.shape)}; expected [count, height, width]")
        if labels.ndim != 1:
            raise DatasetError(f"MnistDataset: {labels_path} holds an array of shape "
                               f"{list(labels.shape)}; expected [count]")
        if images.shape[0] != labels.shape[0]:
            raise DatasetError(f"MnistDataset: {images_path} has {images.shape[0]} images but "
                               f"{labels_path} has {labels.shape[0]} labels")
        self.images_path, self.labels_path = images_path, labels_path
        self.images = images
        self.labels = labels.astype(np.int64)

    def __len__(self) -> int:
        return self.images.shape[0]

    def get(self, index: int):
        if not 0 <= index < self.images.shape[0]:
            return None
        return self.images[index], int(self.labels[index])

    def __repr__(self) -> str:
        return (f"MnistDataset({self.images_path!r}, len={len(self)}, "
                f"image shape={list(self.images.shape[1:])})")
