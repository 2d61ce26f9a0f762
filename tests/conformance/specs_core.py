"""Cases for the ops declared with the core: add, sub, mul, div, neg, exp, log, cast, equal,
sum, reshape, expand, full, random."""
import numpy as np

import ember as em
from tests.conformance.harness import ALL, FLOATS, NUMERIC, Case, Input

BIN_SHAPES = [((2, 3), (2, 3)), ((), ()), ((0, 3), (0, 3)), ((4, 1), (1, 3)), ((3,), (2, 3))]
UN_SHAPES = [((2, 3),), ((),), ((0, 3),), ((1, 4),)]

CASES = [
    Case("add", "add", lambda a, b: a + b, np.add, BIN_SHAPES, dtypes=NUMERIC),
    Case("add_scalar", "add", lambda a: a + 2.5, lambda a: a + 2.5, UN_SHAPES),
    Case("sub", "sub", lambda a, b: a - b, np.subtract, BIN_SHAPES, dtypes=NUMERIC),
    Case("rsub_scalar", "sub", lambda a: 3 - a, lambda a: 3 - a, UN_SHAPES, dtypes=NUMERIC),
    Case("mul", "mul", lambda a, b: a * b, np.multiply, BIN_SHAPES, dtypes=NUMERIC),
    Case("div", "div", lambda a, b: a / b, np.divide, BIN_SHAPES,
         inputs=(Input(), Input("positive", 0.5, 2.0))),
    Case("neg", "neg", lambda a: -a, np.negative, UN_SHAPES,
         dtypes=("f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8")),
    Case("exp", "exp", lambda a: a.exp(), np.exp, UN_SHAPES),
    Case("log", "log", lambda a: a.log(), np.log, UN_SHAPES, inputs=(Input("positive"),)),
    Case("cast_f32_to_i32", "cast", lambda a: a.cast(em.int32),
         lambda a: np.trunc(a).astype(np.int64), UN_SHAPES, dtypes=("f32", "f64"),
         inputs=(Input("uniform", -50, 50),), grad=False),
    Case("cast_to_f64", "cast", lambda a: a.cast(em.float64), lambda a: a, UN_SHAPES,
         dtypes=FLOATS),
    Case("equal", "equal", lambda a, b: a == b, np.equal, BIN_SHAPES, dtypes=ALL,
         inputs=(Input("int", 0, 2), Input("int", 0, 2)), grad=False),
    Case("sum_all", "sum", lambda a: a.sum(), np.sum, [((2, 3),), ((),), ((0, 3),)],
         dtypes=NUMERIC, tol={"f16": (1e-2, 1e-2), "bf16": (6e-2, 3e-2)}),
    Case("sum_dim1_keep", "sum", lambda a: a.sum(1, keepdim=True),
         lambda a: a.sum(1, keepdims=True), [((2, 3, 4),), ((2, 0, 3),)], dtypes=NUMERIC,
         tol={"f16": (1e-2, 1e-2), "bf16": (6e-2, 3e-2)}),
    Case("reshape", "reshape", lambda a: a.reshape(3, -1), lambda a: a.reshape(3, -1),
         [((2, 3, 2),), ((3, 0),)], dtypes=ALL),
    Case("expand", "expand", lambda a: a.expand(2, 4, 3), lambda a: np.broadcast_to(a, (2, 4, 3)),
         [((4, 1),), ((1, 3),)], dtypes=ALL),
    Case("full", "full", lambda a: em.full((2, 3), 1.5, device=a.device) + a,
         lambda a: 1.5 + a, UN_SHAPES[:1]),
    Case("random_bernoulli_shape", "random",
         lambda a: em.random(a.shape, em.Distribution.bernoulli(0.0), device=a.device) + a,
         lambda a: a, UN_SHAPES[:1]),
]
