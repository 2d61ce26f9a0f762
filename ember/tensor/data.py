"""`TensorData`: a tensor's bytes, shape and dtype on the host, for saving and comparing."""
from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..errors import DTypeError, ShapeError


class TensorData:
    """Host-side tensor values: little-endian ``bytes``, ``shape`` and ``dtype``."""

    __slots__ = ("bytes", "shape", "dtype")

    def __init__(self, data, shape=None, dtype=None):
        if isinstance(data, (bytes, bytearray, memoryview)):
            if shape is None or dtype is None:
                raise ShapeError("TensorData: raw bytes need a shape and a dtype")
            d = dt.as_dtype(dtype)
            shape = tuple(int(s) for s in shape)
            n = int(np.prod(shape, dtype=np.int64)) * d.itemsize
            if len(data) != n:
                raise ShapeError(f"TensorData: {len(data)} bytes do not hold shape {shape} of "
                                 f"{d.short} ({n} bytes)")
            self.bytes, self.shape, self.dtype = bytes(data), shape, d
            return
        arr = np.asarray(data) if dtype is None else np.asarray(data, dtype=dt.as_dtype(dtype).np)
        if arr.dtype == object:
            raise DTypeError("TensorData: data must be numbers")
        if dtype is None and not isinstance(data, np.ndarray):
            arr = arr.astype({"f": np.float32, "i": np.int64, "u": np.int64,
                              "b": np.bool_}.get(arr.dtype.kind, arr.dtype))
        if shape is not None:
            arr = arr.reshape(tuple(shape))
        self.dtype = dt.from_numpy(arr.dtype)
        self.shape = tuple(arr.shape)
        self.bytes = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> "TensorData":
        return cls(np.asarray(array))

    def to_numpy(self) -> np.ndarray:
        a = np.frombuffer(self.bytes, dtype=self.dtype.np.newbyteorder("<"))
        return a.astype(self.dtype.np).reshape(self.shape)

    def tolist(self):
        return self.to_numpy().tolist()

    def convert(self, dtype) -> "TensorData":
        return TensorData(self.to_numpy().astype(dt.as_dtype(dtype).np))

    def num_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __eq__(self, other):
        if not isinstance(other, TensorData):
            return NotImplemented
        return self.shape == other.shape and self.dtype is other.dtype and \
            self.bytes == other.bytes

    def __repr__(self):
        return f"TensorData(shape={self.shape}, dtype={self.dtype.short})"

    def assert_eq(self, other, *, strict_dtype: bool = True):
        """Exact equality of values and shapes (and dtypes, unless ``strict_dtype=False``)."""
        other = _as_data(other)
        if self.shape != other.shape:
            raise AssertionError(f"shapes differ: {self.shape} vs {other.shape}")
        if strict_dtype and self.dtype is not other.dtype:
            raise AssertionError(f"dtypes differ: {self.dtype.short} vs {other.dtype.short}")
        a, b = self.to_numpy(), other.to_numpy()
        if not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
            bad = np.argwhere(a != b)
            raise AssertionError(f"values differ at {len(bad)} positions, first {tuple(bad[0])}"
                                 f": {a[tuple(bad[0])]} vs {b[tuple(bad[0])]}")

    def assert_approx_eq(self, other, tol: float = 1e-5, *, rtol: float | None = None):
        """Values equal within ``tol`` absolute plus ``rtol`` relative (default ``tol``)."""
        assert_approx_eq(self, other, tol, rtol=rtol)


def _as_data(x):
    if isinstance(x, TensorData):
        return x
    if hasattr(x, "to_data"):
        return x.to_data()
    return TensorData(np.asarray(x))


def assert_approx_eq(actual, expected, tol: float = 1e-5, *, rtol: float | None = None):
    """Assert two tensors (or arrays, or TensorData) agree within ``tol`` absolute and
    ``rtol`` relative error (``rtol`` defaults to ``tol``); nan matches nan."""
    a = _as_data(actual).to_numpy()
    b = _as_data(expected).to_numpy()
    if a.shape != b.shape:
        raise AssertionError(f"shapes differ: {a.shape} vs {b.shape}")
    a64 = a.astype(np.float64)
    b64 = b.astype(np.float64)
    rtol = tol if rtol is None else rtol
    ok = np.isclose(a64, b64, atol=tol, rtol=rtol, equal_nan=True)
    if not ok.all():
        idx = np.argwhere(~ok)
        first = tuple(int(i) for i in idx[0])
        err = np.abs(a64 - b64)
        err = np.where(np.isnan(err), np.inf, err)
        raise AssertionError(
            f"{len(idx)} of {a.size} values differ beyond tol={tol}, rtol={rtol}; first at "
            f"{first}: {a64[first]!r} vs {b64[first]!r}; max abs error {np.max(err):.3g}")
