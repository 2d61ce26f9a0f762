"""Cases for the index family: cat, stack, slice_assign (and x[...] = v), gather, scatter,
index_select, index_add, take, one_hot, tril/triu, nonzero, select_assign and advanced
(int-array and bool-mask) indexing. References are naive loops or NumPy's own indexing."""
import itertools

import numpy as np

import ember as em
from tests.conformance.harness import ALL, FLOATS, INTS, NUMERIC, Case, Input

IDX = dict(dtype="i64", differentiable=False)


def Index(high):
    return Input("index", high=high, **IDX)


def Mask():
    return Input("bool", dtype="bool", differentiable=False)


def Unique(n, dim):
    """Index values that are distinct along ``dim`` (each line is a prefix of a permutation of
    0..n-1), so scatter with reduce='assign' has one writer per target."""
    def gen(rng, shape):
        shape = tuple(shape)
        if not shape:
            return np.asarray(rng.integers(0, n))
        moved = shape[:dim] + shape[dim + 1:] + (shape[dim],)
        lines = [rng.permutation(n)[:shape[dim]] for _ in range(int(np.prod(moved[:-1])))]
        a = np.asarray(lines, dtype=np.int64).reshape(moved)
        return np.moveaxis(a, -1, dim)
    return Input(gen, **IDX)


# -- naive references -----------------------------------------------------------------------
def gather_ref(x, dim, idx):
    out = np.empty(idx.shape, x.dtype)
    for pos in np.ndindex(*idx.shape):
        src = list(pos)
        if x.ndim:
            src[dim] = idx[pos]
        out[pos] = x[tuple(src)]
    return out


def scatter_ref(x, dim, idx, src, reduce):
    out = x.copy()
    for pos in np.ndindex(*idx.shape):
        dst = list(pos)
        if x.ndim:
            dst[dim] = idx[pos]
        dst = tuple(dst)
        out[dst] = out[dst] + src[pos] if reduce == "add" else src[pos]
    return out


def index_select_ref(x, dim, idx):
    parts = [x[(slice(None),) * dim + (int(i),)] for i in idx]
    shape = x.shape[:dim] + (len(idx),) + x.shape[dim + 1:]
    return np.stack(parts, axis=dim) if parts else np.zeros(shape, x.dtype)


def index_add_ref(x, dim, idx, src):
    out = x.copy()
    for k, i in enumerate(idx):
        sl = (slice(None),) * dim
        out[sl + (int(i),)] = out[sl + (int(i),)] + src[sl + (k,)]
    return out


def one_hot_ref(x, n):
    out = np.zeros(x.shape + (n,), np.int64)
    for pos in np.ndindex(*x.shape):
        out[pos + (int(x[pos]),)] = 1
    return out


def tri_ref(x, k, lower):
    out = x.copy()
    n, m = x.shape[-2:]
    for i, j in itertools.product(range(n), range(m)):
        if (j - i > k) if lower else (j - i < k):
            out[..., i, j] = 0
    return out


def nonzero_ref(x):
    rows = [pos for pos in np.ndindex(*x.shape) if x[pos] != 0]
    return np.asarray(rows, np.int64).reshape(len(rows), x.ndim)


def _set(a, key, v):
    y = a.clone()   # a may be a grad leaf; gradients flow through the clone
    y[key] = v
    return y


def _set_ref(a, key, v):
    y = a.copy()
    y[key] = v
    return y


S_AS = (slice(1, 3), slice(None, None, -2))

