"""Cases for activations: the primitives (sigmoid, relu, gelu) and every composite, against NumPy
float64 formulas (``math.erf`` for the exact GELU), including inputs large enough to overflow
a naive ``exp`` (the results and the gradients must stay finite)."""
import math

import numpy as np

import ember as em
from tests.conformance.harness import NUMERIC, Case, Input
from tests.conformance.specs_nn import P

UN = [((2, 3),), ((),), ((0, 3),), ((1, 5),)]
BIG = Input("uniform", -60.0, 60.0)  # exp(60) overflows f16/bf16 and f32's exp(100)
HUGE = Input("uniform", -200.0, 200.0)

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x):
    return np.asarray(_erf(np.asarray(x, dtype=np.float64)), dtype=np.float64)


def gelu_slope(x):
    """d/dx of x * Phi(x): Phi(x) + x * phi(x)."""
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def sigmoid(x):
    # 1 / (1 + exp(-x)) without overflow: written per sign
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def softplus(x, beta=1.0, threshold=20.0):
    x = np.asarray(x, dtype=np.float64)
    bx = beta * x
    sp = np.logaddexp(0.0, bx) / beta
    return np.where(bx > threshold, x, sp)


def relu(x):
    return np.where(x > 0, x, 0 * x)


def elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * (np.exp(np.minimum(x, 0)) - 1))


SELU_A, SELU_S = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def softmax(x, axis):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0:
        return np.ones(())
    if x.size == 0:
        return x.copy()
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x, axis):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0:
        return np.zeros(())
    if x.size == 0:
        return x.copy()
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def prelu(x, w):
    if x.ndim >= 2 and w.size > 1:
        w = w.reshape((-1,) + (1,) * (x.ndim - 2))
    elif w.size == 1:
        w = w.reshape(())
    return np.where(x > 0, x, w * x)


def glu(x, axis):
    a, b = np.split(x, 2, axis=axis)
    return a * sigmoid(b)



