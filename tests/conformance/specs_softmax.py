"""Conformance cases of the softmax primitives (ember/ops/nn.py): ``softmax`` and
``log_softmax`` along a dim, and their backward primitives ``softmax_backward(g, out)`` and
``log_softmax_backward(g, out)``, run directly and through the Tensor API, against float64
references written here. Special values: rows of -inf, rows holding +inf or NaN (NaN
throughout, as the composite these replaced gave), -inf among finite values (probability 0,
log-probability -inf). Gradient checks (finite differences of the references) cover the
forward primitives and, through the backward primitives' own derivatives, gradients of
gradients."""
from __future__ import annotations

import numpy as np

import ember as em
from tests.conformance.harness import Case, Input
from tests.conformance.specs_activation import log_softmax as _log_softmax
from tests.conformance.specs_activation import softmax as _softmax
from tests.conformance.specs_nn import P

inf, nan = np.inf, np.nan


def softmax(x, axis):
    with np.errstate(invalid="ignore"):       # inf - inf of the special rows: NaN, quietly
        return _softmax(x, axis)


def log_softmax(x, axis):
    with np.errstate(invalid="ignore", divide="ignore"):
        return _log_softmax(x, axis)


def _sm(dim):
    return lambda a: P("softmax", a, dim=dim)


def _lsm(dim):
    return lambda a: P("log_softmax", a, dim=dim)


def _ref_sm_bwd(g, out, axis):
    return out * (g - (g * out).sum(axis=axis, keepdims=True))


def _ref_lsm_bwd(g, out, axis):
    return g - np.exp(out) * g.sum(axis=axis, keepdims=True)


def _special(rng, shape):
    """Rows (along the last dim, of at least 4) of: finite values; all -inf; one +inf; one
    NaN; -inf among finite values; +inf and -inf; large finite values (as many of these as
    there are rows)."""
    a = rng.normal(size=shape)
    rows = a.reshape(-1, shape[-1])
    n = len(rows)
    if n > 1:
        rows[1] = -inf
    if n > 2:
        rows[2, 1] = inf
    if n > 3:
        rows[3, 2] = nan
    if n > 4:
        rows[4, ::2] = -inf
    if n > 5:
        rows[5, 0], rows[5, 3] = inf, -inf
    if n > 6:
        rows[6] *= 300.0
    return a


def _special_cols(rng, shape):
    """`_special` along dim 0 (the rows above as columns)."""
    return _special(rng, tuple(reversed(shape))).T.copy()


SPECIAL = Input(_special)
SPECIAL_COLS = Input(_special_cols)
PROBS = Input("uniform", 0.0, 1.0)      # stands for a softmax output
LOGP = Input("uniform", -4.0, 0.0)      # stands for a log_softmax output

SHAPES_3D = [((2, 3, 4),), ((1, 5, 2),)]

