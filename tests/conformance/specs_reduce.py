"""Cases for reductions, scans and sorts: sum, prod, mean, max, min, max/min_dim_with_indices,
argmax, argmin, any, all, var, std, var_mean, std_mean, logsumexp, max_abs, cumsum, cumprod,
cummax, cummin, sort, sort_with_indices, argsort, topk, take_along_dim_backward.

References are NumPy float64/int64 or plain Python loops; ties are resolved by the references
the way ember documents it (first index for argmax, latest for cummax, stable sorts).
"""
import warnings

import numpy as np

import ember as em
from ember.tensor.dispatch import apply
from tests.conformance.harness import ALL, FLOATS, NUMERIC, Case, Input

# -- input generators ------------------------------------------------------------------------


def _distinct(rng, shape):
    """Distinct integers spaced 1 apart, centred on 0: no ties, exact in every dtype (the
    element counts here stay below 256, so u8 and i8 wrap them without collisions)."""
    n = int(np.prod(shape)) if shape else 1
    return (rng.permutation(n) - n // 2).reshape(shape)


def _signed_mag(rng, shape):
    """Values with |v| in [0.5, 1.5] and random signs: products stay moderate, never 0."""
    return rng.uniform(0.5, 1.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)


def _zeros_per_row(rng, shape):
    """Like _signed_mag, with row r (over the last dim) holding r % 3 zeros."""
    a = _signed_mag(rng, shape)
    if not shape or shape[-1] == 0:
        return a
    rows = a.reshape(-1, shape[-1])
    for r in range(rows.shape[0]):
        k = min(r % 3, shape[-1])
        rows[r, rng.choice(shape[-1], size=k, replace=False)] = 0.0
    return rows.reshape(shape)


def _mostly_true(rng, shape):
    return (rng.random(size=shape) < 0.8).astype(np.int64)


DISTINCT = Input(_distinct)
SIGNED = Input(_signed_mag)
BINARY = Input(_mostly_true)
SMALL_INT = Input("int", -3, 3)

# A sum of n f16 values rounds once (f32 accumulation), so the f16/bf16 defaults hold; wider
# tolerances are given where an op rounds several times in the input dtype.
SUM_TOL = {"f16": (2e-3, 4e-3), "bf16": (1.6e-2, 1.6e-2)}
F32_OUT = {"f32": (1e-5, 1e-5)}      # int inputs give f32 results: compare at f32 precision

RED_SHAPES = [((2, 3, 4),), ((3, 1),), ((),), ((0, 3),), ((1, 1, 1),)]


def _quiet(fn):
    """A reference that may legitimately warn (mean of nothing, 0/0 in var)."""
    def run(*a):
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return fn(*a)
    return run


def _reduce_cases(name, ember_fn, np_fn, dtypes, inputs, tol=None, extra_shapes=(),
                  grad=True):
    """Cases over dim=None, one dim, a negative dim, several dims, keepdim both ways."""
    tol = tol or {}
    cases = [
        Case(f"{name}_none", name, lambda a: ember_fn(a), _quiet(lambda a: np_fn(a, None, False)),
             [((3, 4),), ((),), ((0, 3),), ((1,),)] + list(extra_shapes), inputs=inputs,
             dtypes=dtypes, tol=tol),
        Case(f"{name}_dim1", name, lambda a: ember_fn(a, 1),
             _quiet(lambda a: np_fn(a, 1, False)),
             [((3, 4),), ((2, 3, 4),), ((0, 3),), ((4, 1),)], inputs=inputs, dtypes=dtypes,
             tol=tol),
        Case(f"{name}_negdim_keep", name, lambda a: ember_fn(a, -1, keepdim=True),
             _quiet(lambda a: np_fn(a, -1, True)),
             [((2, 3, 4),), ((5,),), ((3, 0, 2),), ((1, 1),)], inputs=inputs,
             dtypes=dtypes, tol=tol),
        Case(f"{name}_dims02", name, lambda a: ember_fn(a, (0, 2)),
             _quiet(lambda a: np_fn(a, (0, 2), False)),
             [((2, 3, 4),), ((3, 2, 2),), ((2, 0, 3),), ((1, 1, 1),)], inputs=inputs,
             dtypes=dtypes, tol=tol),
        Case(f"{name}_dims_neg_keep", name, lambda a: ember_fn(a, [-1, 0], keepdim=True),
             _quiet(lambda a: np_fn(a, (-1, 0), True)),
             [((2, 3, 4),), ((4, 2),), ((0, 2, 3),)], inputs=inputs, dtypes=dtypes, tol=tol),
        Case(f"{name}_0d_dim0", name, lambda a: ember_fn(a, 0),
             _quiet(lambda a: np_fn(a, None, False)), [((),)], inputs=inputs, dtypes=dtypes,
             tol=tol),
    ]
    for c in cases:
        c.grad = grad
    return cases


def _np_sum(a, dims, keep):
    return np.sum(a, axis=dims, keepdims=keep)


def _np_prod(a, dims, keep):
    return np.prod(a, axis=dims, keepdims=keep)


def _np_mean(a, dims, keep):
    return np.mean(a.astype(np.float64), axis=dims, keepdims=keep)


def _np_max(a, dims, keep):
    return np.max(a, axis=dims, keepdims=keep)


def _np_min(a, dims, keep):
    return np.min(a, axis=dims, keepdims=keep)


def _np_any(a, dims, keep):
    return np.any(a != 0, axis=dims, keepdims=keep)


def _np_all(a, dims, keep):
    return np.all(a != 0, axis=dims, keepdims=keep)


def _np_max_abs(a, dims, keep):
    return np.max(np.abs(a), axis=dims, keepdims=keep)


def _np_logsumexp(a, dims, keep):
    a = a.astype(np.float64)
    if dims is None:
        dims = tuple(range(a.ndim))
    dims = (dims,) if isinstance(dims, int) else dims
    dims = tuple(d % max(a.ndim, 1) for d in dims)
    if a.ndim == 0:
        return a.copy()
    # move the reduced dims to the end, flatten them, and reduce with logaddexp
    rest = [d for d in range(a.ndim) if d not in dims]
    size = int(np.prod([a.shape[d] for d in dims]))
    b = np.transpose(a, rest + list(dims)).reshape([a.shape[d] for d in rest] + [size])
    r = np.logaddexp.reduce(b, axis=-1)
    if keep:
        r = r.reshape([1 if d in dims else a.shape[d] for d in range(a.ndim)])
    return r


# The maxima of the zero-size shapes reduce non-empty dims only.
EXT_SHAPES = {
    "none": [((3, 4),), ((),), ((1,),), ((2, 1, 3),)],
    "dim1": [((3, 4),), ((2, 3, 4),), ((0, 3),), ((4, 1),)],
    "negdim_keep": [((2, 3, 4),), ((5,),), ((3, 0, 2),), ((1, 1),)],
    "dims02": [((2, 3, 4),), ((3, 2, 2),), ((2, 0, 3),), ((1, 1, 1),)],
    "dims_neg_keep": [((2, 3, 4),), ((4, 2),), ((2, 0, 3),)],
    "0d_dim0": [((),)],
}


def _extreme_cases(name, ember_fn, np_fn, dtypes):
    cases = _reduce_cases(name, ember_fn, np_fn, dtypes, (DISTINCT,))
    for c in cases:
        c.shapes = EXT_SHAPES[c.name[len(name) + 1:]]
    return cases


CASES = []

# -- sum ------------------------------------------------------------------------------------
CASES += _reduce_cases("sum", em.sum, _np_sum, ALL, (Input(),), SUM_TOL)
CASES += [
    Case("sum_f16_long", "sum", lambda a: a.sum(), np.sum, [((4096,),)],
         inputs=(Input("uniform", 0.0, 1.0),), dtypes=("f16", "bf16"), grad=False,
         layouts=False),
    Case("sum_bool_counts", "sum", lambda a: a.sum(0), lambda a: a.sum(0), [((300, 2),)],
         inputs=(BINARY,), dtypes=("bool", "u8", "i8"), grad=False, layouts=False),
]

# -- prod -----------------------------------------------------------------------------------
CASES += _reduce_cases("prod", em.prod, _np_prod, ALL, (SIGNED,),
                       {"f16": (2e-3, 4e-3), "bf16": (1.6e-2, 1.6e-2)})
CASES += [
    Case("prod_ints_wrap", "prod", lambda a: a.prod(1), lambda a: np.prod(a, 1),
         [((3, 7),)], inputs=(Input("int", -9, 9),), dtypes=("i64", "i32", "i16", "i8", "u8"),
         grad=False),
    Case("prod_zeros", "prod", lambda a: a.prod(-1), lambda a: np.prod(a, -1),
         [((3, 4),), ((6, 3),)], inputs=(Input(_zeros_per_row),), dtypes=FLOATS),
    Case("prod_zeros_keep", "prod", lambda a: a.prod((0, 2), keepdim=True),
         lambda a: np.prod(a, (0, 2), keepdims=True),
         [((2, 3, 2),)], inputs=(Input(lambda rng, s: np.where(
             np.arange(12).reshape(s) % 5 == 0, 0.0, _signed_mag(rng, s))),), dtypes=FLOATS,
         layouts=False),
]

# -- mean -----------------------------------------------------------------------------------
CASES += _reduce_cases("mean", em.mean, _np_mean, ALL, (Input(),), F32_OUT)
CASES += [
    Case("mean_f16_long", "sum", lambda a: a.mean(), lambda a: np.mean(a), [((4096,),)],
         inputs=(Input("uniform", 0.0, 1.0),), dtypes=("f16", "bf16"), grad=False,
         layouts=False),
]

# -- max, min, max_abs ----------------------------------------------------------------------
CASES += _extreme_cases("max", em.max, _np_max, ALL)
CASES += _extreme_cases("min", em.min, _np_min, ALL)
CASES += [
    Case("max_abs", ("max", "abs"), lambda a: a.max_abs(), lambda a: np.max(np.abs(a)),
         [((3, 4),), ((),), ((2, 1),)], inputs=(DISTINCT,),
         dtypes=("f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8")),
    Case("max_abs_dim", ("max", "abs"), lambda a: a.max_abs(1, keepdim=True),
         lambda a: np.max(np.abs(a), 1, keepdims=True), [((3, 4),), ((0, 2),)],
         inputs=(DISTINCT,), dtypes=FLOATS),
    Case("max_ties_ints", "max", lambda a: a.max(0), lambda a: np.max(a, 0), [((6, 5),)],
         inputs=(SMALL_INT,), dtypes=ALL, grad=False),
]

# -- arg-reductions and values with indices -------------------------------------------------
ARG_SHAPES = [((3, 4),), ((2, 3, 4),), ((1, 1),), ((4, 1),), ((0, 3),)]
for _n, _f in (("argmax", np.argmax), ("argmin", np.argmin)):
    CASES += [
        Case(f"{_n}_dim1", _n, lambda a, n=_n: getattr(a, n)(1),
             lambda a, f=_f: f(a, 1), ARG_SHAPES, inputs=(SMALL_INT,), dtypes=ALL,
             grad=False),
        Case(f"{_n}_negdim_keep", _n, lambda a, n=_n: getattr(a, n)(-1, keepdim=True),
             lambda a, f=_f: f(a, -1, keepdims=True), [((2, 3, 4),), ((5,),), ((0, 2),)],
             inputs=(SMALL_INT,), dtypes=ALL, grad=False),
        Case(f"{_n}_none", _n, lambda a, n=_n: getattr(a, n)(),
             lambda a, f=_f: f(a), [((3, 4),), ((),), ((2, 1, 3),)], inputs=(SMALL_INT,),
             dtypes=ALL, grad=False),
        Case(f"{_n}_none_keep", _n, lambda a, n=_n: getattr(a, n)(keepdim=True),
             lambda a, f=_f: np.reshape(f(a), (1,) * a.ndim), [((3, 4),), ((),)],
             inputs=(SMALL_INT,), dtypes=("f32", "i32"), grad=False),
        Case(f"{_n}_0d", _n, lambda a, n=_n: getattr(a, n)(0), lambda a: np.int64(0),
             [((),)], dtypes=("f32", "i64", "bool"), grad=False),
    ]


def _with_idx_ref(np_val, np_arg, dim, keep):
    def ref(a):
        if a.ndim == 0:
            return a.copy(), np.int64(0)
        return np_val(a, dim, keepdims=keep), np_arg(a, dim, keepdims=keep)
    return ref


for _n, _v, _a in (("max_dim_with_indices", np.max, np.argmax),
                   ("min_dim_with_indices", np.min, np.argmin)):
    CASES += [
        Case(f"{_n}", _n, lambda a, n=_n: getattr(a, n)(1), _with_idx_ref(_v, _a, 1, False),
             [((3, 4),), ((2, 3, 2),), ((0, 3),), ((4, 1),)], inputs=(DISTINCT,), dtypes=ALL),
        Case(f"{_n}_negdim_keep", _n, lambda a, n=_n: getattr(a, n)(-1, keepdim=True),
             _with_idx_ref(_v, _a, -1, True), [((2, 3, 4),), ((5,),), ((0, 2),)],
             inputs=(DISTINCT,), dtypes=ALL),
        Case(f"{_n}_ties", _n, lambda a, n=_n: getattr(a, n)(0),
             _with_idx_ref(_v, _a, 0, False), [((6, 5),)], inputs=(SMALL_INT,), dtypes=ALL,
             grad=False),
        Case(f"{_n}_0d", _n, lambda a, n=_n: getattr(a, n)(-1),
             _with_idx_ref(_v, _a, 0, False), [((),)], dtypes=FLOATS),
    ]

# -- any, all -------------------------------------------------------------------------------
CASES += _reduce_cases("any", em.any, _np_any, ALL, (BINARY,), grad=False)
CASES += _reduce_cases("all", em.all, _np_all, ALL, (BINARY,), grad=False)
CASES += [
    Case("any_all_nan", ("any", "all"), lambda a: (a.any(), (a * float("nan")).all(1)),
         lambda a: (np.any(a != 0), np.ones(a.shape[0], bool)), [((3, 2),)],
         inputs=(Input("int", 0, 0),), dtypes=FLOATS, grad=False),
]

# -- var, std, var_mean, std_mean -----------------------------------------------------------


def _np_var(a, dims, keep, correction=1):
    a = a.astype(np.float64)
    return np.var(a, axis=dims, ddof=correction, keepdims=keep)


VAR_SHAPES = [((3, 4),), ((2, 3, 2),), ((1, 3),), ((0, 3),), ((),)]
STAT_TOL = {"f32": (2e-5, 2e-5), "f16": (2e-3, 4e-3), "bf16": (1.6e-2, 1.6e-2)}
CASES += [
    Case("var_all", "sum", lambda a: a.var(), _quiet(lambda a: _np_var(a, None, False)),
         VAR_SHAPES, dtypes=NUMERIC, tol=STAT_TOL),
    Case("var_dim1_keep", "sum", lambda a: a.var(1, keepdim=True),
         _quiet(lambda a: _np_var(a, 1, True)), VAR_SHAPES[:4], dtypes=NUMERIC, tol=STAT_TOL),
    Case("var_dims_corr0", "sum", lambda a: a.var((0, -1), correction=0),
         _quiet(lambda a: _np_var(a, (0, -1), False, 0)), VAR_SHAPES[:4], dtypes=NUMERIC,
         tol=STAT_TOL),
    Case("var_corr_big", "sum", lambda a: a.var(1, correction=5),
         _quiet(lambda a: _np_var(a, 1, False, 5)), [((2, 3),), ((2, 6),)], dtypes=FLOATS,
         grad=False),
    Case("std_all", ("sum", "sqrt"), lambda a: a.std(),
         _quiet(lambda a: np.sqrt(_np_var(a, None, False))), VAR_SHAPES, dtypes=NUMERIC,
         tol=STAT_TOL),
    Case("std_dim0_corr0", ("sum", "sqrt"), lambda a: a.std(0, correction=0),
         _quiet(lambda a: np.sqrt(_np_var(a, 0, False, 0))), VAR_SHAPES[:4], dtypes=NUMERIC,
         tol=STAT_TOL),
    Case("var_mean", "sum", lambda a: a.var_mean(1),
         _quiet(lambda a: (_np_var(a, 1, False), np.mean(a.astype(np.float64), 1))),
         VAR_SHAPES[:4], dtypes=NUMERIC, tol=STAT_TOL),
    Case("std_mean_keep", ("sum", "sqrt"), lambda a: a.std_mean(-1, keepdim=True),
         _quiet(lambda a: (np.sqrt(_np_var(a, -1, True)),
                           np.mean(a.astype(np.float64), -1, keepdims=True))),
         VAR_SHAPES[:4], dtypes=NUMERIC, tol=STAT_TOL),
]

# -- logsumexp ------------------------------------------------------------------------------
LSE_OPS = ("max", "sum", "exp", "log", "mask_fill", "is_inf")
LSE_TOL = {"f32": (2e-5, 2e-5), "f16": (4e-3, 4e-3), "bf16": (3e-2, 3e-2)}


def _with_infs(rng, shape):
    """Rows (over the last dim) that are: finite, all -inf, partly -inf, holding +inf."""
    a = rng.normal(size=shape)
    rows = a.reshape(-1, shape[-1])
    rows[1, :] = -np.inf
    rows[2, 0] = -np.inf
    rows[3, 1] = np.inf
    return rows.reshape(shape)


CASES += [
    Case("logsumexp_dim1", LSE_OPS, lambda a: a.logsumexp(1),
         lambda a: _np_logsumexp(a, 1, False), [((3, 4),), ((2, 3, 2),), ((0, 3),), ((3, 0),),
                                                ((4, 1),)],
         dtypes=NUMERIC, tol=LSE_TOL),
    Case("logsumexp_all", LSE_OPS, lambda a: a.logsumexp(),
         lambda a: _np_logsumexp(a, None, False), [((3, 4),), ((),), ((0, 2),)],
         inputs=(Input("normal"),), dtypes=FLOATS, tol=LSE_TOL),
    Case("logsumexp_dims_keep", LSE_OPS, lambda a: a.logsumexp((0, -1), keepdim=True),
         lambda a: _np_logsumexp(a, (0, -1), True), [((2, 3, 4),), ((1, 2, 3),)],
         dtypes=FLOATS, tol=LSE_TOL),
    Case("logsumexp_large", LSE_OPS, lambda a: (a * 1000.0).logsumexp(-1),
         lambda a: _np_logsumexp(a * 1000.0, -1, False), [((3, 4),)], dtypes=("f64", "f32"),
         grad=False),
    Case("logsumexp_infs", LSE_OPS, lambda a: a.logsumexp(-1),
         lambda a: _np_logsumexp(a, -1, False), [((4, 3),)], inputs=(Input(_with_infs),),
         dtypes=FLOATS, tol=LSE_TOL, grad=False, layouts=False),
]

# -- scans ----------------------------------------------------------------------------------


def _cum_ext_ref(dim, better_or_equal):
    """Running extreme and its index by a plain loop: the latest index on ties."""
    def ref(a):
        if a.ndim == 0:
            return a.copy(), np.int64(0)
        b = np.moveaxis(a, dim, -1)
        vals = np.empty_like(b)
        idx = np.zeros(b.shape, np.int64)
        for i in np.ndindex(b.shape[:-1]):
            best, bi = None, 0
            for j in range(b.shape[-1]):
                v = b[i + (j,)]
                if best is None or better_or_equal(v, best):
                    best, bi = v, j
                vals[i + (j,)] = best
                idx[i + (j,)] = bi
        return np.moveaxis(vals, -1, dim), np.moveaxis(idx, -1, dim)
    return ref


def _np_cumsum_rev(a, dim):
    return np.flip(np.cumsum(np.flip(a, dim), dim), dim)


SCAN_SHAPES = [((3, 4),), ((2, 3, 2),), ((),), ((0, 3),), ((3, 0),), ((1, 5),)]
CASES += [
    Case("cumsum_dim1", "cumsum", lambda a: a.cumsum(1) if a.ndim > 1 else a.cumsum(0),
         lambda a: np.cumsum(a, 1) if a.ndim > 1 else np.cumsum(a.reshape(-1)).reshape(a.shape),
         SCAN_SHAPES, dtypes=ALL, tol=SUM_TOL),
    Case("cumsum_negdim", "cumsum", lambda a: a.cumsum(-1),
         lambda a: np.cumsum(a.reshape(-1) if a.ndim == 0 else a, -1).reshape(a.shape),
         SCAN_SHAPES, dtypes=ALL, tol=SUM_TOL),
    Case("cumsum_dim0", "cumsum", lambda a: a.cumsum(0), lambda a: np.cumsum(a, 0),
         [((4, 3),), ((5,),)], dtypes=NUMERIC, tol=SUM_TOL),
    Case("cumsum_reverse", "cumsum",
         lambda a: apply(em.ops.get("cumsum"), (a,), {"dim": 1, "reverse": True}),
         lambda a: _np_cumsum_rev(a, 1), [((3, 4),), ((2, 5, 2),), ((2, 0),)], dtypes=ALL,
         tol=SUM_TOL),
    Case("cumsum_f16_long", "cumsum", lambda a: a.cumsum(0), lambda a: np.cumsum(a, 0),
         [((3000,),)], inputs=(Input("uniform", 1.0, 1.0),), dtypes=("f16", "bf16"),
         grad=False, layouts=False),
    Case("cumprod_dim1", "cumprod", lambda a: a.cumprod(1), lambda a: np.cumprod(a, 1),
         [((3, 4),), ((2, 3, 2),), ((0, 3),), ((3, 0),), ((1, 5),)], inputs=(SIGNED,),
         dtypes=ALL, tol=SUM_TOL),
    Case("cumprod_negdim", "cumprod", lambda a: a.cumprod(-1),
         lambda a: np.cumprod(a.reshape(-1) if a.ndim == 0 else a, -1).reshape(a.shape),
         [((2, 5),), ((),), ((4,),)], inputs=(SIGNED,), dtypes=ALL, tol=SUM_TOL),
    Case("cumprod_ints_wrap", "cumprod", lambda a: a.cumprod(0), lambda a: np.cumprod(a, 0),
         [((9, 2),)], inputs=(Input("int", -9, 9),), dtypes=("i64", "i32", "i16", "i8", "u8"),
         grad=False),
]
for _n, _cmp in (("cummax", np.greater_equal), ("cummin", np.less_equal)):
    CASES += [
        Case(f"{_n}_dim1", _n, lambda a, n=_n: getattr(a, n)(1), _cum_ext_ref(1, _cmp),
             [((3, 4),), ((2, 3, 2),), ((0, 3),), ((3, 0),), ((1, 5),)], inputs=(DISTINCT,),
             dtypes=ALL),
        Case(f"{_n}_negdim", _n, lambda a, n=_n: getattr(a, n)(-1), _cum_ext_ref(-1, _cmp),
             [((2, 5),), ((4,),)], inputs=(DISTINCT,), dtypes=ALL),
        Case(f"{_n}_dim0_ties", _n, lambda a, n=_n: getattr(a, n)(0), _cum_ext_ref(0, _cmp),
             [((7, 4),)], inputs=(SMALL_INT,), dtypes=ALL, grad=False),
        Case(f"{_n}_0d", _n, lambda a, n=_n: getattr(a, n)(0), _cum_ext_ref(0, _cmp),
             [((),)], dtypes=("f32", "f64", "i32")),
    ]

# -- sorting --------------------------------------------------------------------------------


def _np_argsort(a, dim, descending):
    """Stable argsort; descending sorts the negation, so equal values keep their order."""
    if a.ndim == 0:
        return np.int64(0)
    key = a.astype(np.float64)
    return np.argsort(-key if descending else key, axis=dim, kind="stable")


def _sort_ref(dim, descending):
    def ref(a):
        idx = _np_argsort(a, dim, descending)
        if a.ndim == 0:
            return a.copy(), idx
        return np.take_along_axis(a, idx, dim), idx
    return ref


def _topk_ref(k, dim, largest):
    def ref(a):
        if a.ndim == 0:
            return a.copy(), np.int64(0)
        idx = np.take(_np_argsort(a, dim, largest), np.arange(k), axis=dim)
        return np.take_along_axis(a, idx, dim), idx
    return ref


SORT_SHAPES = [((3, 5),), ((2, 4, 3),), ((),), ((0, 3),), ((3, 0),), ((1, 1),)]
CASES += [
    Case("sort_values", "sort", lambda a: a.sort(), lambda a: _sort_ref(-1, False)(a)[0],
         SORT_SHAPES, inputs=(DISTINCT,), dtypes=ALL),
    Case("sort_values_desc_dim0", "sort", lambda a: em.sort(a, 0, descending=True),
         lambda a: _sort_ref(0, True)(a)[0], [((4, 3),), ((2, 3, 2),), ((0, 2),)],
         inputs=(DISTINCT,), dtypes=ALL),
    Case("sort_with_indices", "sort", lambda a: a.sort_with_indices(1),
         _sort_ref(1, False), [((3, 5),), ((2, 4, 3),), ((0, 3),), ((3, 0),)],
         inputs=(DISTINCT,), dtypes=ALL),
    Case("sort_with_indices_desc", "sort",
         lambda a: a.sort_with_indices(-1, descending=True), _sort_ref(-1, True),
         [((3, 5),), ((6,),), ((),)], inputs=(DISTINCT,), dtypes=ALL),
    Case("sort_stable_ties", "sort", lambda a: a.sort_with_indices(0), _sort_ref(0, False),
         [((9, 3),)], inputs=(SMALL_INT,), dtypes=ALL, grad=False),
    Case("sort_stable_ties_desc", "sort", lambda a: a.sort_with_indices(1, descending=True),
         _sort_ref(1, True), [((3, 9),)], inputs=(SMALL_INT,), dtypes=ALL, grad=False),
    Case("argsort", "argsort", lambda a: a.argsort(), lambda a: _np_argsort(a, -1, False),
         [((3, 5),), ((),), ((0, 2),), ((4, 0),)], inputs=(SMALL_INT,), dtypes=ALL,
         grad=False),
    Case("argsort_desc_dim0", "argsort", lambda a: a.argsort(0, descending=True),
         lambda a: _np_argsort(a, 0, True), [((6, 3),), ((2, 2, 2),)], inputs=(SMALL_INT,),
         dtypes=ALL, grad=False),
    Case("topk_largest", "topk", lambda a: a.topk(2), _topk_ref(2, -1, True),
         [((3, 5),), ((2, 3, 4),), ((0, 3),), ((4, 2),)], inputs=(DISTINCT,), dtypes=ALL),
    Case("topk_smallest_dim0", "topk", lambda a: a.topk(3, dim=0, largest=False),
         _topk_ref(3, 0, False), [((5, 2),), ((3, 2, 2),), ((3, 0),)], inputs=(DISTINCT,),
         dtypes=ALL),
    Case("topk_all_and_none", "topk", lambda a: (a.topk(a.shape[1], 1)[0], a.topk(0, 1)[1]),
         lambda a: (_topk_ref(a.shape[1], 1, True)(a)[0], np.zeros((a.shape[0], 0), np.int64)),
         [((3, 4),)], inputs=(DISTINCT,), dtypes=("f32", "i32")),
    Case("topk_ties", "topk", lambda a: a.topk(3, 1), _topk_ref(3, 1, True), [((4, 7),)],
         inputs=(SMALL_INT,), dtypes=ALL, grad=False),
    Case("topk_long_rows", "topk", lambda a: a.topk(5, 1), _topk_ref(5, 1, True),
         [((3, 100),), ((2, 70),)], inputs=(DISTINCT,),
         dtypes=("f64", "f32", "f16", "bf16", "i64", "i32", "i16")),
    Case("topk_long_rows_smallest", "topk", lambda a: a.topk(4, 0, largest=False),
         _topk_ref(4, 0, False), [((90, 2),)], inputs=(DISTINCT,),
         dtypes=("f64", "f32", "i64"), grad=False),
    Case("topk_long_rows_ties", "topk", lambda a: a.topk(3, -1), _topk_ref(3, -1, True),
         [((6, 80),)], inputs=(Input("int", -40, 40),), dtypes=ALL, grad=False),
    Case("topk_0d", "topk", lambda a: a.topk(1), _topk_ref(1, 0, True), [((),)],
         dtypes=("f32", "i64")),
]


# -- take_along_dim_backward ----------------------------------------------------------------
def _take_back(dim, size):
    op = em.ops.get("take_along_dim_backward")
    return lambda g, i: apply(op, (g, i), {"dim": dim, "size": size})


def _take_back_ref(dim, size):
    """Zeros with dim grown to size, g added at the indices, by a plain loop."""
    def ref(g, idx):
        if g.ndim == 0:
            return g.copy()
        shape = list(g.shape)
        shape[dim] = size
        out = np.zeros(shape, np.float64)
        for pos in np.ndindex(g.shape):
            tgt = list(pos)
            tgt[dim] = idx[pos]
            out[tuple(tgt)] += g[pos]
        return out
    return ref


CASES += [
    Case("take_along_dim_backward_dim1", "take_along_dim_backward", _take_back(1, 5),
         _take_back_ref(1, 5), [((3, 4), (3, 4)), ((2, 6, 3), (2, 6, 3)), ((0, 2), (0, 2)),
                                ((2, 0), (2, 0))],
         inputs=(Input(), Input("index", high=5, dtype="i64", differentiable=False))),
    Case("take_along_dim_backward_dim0", "take_along_dim_backward", _take_back(0, 2),
         _take_back_ref(0, 2), [((4, 3), (4, 3)), ((1,), (1,))],
         inputs=(Input(), Input("index", high=2, dtype="i64", differentiable=False))),
    Case("take_along_dim_backward_0d", "take_along_dim_backward", _take_back(0, 1),
         _take_back_ref(0, 1), [((), ())],
         inputs=(Input(), Input("index", high=1, dtype="i64", differentiable=False))),
]
