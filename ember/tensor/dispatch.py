"""The per-op path from the Tensor API into a backend: device check, promotion, the
registry's shape/dtype rule, execution, and wrapping the result. Keep it lean: every op
passes through here."""
from __future__ import annotations

import numbers

from .. import dtype as dt
from ..errors import DeviceError, DTypeError

Tensor = None  # set by ember.tensor.tensor once the class exists
_EMPTY: dict = {}
_new = object.__new__


def wrap(prim, device, shape, dtype):
    t = _new(Tensor)
    t._prim = prim
    t._device = device
    t._shape = shape
    t._dtype = dtype
    return t


def apply(op, inputs: tuple, attrs: dict = _EMPTY, meta=None):
    """Run a registry op on tensors (and scalars) and wrap the result(s). ``meta``: the
    op's ``infer`` result where the caller has checked the inputs already."""
    # the device check and the primitives in one pass
    dev = None
    prims = []
    for x in inputs:
        if isinstance(x, Tensor):
            if dev is None:
                dev = x._device
            elif x._device is not dev:
                raise DeviceError(f"{op.name}: tensors are on different devices, {dev} and "
                                  f"{x._device}; move one with .to_device(...) first")
            prims.append(x._prim)
        else:
            prims.append(x)
    if dev is None:
        raise DeviceError(f"{op.name}: needs at least one tensor input")
    if meta is None:
        meta = op.infer(*inputs, **attrs)
    out = dev._execute(op, tuple(prims), attrs, meta, dev)
    if op.nout == 1:
        t = _new(Tensor)                 # (wrap, inlined)
        t._prim = out
        t._device = dev
        t._shape = meta[0]
        t._dtype = meta[1]
        return t
    return tuple([wrap(o, dev, m[0], m[1]) for o, m in zip(out, meta)])


def create(op, device, attrs: dict):
    """Run a creation or random op (no tensor inputs) on ``device``."""
    meta = op.infer(**attrs)
    out = device._execute(op, (), attrs, meta, device)
    return wrap(out, device, meta[0], meta[1])


def unary(op, x, attrs: dict = _EMPTY):
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op.name}: expects a Tensor, got {type(x).__name__}")
    meta = op.infer(x, **attrs)
    dev = x._device
    t = _new(Tensor)                 # (wrap, inlined: every op passes here)
    t._prim = dev._execute(op, (x._prim,), attrs, meta, dev)
    t._device = dev
    t._shape = meta[0]
    t._dtype = meta[1]
    return t


def _is_scalar(v):
    return isinstance(v, (int, float, bool, numbers.Number)) and not isinstance(v, complex)


def binary(op, a, b, attrs: dict = _EMPTY):
    """A binary op with promotion: tensors are cast to the common dtype first; a scalar
    operand stays a scalar (backends and fusion take it as a value). ``attrs``: the op's
    (matmul's transpose flags)."""
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            dev, d = a._device, a._dtype
            if b._device is not dev or b._dtype is not d or (
                    op.promote == "float" and not d.is_float):
                return _binary_promoted(op, a, b, attrs)
            meta = op.infer(a, b, **attrs) if attrs else op.infer(a, b)
            t = _new(Tensor)             # (wrap, inlined)
            t._prim = dev._execute(op, (a._prim, b._prim), attrs, meta, dev)
            t._device = dev
            t._shape = meta[0]
            t._dtype = meta[1]
            return t
        t, s, left = a, b, True
    elif isinstance(b, Tensor):
        t, s, left = b, a, False
    else:
        raise DTypeError(f"{op.name}: expects a Tensor operand, got {type(a).__name__} and "
                         f"{type(b).__name__}")
    ts = type(s)
    if t._dtype.is_float and (ts is float or ts is int):
        try:
            s = float(s)       # the common case: a float tensor keeps its dtype
        except OverflowError:
            raise DTypeError(f"{op.name}: an int scalar of {s.bit_length()} bits is beyond "
                             f"the float range (at most about 1.8e308, 1024 bits) for a "
                             f"{t._dtype.name} tensor") from None
    else:
        t, s = _promote_scalar(op, t, s)
    if left:
        a, b = t, s
        prims = (t._prim, s)
    else:
        a, b = s, t
        prims = (s, t._prim)
    meta = op.infer(a, b, **attrs) if attrs else op.infer(a, b)
    dev = t._device
    return wrap(dev._execute(op, prims, attrs, meta, dev), dev, meta[0], meta[1])


def _binary_promoted(op, a, b, attrs=_EMPTY):
    """`binary` of two tensors that are on different devices (an error) or need a cast."""
    dev = a._device
    if b._device is not dev:
        raise DeviceError(f"{op.name}: tensors are on different devices, {dev} and "
                          f"{b._device}; move one with .to_device(...) first")
    da, db = a._dtype, b._dtype
    if da is not db:
        common = dt.promote(da, db)
        if op.promote == "float" and common.kind != "float":
            common = dt.DEFAULT_FLOAT
        if da is not common:
            a = a.cast(common)
        if db is not common:
            b = b.cast(common)
    elif op.promote == "float" and not da.is_float:
        a = a.cast(dt.DEFAULT_FLOAT)
        b = b.cast(dt.DEFAULT_FLOAT)
    meta = op.infer(a, b, **attrs)
    out = dev._execute(op, (a._prim, b._prim), attrs, meta, dev)
    return wrap(out, dev, meta[0], meta[1])


def _promote_scalar(op, t, s):
    """``t`` cast to the dtype of ``t <op> s`` and ``s`` as a Python scalar of that dtype's
    kind; a value that is no real scalar is a DTypeError."""
    if not _is_scalar(s):
        if hasattr(s, "__array__") or isinstance(s, (list, tuple)):
            raise DTypeError(f"{op.name}: cannot combine a Tensor with {type(s).__name__}; "
                             f"convert it with em.tensor(...) on {t._device} first")
        raise DTypeError(f"{op.name}: cannot combine a Tensor with {type(s).__name__} {s!r}; "
                         f"valid: a Tensor, bool, int or float")
    d = t._dtype
    common = dt.promote_scalar(d, s)
    if op.promote == "float" and common.kind != "float":
        common = dt.DEFAULT_FLOAT
    if common is not d:
        t = t.cast(common)
    return t, _py_scalar(s, common, op.name)


# (min, max) of each int dtype, for refusing scalars that do not fit.
INT_RANGE = {d: ((-(1 << (8 * d.itemsize - 1)), (1 << (8 * d.itemsize - 1)) - 1) if d.signed
                 else (0, (1 << (8 * d.itemsize)) - 1)) for d in dt.INTS}


def _py_scalar(s, dtype, op="op"):
    """The scalar as the Python type of ``dtype``'s kind (what backends and fusion take);
    an int that ``dtype`` cannot hold is a DTypeError (NumPy would raise OverflowError)."""
    k = dtype.kind
    if k == "float":
        return float(s)
    if k == "int":
        v = int(s)
        lo, hi = INT_RANGE[dtype]
        if v < lo or v > hi:
            raise DTypeError(f"{op}: the scalar {v} does not fit the tensor's dtype "
                             f"{dtype.short} (range {lo}..{hi}); cast the tensor to a wider "
                             f"dtype first, e.g. x.cast(em.int64)")
        return v
    return bool(s)
