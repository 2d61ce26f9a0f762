"""Optimizer ops: fused parameter updates (category ``optim``).

An optimizer step is one parameter's update, never differentiated (no ``vjp``). A fused
update computes, in one op, what the optimizer would otherwise build from a dozen
elementwise ops: on small models each of those costs more in dispatch than in arithmetic,
and on a GPU each is a kernel launch.

``adam_update(w, g, m, v)`` -> ``(w', m', v')``: one Adam/AdamW step (``ember.optim.Adam``
folds the bias corrections into ``step`` and ``eps``; see ``Adam._update``)::

    g  = g + w * l2                          (only when l2 != 0)
    m' = m * beta1 + g * k1                  (first: m' = g * k1, m is not read)
    v' = v * beta2 + (g * g) * k2            (first: v' = (g * g) * k2, v is not read)
    w' = (w * decay if decay != 1 else w) - (m' / (sqrt(v') + eps)) * step

``k1``/``k2`` are ``1 - beta1``/``1 - beta2`` as the optimizer computed them (in Python
floats), ``step`` is ``lr * sqrt(1 - beta2^t) / (1 - beta1^t)`` and ``eps`` is
``eps * sqrt(1 - beta2^t)``. Every operation rounds to the tensors' dtype, in this order, with
the scalars taken as the elementwise ops take a Python scalar, so the result is bit for bit
that of the same formula written with Tensor ops (``decompose``; tests/optim/
test_fused_adam.py). ``first`` (the parameter's first step) does not read ``m`` and ``v``
(pass any tensors of the shape: ``0 * beta1 + x`` would turn a ``-0.0`` of ``x`` into
``+0.0``).

``decompose`` is that formula with Tensor ops: Fusion runs it for large tensors, so the
elementwise ops fuse into one kernel (docs/fusion.md).

``adam_update_many(w1..wk, g1..gk, m1..mk, v1..vk)`` -> ``(w1', m1', v1', ..., wk', mk',
vk')``: ``adam_update`` of k parameters with the same scalars, in one op. A training step of a
large model makes one update per parameter (a GPT of 6 layers: 102), each a trip through
the Tensor API, Fusion and the backend; a backend that lists this op in
``Backend.fused_ops`` (Cuda) gets the whole step's updates in one call, and ``ember.optim.Adam``
groups its updates into it there (elsewhere it keeps one ``adam_update`` per parameter, so
Fusion can still fuse each). Its results are ``adam_update``'s, bit for bit.
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, ShapeError
from .registry import declare
from .rules import require_kind

# IEEE results (nan, inf) are values, not warnings (as for the elementwise ops)
_quiet = np.errstate(divide="ignore", invalid="ignore", over="ignore")

_ADAM_ROLES = ("weights", "gradient", "first moment (m)", "second moment (v)")
ADAM_ATTRS = ("beta1", "beta2", "k1", "k2", "step", "eps", "decay", "l2", "first")


def _adam_infer(w, g, m, v, *, beta1, beta2, k1, k2, step, eps, decay, l2, first):
    try:
        d, s = w._dtype, w._shape
        if d.is_float and g._dtype is d and m._dtype is d and v._dtype is d and \
                g._shape == s and m._shape == s and v._shape == s:
            out = (s, d)
            return [out, out, out]
    except AttributeError:
        pass
    _adam_check(w, g, m, v)
    raise AssertionError("unreachable")  # pragma: no cover


def _adam_check(*xs):
    """The diagnosis of inputs that `_adam_infer`'s fast check refused."""
    for x, role in zip(xs, _ADAM_ROLES):
        if not hasattr(x, "_shape"):
            raise DTypeError(f"adam_update: expects a Tensor as the {role}, got "
                             f"{type(x).__name__}")
    w = xs[0]
    require_kind("adam_update", w._dtype, "float", "the weights")
    for x, role in zip(xs[1:], _ADAM_ROLES[1:]):
        if x._dtype is not w._dtype:
            raise DTypeError(f"adam_update: the {role} is {x._dtype.short} but the weights are "
                             f"{w._dtype.short}; all four tensors must have one float dtype "
                             f"(cast them first)")
        if x._shape != w._shape:
            raise ShapeError(f"adam_update: the {role} has shape {tuple(x._shape)} but the "
                             f"weights have shape {tuple(w._shape)}; all four tensors must "
                             f"have one shape (no broadcasting)")