CASES = [
    # -- cat / stack ---------------------------------------------------------------------
    Case("cat_dim0", "cat", lambda a, b: em.cat([a, b]), lambda a, b: np.concatenate([a, b]),
         [((2, 3), (1, 3)), ((0, 2), (3, 2)), ((1,), (4,))], dtypes=ALL),
    Case("cat_three_neg_dim", "cat", lambda a, b, c: em.cat((a, b, c), dim=-1),
         lambda a, b, c: np.concatenate([a, b, c], -1),
         [((2, 1), (2, 3), (2, 0)), ((1, 2, 2), (1, 2, 1), (1, 2, 2))], dtypes=ALL),
    Case("cat_promote", "cat", lambda a, b: em.cat([a, b], 1),
         lambda a, b: np.concatenate([a, b], 1), [((2, 2), (2, 3))],
         inputs=(Input(), Input("int", -3, 3, dtype="i32", differentiable=False)),
         dtypes=FLOATS),
    Case("stack", "cat", lambda a, b: em.stack([a, b]), lambda a, b: np.stack([a, b]),
         [((2, 3), (2, 3)), ((), ()), ((0, 2), (0, 2))], dtypes=ALL),
    Case("stack_last", "cat", lambda a, b, c: em.stack([a, b, c], -1),
         lambda a, b, c: np.stack([a, b, c], -1), [((2,), (2,), (2,)), ((1, 2),) * 3, ((),) * 3],
         dtypes=ALL),
    # -- slice_assign / setitem -----------------------------------------------------------
    Case("slice_assign", "slice_assign", lambda a, v: a.slice_assign(S_AS, v),
         lambda a, v: _set_ref(a, S_AS, v), [((4, 5), (2, 3)), ((3, 1), (2, 1)),
                                             ((2, 0), (1, 0))], dtypes=ALL),
    Case("slice_assign_broadcast", "slice_assign",
         lambda a, v: a.slice_assign([(0, 2), None], v),
         lambda a, v: _set_ref(a, np.s_[0:2, :], v), [((3, 4), (4,)), ((2, 2), (1, 2))],
         dtypes=ALL),
    Case("slice_assign_scalar", "slice_assign", lambda a: a.slice_assign([slice(-2, None)], 1),
         lambda a: _set_ref(a, np.s_[-2:], 1), [((3, 2),), ((1,),)], dtypes=ALL),
    Case("setitem_slices", "slice_assign", lambda a, v: _set(a, (slice(None), 0, None), v),
         lambda a, v: _set_ref(a, (slice(None), 0, None), v),
         [((3, 4, 2), (3, 1, 2)), ((2, 1, 1), (1, 1))], dtypes=ALL),
    Case("setitem_neg_step", "slice_assign", lambda a, v: _set(a, np.s_[::-2, 1], v),
         lambda a, v: _set_ref(a, np.s_[::-2, 1], v), [((5, 3), (3,)), ((2, 2), (1,))],
         dtypes=ALL),
    Case("setitem_int_index", "scatter", lambda a, v: _set(a, ([2, 0],), v),
         lambda a, v: _set_ref(a, ([2, 0],), v), [((3, 2), (2, 2)), ((4,), (2,))],
         dtypes=ALL),
    Case("setitem_mask", "scatter", lambda a, m: _set(a, m, 7),
         lambda a, m: _set_ref(a, m, 7), [((3, 4), (3, 4)), ((5,), (5,)), ((0, 2), (0, 2))],
         inputs=(Input(), Mask()), dtypes=ALL),
    Case("select_assign_int", "slice_assign", lambda a, v: a.select_assign(1, -1, v),
         lambda a, v: _set_ref(a, np.s_[:, -1], v), [((2, 3), (2,)), ((1, 2, 2), (1, 2))],
         dtypes=ALL),
    Case("select_assign_indices", "scatter", lambda a, i, v: a.select_assign(0, i, v),
         lambda a, i, v: index_add_ref(a, 0, i, v), [((3, 2), (4,), (4, 2)), ((2,), (3,), (3,))],
         inputs=(Input(), Index(2), Input()), dtypes=NUMERIC),
    # -- gather / scatter ------------------------------------------------------------------
    Case("gather_dim1", "gather", lambda a, i: a.gather(1, i), lambda a, i: gather_ref(a, 1, i),
         [((3, 4), (3, 2)), ((2, 5), (2, 6)), ((3, 4), (3, 0))], inputs=(Input(), Index(4)),
         dtypes=ALL),
    Case("gather_dim0_smaller", "gather", lambda a, i: a.gather(-a.ndim, i),
         lambda a, i: gather_ref(a, 0, i), [((3, 4), (2, 3)), ((3, 2, 2), (4, 1, 2))],
         inputs=(Input(), Index(3)), dtypes=ALL),
    Case("gather_0d", "gather", lambda a, i: a.gather(0, i), lambda a, i: gather_ref(a, 0, i),
         [((), ())], inputs=(Input(), Index(1)), dtypes=ALL),
    Case("scatter_assign", "scatter", lambda a, i, s: a.scatter(1, i, s),
         lambda a, i, s: scatter_ref(a, 1, i, s, "assign"),
         [((3, 4), (3, 3), (3, 3)), ((2, 5), (2, 2), (3, 4)), ((2, 3), (2, 0), (2, 0))],
         inputs=(Input(), Unique(4, 1), Input()), dtypes=ALL),
    Case("scatter_assign_dim0", "scatter", lambda a, i, s: a.scatter(0, i, s),
         lambda a, i, s: scatter_ref(a, 0, i, s, "assign"),
         [((4, 2), (3, 2), (3, 2)), ((4, 1, 2), (2, 1, 2), (2, 1, 2))],
         inputs=(Input(), Unique(4, 0), Input()), dtypes=ALL),
    Case("scatter_add", "scatter", lambda a, i, s: a.scatter(-1, i, s, reduce="add"),
         lambda a, i, s: scatter_ref(a, 1, i, s, "add"),
         [((3, 4), (3, 6), (3, 6)), ((2, 3), (1, 2), (2, 3)), ((2, 2), (2, 0), (2, 0))],
         inputs=(Input(), Index(4 - 1), Input()), dtypes=NUMERIC,
         tol={"f16": (4e-3, 4e-3), "bf16": (3e-2, 3e-2)}),
    Case("scatter_scalar_src", "scatter", lambda a, i: a.scatter(0, i, 5),
         lambda a, i: scatter_ref(a, 0, i, np.full(i.shape, 5), "assign"),
         [((3, 2), (2, 2)), ((4,), (3,))], inputs=(Input(), Index(2)), dtypes=ALL),
    Case("scatter_0d", "scatter", lambda a, i, s: a.scatter(0, i, s, reduce="add"),
         lambda a, i, s: a + s, [((), (), ())], inputs=(Input(), Index(1), Input()),
         dtypes=NUMERIC),
    # -- index_select / index_add / take ----------------------------------------------------
    Case("index_select", "index_select", lambda a, i: a.index_select(1, i),
         lambda a, i: index_select_ref(a, 1, i),
         [((2, 4), (5,)), ((3, 2, 2), (1,)), ((2, 3), (0,)), ((0, 3), (2,))],
         inputs=(Input(), Index(2)), dtypes=ALL),
    Case("index_select_neg_dim", "index_select", lambda a, i: a.index_select(-1, i),
         lambda a, i: index_select_ref(a, a.ndim - 1, i), [((2, 3), (4,)), ((3,), (3,))],
         inputs=(Input(), Index(3)), dtypes=ALL),
    Case("index_add", "scatter", lambda a, i, s: a.index_add(1, i, s),
         lambda a, i, s: index_add_ref(a, 1, i, s),
         [((2, 3), (4,), (2, 4)), ((1, 2, 2), (3,), (1, 3, 2)), ((2, 3), (0,), (2, 0))],
         inputs=(Input(), Index(2), Input()), dtypes=NUMERIC),
    Case("take", "index_select", lambda a, i: a.take(i), lambda a, i: a.reshape(-1)[i],
         [((3, 4), (2, 3)), ((5,), ()), ((2, 2), (0,))], inputs=(Input(), Index(4)),
         dtypes=ALL),
    # -- advanced indexing --------------------------------------------------------------------
    Case("getitem_index_tensor", "index_select", lambda a, i: a[i],
         lambda a, i: a[i], [((4, 3), (2, 3)), ((3,), (5,)), ((2, 2), (0,))],
         inputs=(Input(), Index(2)), dtypes=ALL),
    Case("getitem_index_mid", "index_select", lambda a, i: a[:, i, ::-1],
         lambda a, i: a[:, i, ::-1], [((2, 3, 4), (5,)), ((1, 2, 1), (2, 2))],
         inputs=(Input(), Index(2)), dtypes=ALL),
    Case("getitem_two_indices", ("index_select", "permute"), lambda a, i, j: a[i, :, j],
         lambda a, i, j: a[i, :, j], [((3, 2, 4), (2, 1), (3,)), ((2, 2, 2), (1,), (1,))],
         inputs=(Input(), Index(2), Index(2)), dtypes=ALL),
    Case("getitem_adjacent_indices", "index_select", lambda a, i, j: a[:, i, j],
         lambda a, i, j: a[:, i, j], [((2, 3, 4), (2, 2), (2, 2)), ((1, 2, 2), (3,), (1,))],
         inputs=(Input(), Index(2), Index(2)), dtypes=ALL),
    Case("getitem_mask", "index_select", lambda a, m: a[m], lambda a, m: a[m],
         [((3, 4), (3, 4)), ((5,), (5,)), ((2, 3), (2,)), ((0, 2), (0, 2))],
         inputs=(Input(), Mask()), dtypes=ALL),
    # -- one_hot / tril / triu / nonzero -------------------------------------------------------
    Case("one_hot", "one_hot", lambda a: a.one_hot(5), lambda a: one_hot_ref(a, 5),
         [((3,),), ((2, 2),), ((),), ((0,),)], inputs=(Input("int", 0, 4),), dtypes=INTS,
         grad=False),
    Case("one_hot_float", "one_hot", lambda a: em.one_hot(a, 3, dtype=em.float32),
         lambda a: one_hot_ref(a, 3).astype(np.float64), [((4,),)],
         inputs=(Input("int", 0, 2),), dtypes=("i64", "i32"), grad=False),
    Case("tril", (), lambda a: a.tril(), lambda a: tri_ref(a, 0, True),
         [((3, 4),), ((2, 3, 3),), ((1, 1),), ((0, 2),)], dtypes=ALL),
    Case("tril_k", (), lambda a: a.tril(1), lambda a: tri_ref(a, 1, True),
         [((4, 3),), ((2, 2),)], dtypes=ALL),
    Case("triu", (), lambda a: a.triu(), lambda a: tri_ref(a, 0, False),
         [((3, 4),), ((2, 3, 3),), ((0, 2),)], dtypes=ALL),
    Case("triu_neg_k", (), lambda a: em.triu(a, -1), lambda a: tri_ref(a, -1, False),
         [((4, 3),), ((3, 3),)], dtypes=ALL),
    Case("nonzero", (), lambda a: a.nonzero(), nonzero_ref,
         [((3, 4),), ((5,),), ((),), ((0, 3),)], inputs=(Input("int", 0, 1),), dtypes=ALL,
         grad=False),
]
