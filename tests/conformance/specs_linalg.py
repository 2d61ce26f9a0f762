"""Cases for linear algebra: matmul (every operand rank, batch broadcasting, zero-size and
zero inner dims, ints wrapping), the ``@`` operator, dot, outer, linear (the ``linear``
primitive where its inputs fit it, the composite for a 1-d input), and ``linear_backward``
run directly against the textbook gradients."""
import numpy as np

import ember as em
from tests.conformance.harness import FLOATS, NUMERIC, Case, Input
from tests.conformance.specs_nn import P


def _mm(a, b):
    """Reference: the naive sum of products in float64 / int64, with batch broadcasting."""
    a, b = np.asarray(a), np.asarray(b)
    va, vb = a.ndim == 1, b.ndim == 1
    a2 = a[None, :] if va else a
    b2 = b[:, None] if vb else b
    out = (a2[..., :, :, None] * b2[..., None, :, :]).sum(axis=-2)
    if va:
        out = out[..., 0, :]
    if vb:
        out = out[..., 0]
    return out


# (a, b) shape pairs for operands of >= 2 dims
MM_SHAPES = [
    ((2, 3), (3, 4)),
    ((2, 1, 3, 4), (3, 4, 2)),      # batch dims broadcast: (2, 1) with (3,)
    ((3, 2, 4), (1, 4, 5)),
    ((1, 3), (3, 1)),
    ((0, 3), (3, 2)),               # zero rows
    ((2, 0), (0, 3)),               # zero inner dim: zeros
    ((0, 2, 3), (3, 2)),            # zero batch
    ((2, 3, 2, 4), (4, 5)),         # one right matrix for a batch of two dims
]
# f16/bf16 accumulate in f32 and round once: the error is half an ulp of the result,
# within the default tolerances; ints wrap around (compared in the output dtype).
CASES = [
    Case("matmul", "matmul", lambda a, b: em.matmul(a, b), _mm, MM_SHAPES, dtypes=NUMERIC),
    Case("matmul_operator", "matmul", lambda a, b: a @ b, _mm, MM_SHAPES[:3], dtypes=NUMERIC),
    Case("matmul_k64", "matmul", lambda a, b: a @ b, _mm, [((3, 64), (64, 2))], dtypes=FLOATS,
         tol={"f32": (1e-4, 1e-5)}, grad=False),
    Case("matmul_ints_wrap", "matmul", lambda a, b: a @ b, _mm, [((3, 8), (8, 2))],
         inputs=(Input("int", 0, 100), Input("int", 0, 100)), dtypes=("i8", "u8", "i16"),
         grad=False),
    Case("matmul_vec_mat", "matmul", lambda a, b: a @ b, _mm,
         [((3,), (3, 4)), ((3,), (2, 3, 4)), ((0,), (0, 2))], dtypes=NUMERIC),
    Case("matmul_mat_vec", "matmul", lambda a, b: a @ b, _mm,
         [((2, 3), (3,)), ((2, 4, 3), (3,)), ((2, 0), (0,))], dtypes=NUMERIC),
    Case("matmul_vec_vec", "matmul", lambda a, b: a @ b, _mm,
         [((4,), (4,)), ((1,), (1,)), ((0,), (0,))], dtypes=NUMERIC),
    Case("dot", "matmul", lambda a, b: em.dot(a, b), np.dot, [((5,), (5,)), ((0,), (0,))],
         dtypes=NUMERIC),
    Case("outer", "mul", lambda a, b: em.outer(a, b), np.multiply.outer,
         [((3,), (4,)), ((0,), (2,)), ((1,), (1,))], dtypes=NUMERIC),
    Case("matmul_transpose_a", "matmul", lambda a, b: em.matmul(a, b, transpose_a=True),
         lambda a, b: _mm(np.swapaxes(a, -1, -2), b),
         [((3, 2), (3, 4)), ((2, 1, 4, 3), (3, 4, 2)), ((4, 3, 2), (3, 5)), ((0, 3), (0, 2)),
          ((3, 0), (3, 2))], dtypes=NUMERIC),
    Case("matmul_transpose_b", "matmul", lambda a, b: em.matmul(a, b, transpose_b=True),
         lambda a, b: _mm(a, np.swapaxes(b, -1, -2)),
         [((2, 3), (4, 3)), ((2, 1, 3, 4), (3, 2, 4)), ((2, 3, 4), (5, 4)), ((3,), (2, 3))],
         dtypes=NUMERIC),
    Case("matmul_transpose_both", "matmul",
         lambda a, b: em.matmul(a, b, transpose_a=True, transpose_b=True),
         lambda a, b: _mm(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)),
         [((3, 2), (4, 3)), ((2, 1, 4, 3), (3, 2, 4)), ((4, 3, 2), (5, 3))], dtypes=NUMERIC),
    Case("linear", ("linear", "matmul", "add"), lambda x, w, b: em.linear(x, w, b),
         lambda x, w, b: _mm(x, w) + b,
         [((2, 3), (3, 4), (4,)), ((2, 2, 3), (3, 4), (4,)), ((3,), (3, 2), (2,)),
          ((0, 3), (3, 2), (2,))]),
    Case("linear_no_bias", ("linear", "matmul"), lambda x, w: em.linear(x, w), _mm,
         [((2, 3), (3, 4)), ((4, 1, 3), (3, 2))]),
]


def _linear_grads(g, x, w, need_x, has_bias):
    """``[dx] + [dweight] + [dbias]`` of ``x @ w + b`` in float64, by the textbook."""
    out = [_mm(g, np.swapaxes(w, -1, -2))] if need_x else []
    n = int(np.prod(x.shape[:-1]))
    xr, gr = x.reshape(n, x.shape[-1]), g.reshape(n, g.shape[-1])
    out.append(_mm(np.swapaxes(xr, -1, -2), gr))
    if has_bias:
        out.append(gr.sum(axis=0))
    return tuple(out)


def _lb(need_x, has_bias):
    return (lambda g, x, w: P("linear_backward", g, x, w, need_x=need_x, has_bias=has_bias),
            lambda g, x, w: _linear_grads(g, x, w, need_x, has_bias))


# (g, x, w) shapes
LB_SHAPES = [((2, 4), (2, 3), (3, 4)), ((2, 5, 4), (2, 5, 3), (3, 4)),
             ((2, 1, 3, 2), (2, 1, 3, 5), (5, 2)), ((0, 4), (0, 3), (3, 4)),
             ((2, 0), (2, 3), (3, 0))]
CASES += [Case(f"linear_backward_{'x' if nx else 'nox'}_{'b' if hb else 'nob'}",
               "linear_backward", *_lb(nx, hb), LB_SHAPES if nx and hb else LB_SHAPES[:2],
               grad=False)
          for nx in (True, False) for hb in (True, False)]