@_quiet
def _adam_numpy(w, g, m, v, *, beta1, beta2, k1, k2, step, eps, decay, l2, first, xp=np):
    # The operations of the Tensor-op formula, in its order, each rounded to the dtype
    # (f16 ufuncs round per op; bf16 ones compute in f32 and `out=` rounds, as the NdArray
    # backend's cast does), written into three fresh buffers (m', v', and one that becomes
    # w') instead of a new array per op.
    shape, dtype = w.shape, w.dtype
    mul, add = xp.multiply, xp.add
    # Python floats, which the ufuncs take as the tensors' dtype (weak scalars) as the
    # Tensor API does (a NumPy f64 scalar would promote an f32 tensor to f64)
    beta1, beta2, k1, k2 = float(beta1), float(beta2), float(k1), float(k2)
    step, eps, decay, l2 = float(step), float(eps), float(decay), float(l2)
    m2 = xp.empty(shape, dtype)
    v2 = xp.empty(shape, dtype)
    t = xp.empty(shape, dtype)
    gl = None
    if l2:
        gl = mul(w, l2, out=xp.empty(shape, dtype))
        g = add(g, gl, out=gl)
    if first:
        mul(g, k1, out=m2)
        mul(g, g, out=v2)
        mul(v2, k2, out=v2)
    else:
        mul(m, beta1, out=m2)
        mul(g, k1, out=t)
        add(m2, t, out=m2)
        mul(v, beta2, out=v2)
        mul(g, g, out=t)
        mul(t, k2, out=t)
        add(v2, t, out=v2)
    xp.sqrt(v2, out=t)
    add(t, eps, out=t)
    xp.true_divide(m2, t, out=t)
    mul(t, step, out=t)                      # t: the update
    if decay != 1.0:
        w2 = mul(w, decay, out=gl if gl is not None else xp.empty(shape, dtype))
        xp.subtract(w2, t, out=w2)
    else:
        w2 = xp.subtract(w, t, out=t)
    return w2, m2, v2


def _adam_decompose(w, g, m, v, *, beta1, beta2, k1, k2, step, eps, decay, l2, first):
    """`adam_update` as Tensor ops (what ``Adam._update`` computed before the fused op)."""
    if l2:
        g = g + w * l2
    if first:
        m = g * k1
        v = (g * g) * k2
    else:
        m = m * beta1 + g * k1
        v = v * beta2 + (g * g) * k2
    upd = m / (v.sqrt() + eps) * step
    return (w * decay if decay != 1.0 else w) - upd, m, v


def _adam_decompose_key(*, l2, decay, first, **_):
    """What steers `_adam_decompose`'s code (its float attrs are scalar operands only)."""
    return (first, bool(l2), decay != 1.0)


ADAM_UPDATE = declare(
    "adam_update", "optim", nin=4, attrs=ADAM_ATTRS, infer=_adam_infer, numpy=_adam_numpy,
    nout=3, decompose=_adam_decompose, decompose_key=_adam_decompose_key,
    doc="one Adam/AdamW step: (w, g, m, v) -> (w', m', v') (see ember/ops/optim.py)")

#: parameters one adam_update_many takes at most (more go in several calls)
ADAM_MANY_MAX = 1024


def adam_many_split(xs):
    """The k quadruples ``(w, g, m, v)`` of adam_update_many's inputs ``w1..wk, g1..gk,
    m1..mk, v1..vk``."""
    k = len(xs) // 4
    return [(xs[i], xs[k + i], xs[2 * k + i], xs[3 * k + i]) for i in range(k)]


def _adam_many_infer(*xs, **attrs):
    k, rest = divmod(len(xs), 4)
    if rest or not 0 < k <= ADAM_MANY_MAX:
        raise ShapeError(f"adam_update_many: expects the k weights, then their k gradients, "
                         f"k first and k second moments (4k tensors, 1 <= k <= "
                         f"{ADAM_MANY_MAX}), got {len(xs)} tensors")
    out = []
    for quad in adam_many_split(xs):
        out += _adam_infer(*quad, **attrs)
    return out


def _adam_many_numpy(*xs, xp=np, **attrs):
    out = []
    for quad in adam_many_split(xs):
        out += _adam_numpy(*quad, xp=xp, **attrs)
    return tuple(out)


ADAM_UPDATE_MANY = declare(
    "adam_update_many", "optim", nin=-1, attrs=ADAM_ATTRS, infer=_adam_many_infer,
    numpy=_adam_many_numpy, nout=3 * ADAM_MANY_MAX,
    doc="adam_update of k parameters with the same scalars: (w1..wk, g1..gk, m1..mk, "
        "v1..vk) -> (w1', m1', v1', ..., wk', mk', vk')")
