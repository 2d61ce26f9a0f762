"""Data types and the promotion lattice.

A leaf module (it imports nothing from ember) so that every layer, the op registry
included, can name dtypes.

Promotion, as in PyTorch and JAX:

* kinds are ordered ``bool < int < float``; mixing kinds gives the higher kind's dtype
  (``i32 + f16 -> f16``, ``bool + u8 -> u8``);
* within a kind the wider dtype wins (``f16 + f32 -> f32``, ``i8 + i64 -> i64``);
  ``f16 + bf16 -> f32``, and ``u8`` with a signed int gives the smallest signed int that holds
  both (``u8 + i8 -> i16``);
* Python scalars (and NumPy scalars) are *weak*: they never widen a tensor's dtype within
  its kind (``i32 + 2 -> i32``, ``f16 + 1.0 -> f16``, ``i8 + True -> i8``). A float scalar
  with an int or bool tensor gives the default float (``i32 + 2.5 -> f32``), an int scalar
  with a bool tensor gives the default int (``bool + 1 -> i64``). The scalar is converted to
  the result dtype before the op; an int scalar the result dtype cannot hold is refused.
* promotion is commutative and associative.

For two tensors with at least one dim, and for a tensor with a scalar, this is exactly
``torch.result_type`` (tests/test_promotion.py checks every pair). Where ember differs from
PyTorch:

* a 0-d tensor is an ordinary tensor: ``f32[n] + f64[] -> f64`` (PyTorch: f32, because it
  lets a 0-d tensor widen only across kinds);
* ``add``/``sub``/``mul`` take float and int tensors, so ``bool + bool`` is a DTypeError
  (PyTorch computes a logical or); use ``logical_or``;
* ``u8 + 300`` is a DTypeError (PyTorch wraps the scalar modulo 256).
"""
from __future__ import annotations

import numpy as np
import ml_dtypes


class DType:
    """One element type: its name, kind (``float``, ``int``, ``bool``), size and NumPy dtype."""

    __slots__ = ("name", "kind", "itemsize", "np", "_order", "short", "signed",
                 "is_float", "is_int", "is_bool")

    def __init__(self, name, short, kind, np_dtype, order, signed=True):
        self.name = name
        self.short = short
        self.kind = kind
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self._order = order
        self.signed = signed
        # plain attributes rather than properties: the autodiff hot path reads is_float
        self.is_float = kind == "float"
        self.is_int = kind == "int"
        self.is_bool = kind == "bool"

    def __repr__(self):
        return f"ember.{self.name}"

    def __reduce__(self):
        return (from_name, (self.name,))

    # DTypes are singletons: identity is equality, and deep copies keep identity.
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


float64 = DType("float64", "f64", "float", np.float64, 3)
float32 = DType("float32", "f32", "float", np.float32, 2)
float16 = DType("float16", "f16", "float", np.float16, 1)
bfloat16 = DType("bfloat16", "bf16", "float", ml_dtypes.bfloat16, 1)
int64 = DType("int64", "i64", "int", np.int64, 4)
int32 = DType("int32", "i32", "int", np.int32, 3)
int16 = DType("int16", "i16", "int", np.int16, 2)
int8 = DType("int8", "i8", "int", np.int8, 1)
uint8 = DType("uint8", "u8", "int", np.uint8, 1, signed=False)
bool_ = DType("bool", "bool", "bool", np.bool_, 0)

f64, f32, f16, bf16 = float64, float32, float16, bfloat16
i64, i32, i16, i8, u8 = int64, int32, int16, int8, uint8

ALL = (float64, float32, float16, bfloat16, int64, int32, int16, int8, uint8, bool_)
FLOATS = (float64, float32, float16, bfloat16)
INTS = (int64, int32, int16, int8, uint8)

DEFAULT_FLOAT = float32
DEFAULT_INT = int64

_BY_NAME = {}
for _d in ALL:
    _BY_NAME[_d.name] = _d
    _BY_NAME[_d.short] = _d
_BY_NAME["bool_"] = bool_
_BY_NAME["float"] = float32
_BY_NAME["int"] = int64
_BY_NUMPY = {d.np: d for d in ALL}
_KIND_RANK = {"bool": 0, "int": 1, "float": 2}


def from_name(name: str) -> DType:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise _dtype_error(f"unknown dtype {name!r}; valid: {', '.join(d.short for d in ALL)}")


def from_numpy(np_dtype) -> DType:
    """The DType of a NumPy dtype; float64/int64 stay as they are."""
    d = _BY_NUMPY.get(np.dtype(np_dtype))
    if d is None:
        nd = np.dtype(np_dtype)
        if not nd.isnative and _BY_NUMPY.get(nd.newbyteorder("=")) is not None:
            raise _dtype_error(f"NumPy dtype {nd.str} is not in the machine's byte order; "
                               f"convert with arr.astype(arr.dtype.newbyteorder('='))")
        raise _dtype_error(f"NumPy dtype {np.dtype(np_dtype)} has no ember dtype; "
                           f"valid: {', '.join(str(d.np) for d in ALL)}")
    return d


def as_dtype(x) -> DType:
    """Accepts a DType, a name (``"f32"``, ``"float32"``), a NumPy dtype or a Python type."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        return from_name(x)
    if x is float:
        return DEFAULT_FLOAT
    if x is int:
        return DEFAULT_INT
    if x is bool:
        return bool_
    return from_numpy(x)


def _dtype_error(msg):
    from .errors import DTypeError
    return DTypeError(msg)


_PROMOTE_CACHE: dict = {}


def promote(a: DType, b: DType) -> DType:
    """The dtype two tensors of dtypes ``a`` and ``b`` combine to."""
    if a is b:
        return a
    key = (a, b)
    r = _PROMOTE_CACHE.get(key)
    if r is None:
        r = _promote(a, b)
        _PROMOTE_CACHE[key] = r
    return r


def _promote(a, b):
    ka, kb = _KIND_RANK[a.kind], _KIND_RANK[b.kind]
    if ka != kb:
        return a if ka > kb else b
    if a.kind == "float":
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a._order >= b._order else b
    if a.kind == "int":
        if a.signed == b.signed:
            return a if a._order >= b._order else b
        s = b if a is uint8 else a  # the signed one
        return s if s._order >= int16._order else int16
    return a


def promote_scalar(t: DType, scalar) -> DType:
    """The dtype of ``tensor(t) <op> scalar``: scalars are weak within a kind."""
    if isinstance(scalar, bool):
        return t
    if isinstance(scalar, int):
        return DEFAULT_INT if t.kind == "bool" else t
    if isinstance(scalar, float):
        return t if t.kind == "float" else DEFAULT_FLOAT
    # NumPy scalars behave like Python scalars of their kind.
    if isinstance(scalar, np.bool_):
        return t
    if isinstance(scalar, np.integer):
        return DEFAULT_INT if t.kind == "bool" else t
    if isinstance(scalar, np.floating):
        return t if t.kind == "float" else DEFAULT_FLOAT
    raise _dtype_error(f"cannot combine a tensor of dtype {t.short} with {type(scalar).__name__} "
                       f"{scalar!r}; valid: a tensor, bool, int or float")


def scalar_dtype(scalar) -> DType:
    """The default dtype of a Python scalar on its own (``tensor(1.0)`` is f32)."""
    if isinstance(scalar, (bool, np.bool_)):
        return bool_
    if isinstance(scalar, (int, np.integer)):
        return DEFAULT_INT
    if isinstance(scalar, (float, np.floating)):
        return DEFAULT_FLOAT
    raise _dtype_error(f"{type(scalar).__name__} {scalar!r} is not a number")