CASES = [
    # -- primitives --
    Case("sigmoid", "sigmoid", lambda a: a.sigmoid(), sigmoid, UN),
    Case("sigmoid_large", "sigmoid", lambda a: em.sigmoid(a), sigmoid, [((4, 6),)],
         inputs=(HUGE,)),
    Case("relu", "relu", lambda a: a.relu(), relu, UN, dtypes=NUMERIC),
    Case("relu_fn", "relu", lambda a: em.relu(a), relu, [((3, 4),)]),
    # relu's backward primitive (and, by its gradient check, its own derivative)
    Case("relu_backward", "relu_backward", lambda g, x: P("relu_backward", g, x),
         lambda g, x: np.asarray(g, np.float64) * (np.asarray(x) > 0),
         [((3, 4), (3, 4)), ((2, 3, 5), (2, 3, 5)), ((), ()), ((0, 3), (0, 3))]),
    # -- piecewise linear --
    Case("leaky_relu", ("where", "mul"), lambda a: em.leaky_relu(a),
         lambda a: np.where(a > 0, a, 0.01 * a), UN),
    Case("leaky_relu_slope", ("where", "mul"), lambda a: a.leaky_relu(0.2),
         lambda a: np.where(a > 0, a, 0.2 * a), UN[:1]),
    Case("prelu", ("where", "mul"), lambda x, w: em.prelu(x, w), prelu,
         [((2, 3, 4), (3,)), ((2, 3), (1,)), ((5,), (1,)), ((0, 3), (3,))],
         inputs=(Input(), Input("uniform", 0.0, 0.5))),
    Case("hard_sigmoid", "clamp", lambda a: em.hard_sigmoid(a),
         lambda a: np.clip(0.2 * a + 0.5, 0, 1), UN, inputs=(Input("uniform", -4, 4),)),
    Case("hard_sigmoid_params", "clamp", lambda a: a.hard_sigmoid(alpha=0.5, beta=0.25),
         lambda a: np.clip(0.5 * a + 0.25, 0, 1), UN[:1], inputs=(Input("uniform", -4, 4),)),
    # -- smooth --
    Case("gelu", ("gelu", "gelu_backward"), lambda a: em.gelu(a),
         lambda a: 0.5 * a * (1 + erf(a / math.sqrt(2))), UN),
    Case("gelu_backward", "gelu_backward", lambda g, x: P("gelu_backward", g, x),
         lambda g, x: np.asarray(g, np.float64) * gelu_slope(x),
         [((3, 4), (3, 4)), ((2, 3, 5), (2, 3, 5)), ((), ()), ((0, 3), (0, 3))],
         inputs=(Input(), Input("uniform", -6.0, 6.0))),
    Case("gelu_tanh", "tanh", lambda a: a.gelu(approximate="tanh"),
         lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3))),
         UN),
    Case("gelu_large", ("gelu", "gelu_backward"), lambda a: a.gelu(),
         lambda a: 0.5 * a * (1 + erf(a / math.sqrt(2))), [((4, 6),)], inputs=(HUGE,)),
    Case("gelu_tanh_large", "tanh", lambda a: em.gelu(a, approximate="tanh"),
         lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3))),
         [((4, 6),)], inputs=(HUGE,)),
    Case("silu", "sigmoid", lambda a: em.silu(a), lambda a: a * sigmoid(a), UN),
    Case("silu_large", "sigmoid", lambda a: a.silu(), lambda a: a * sigmoid(a), [((4, 6),)],
         inputs=(BIG,)),
    Case("log_sigmoid", ("log1p", "exp", "abs"), lambda a: em.log_sigmoid(a),
         lambda a: -softplus(-a), UN),
    Case("log_sigmoid_large", "log1p", lambda a: a.log_sigmoid(), lambda a: -softplus(-a),
         [((4, 6),)], inputs=(HUGE,)),
    Case("softplus", ("relu", "log1p"), lambda a: em.softplus(a), softplus, UN),
    Case("softplus_beta", ("relu", "log1p"), lambda a: a.softplus(beta=2.0, threshold=3.0),
         lambda a: softplus(a, 2.0, 3.0), [((3, 5),)], inputs=(Input("uniform", -3, 3),)),
    Case("softplus_large", ("relu", "log1p"), lambda a: a.softplus(), softplus, [((4, 6),)],
         inputs=(BIG,)),
    Case("mish", "tanh", lambda a: em.mish(a), lambda a: a * np.tanh(softplus(a)), UN),
    Case("mish_large", "tanh", lambda a: a.mish(), lambda a: a * np.tanh(softplus(a)),
         [((4, 6),)], inputs=(BIG,)),
    Case("elu", "expm1", lambda a: em.elu(a), elu, UN),
    Case("elu_alpha_large", "expm1", lambda a: a.elu(0.5), lambda a: elu(a, 0.5),
         [((4, 6),)], inputs=(HUGE,)),
    Case("selu", "expm1", lambda a: em.selu(a), lambda a: SELU_S * elu(a, SELU_A), UN),
    Case("celu", "expm1", lambda a: em.celu(a, 0.7),
         lambda a: np.where(a > 0, a, 0.7 * (np.exp(np.minimum(a, 0) / 0.7) - 1)), UN),
    # -- along a dim --
    Case("softmax", ("max", "exp", "sum", "div"), lambda a: em.softmax(a, 1),
         lambda a: softmax(a, 1), [((2, 3, 4),), ((0, 3),), ((3, 0),), ((1, 1),)]),
    Case("softmax_last", "exp", lambda a: a.softmax(-1), lambda a: softmax(a, -1),
         [((3, 5),), ((),), ((2, 1, 4),)]),
    Case("softmax_large", "exp", lambda a: a.softmax(-1), lambda a: softmax(a, -1),
         [((3, 5),)], inputs=(Input("uniform", -1000, 1000),)),
    Case("log_softmax", ("log", "exp", "sum"), lambda a: em.log_softmax(a, 0),
         lambda a: log_softmax(a, 0), [((4, 3),), ((0, 3),), ((),), ((1, 2),)]),
    Case("log_softmax_large", "log", lambda a: a.log_softmax(-1), lambda a: log_softmax(a, -1),
         [((3, 5),)], inputs=(Input("uniform", -1000, 1000),)),
    Case("softmin", "neg", lambda a: em.softmin(a, -1), lambda a: softmax(-a, -1),
         [((2, 5),), ((0, 4),)]),
    Case("glu", ("narrow", "sigmoid"), lambda a: em.glu(a), lambda a: glu(a, -1),
         [((3, 4),), ((2, 0),), ((2,),)]),
    Case("glu_dim0", "sigmoid", lambda a: a.glu(0), lambda a: glu(a, 0), [((4, 3),)]),
]