CASES = [
    # -- the forward primitives, each dim of a 3-d input, and edge shapes --
    Case("softmax_prim_dim0", "softmax", _sm(0), lambda a: softmax(a, 0),
         SHAPES_3D + [((0, 3),), ((3, 0),)]),
    Case("softmax_prim_dim1", "softmax", _sm(1), lambda a: softmax(a, 1),
         SHAPES_3D + [((1, 1),), ((4, 1),)]),
    Case("softmax_prim_dim2", "softmax", _sm(2), lambda a: softmax(a, 2), SHAPES_3D),
    Case("softmax_prim_1d", "softmax", _sm(0), lambda a: softmax(a, 0), [((7,),), ((1,),)]),
    Case("log_softmax_prim_dim0", "log_softmax", _lsm(0), lambda a: log_softmax(a, 0),
         SHAPES_3D + [((0, 3),), ((3, 0),)]),
    Case("log_softmax_prim_dim1", "log_softmax", _lsm(1), lambda a: log_softmax(a, 1),
         SHAPES_3D + [((1, 1),), ((4, 1),)]),
    Case("log_softmax_prim_dim2", "log_softmax", _lsm(2), lambda a: log_softmax(a, 2),
         SHAPES_3D),
    Case("log_softmax_prim_1d", "log_softmax", _lsm(0), lambda a: log_softmax(a, 0),
         [((7,),), ((1,),)]),
    # -- through the Tensor API: negative dims, 0-d and empty inputs --
    Case("softmax_api_dims", "softmax", lambda a: a.softmax(-2),
         lambda a: softmax(a, -2), [((3, 4, 2),), ((2, 5),)]),
    Case("log_softmax_api_dims", "log_softmax", lambda a: em.log_softmax(a, -3),
         lambda a: log_softmax(a, -3), [((3, 4, 2),), ((2, 1, 3),)]),
    Case("log_softmax_api_edge", "log_softmax", lambda a: a.log_softmax(-1),
         lambda a: log_softmax(a, -1), [((),), ((0, 4),), ((4, 0),), ((1, 6),)]),
    Case("softmin_api_dim0", "softmax", lambda a: em.softmin(a, 0),
         lambda a: softmax(-a, 0), [((4, 3),), ((1, 2),)]),
    # -- large magnitudes and special values --
    Case("log_softmax_prim_large", "log_softmax", _lsm(0), lambda a: log_softmax(a, 0),
         [((5, 3),)], inputs=(Input("uniform", -1000, 1000),), grad=False),
    Case("softmax_special", "softmax", lambda a: a.softmax(-1), lambda a: softmax(a, -1),
         [((7, 5),), ((2, 7, 4),)], inputs=(SPECIAL,), grad=False, layouts=False),
    Case("log_softmax_special", "log_softmax", lambda a: a.log_softmax(-1),
         lambda a: log_softmax(a, -1), [((7, 5),), ((2, 7, 4),)], inputs=(SPECIAL,),
         grad=False, layouts=False),
    Case("softmax_special_dim0", "softmax", _sm(0), lambda a: softmax(a, 0), [((5, 7),)],
         inputs=(SPECIAL_COLS,), grad=False, layouts=False),
    Case("log_softmax_special_dim0", "log_softmax", _lsm(0), lambda a: log_softmax(a, 0),
         [((5, 7),)], inputs=(SPECIAL_COLS,), grad=False, layouts=False),
    # -- the backward primitives (and, by their gradient checks, their own derivatives) --
    Case("softmax_backward_dim1", "softmax_backward",
         lambda g, o: P("softmax_backward", g, o, dim=1), lambda g, o: _ref_sm_bwd(g, o, 1),
         [((3, 4), (3, 4)), ((2, 5, 3), (2, 5, 3)), ((0, 4), (0, 4)), ((4, 0), (4, 0))],
         inputs=(Input(), PROBS)),
    Case("softmax_backward_dim0", "softmax_backward",
         lambda g, o: P("softmax_backward", g, o, dim=0), lambda g, o: _ref_sm_bwd(g, o, 0),
         [((4, 3), (4, 3)), ((1, 2), (1, 2))], inputs=(Input(), PROBS)),
    Case("log_softmax_backward_dim1", "log_softmax_backward",
         lambda g, o: P("log_softmax_backward", g, o, dim=1),
         lambda g, o: _ref_lsm_bwd(g, o, 1),
         [((3, 4), (3, 4)), ((2, 5, 3), (2, 5, 3)), ((0, 4), (0, 4)), ((4, 0), (4, 0))],
         inputs=(Input(), LOGP)),
    Case("log_softmax_backward_dim2", "log_softmax_backward",
         lambda g, o: P("log_softmax_backward", g, o, dim=2),
         lambda g, o: _ref_lsm_bwd(g, o, 2), [((2, 3, 4), (2, 3, 4)), ((1, 1, 5), (1, 1, 5))],
         inputs=(Input(), LOGP)),
    Case("log_softmax_backward_neg_inf", "log_softmax_backward",
         lambda g, o: P("log_softmax_backward", g, o, dim=1),
         lambda g, o: _ref_lsm_bwd(g, o, 1), [((3, 4), (3, 4))],
         inputs=(Input(), Input(lambda rng, s: np.where(rng.random(s) < 0.3, -inf,
                                                         rng.uniform(-4, 0, s)))),
         grad=False, layouts=False),
]
