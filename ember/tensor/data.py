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
        if hasattr(data, "to_data") and not isinstance(data, np.ndarray):
            data = data.to_data().to_numpy()      # an ember Tensor
        elif isinstance(data, TensorData):
            data = data.to_numpy()
        try:
            arr = np.asarray(data) if dtype is None else \
                np.asarray(data, dtype=dt.as_dtype(dtype).np)
        except ValueError as e:
            raise ShapeError(f"TensorData: nested sequences of uneven lengths ({e})") from None
        except OverflowError as e:
            raise DTypeError(f"TensorData: {e}; valid: values within {dtype}'s range") from None
        if arr.dtype == object:
            raise DTypeError("TensorData: data must be numbers of one nesting depth")
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if dtype is None and not isinstance(data, (np.ndarray, np.generic)):
            # Python numbers: floats are f32, ints i64, as in em.tensor
            arr = arr.astype({"f": np.float32, "i": np.int64, "u": np.int64,
                              "b": np.bool_}.get(arr.dtype.kind, arr.dtype))
        if shape is not None:
            shape = tuple(int(s) for s in shape)
            if int(np.prod(shape, dtype=np.int64)) != arr.size:
                raise ShapeError(f"TensorData: {arr.size} values do not fill shape {shape}")
            arr = arr.reshape(shape)
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
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        if a.dtype.kind in "iub" and b.dtype.kind in "iub":
            a64, b64 = a.astype(np.int64), b.astype(np.int64)   # exact for every int dtype
        same = (a64 == b64) | (np.isnan(a64) & np.isnan(b64)) if a64.dtype.kind == "f" \
            else a64 == b64
        if not same.all():
            bad = np.argwhere(~same)
            first = tuple(int(i) for i in bad[0])
            raise AssertionError(f"values differ at {len(bad)} of {a.size} positions, first "
                                 f"at {first}: {a[first]!r} vs {b[first]!r}")

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
