"""Random op chains -- elementwise, view and reduction ops over random broadcastable shapes --
run fused and unfused; the results must agree. Some intermediates stay alive (multi-output
kernels), others die (never materialized); reads happen in random order."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember as em
from tests.fusion._util import UNFUSED, assert_close, fusion_device

UNARY = {
    "neg": lambda x: -x,
    "abs": lambda x: x.abs(),
    "exp_tanh": lambda x: x.tanh().exp(),
    "sigmoid": lambda x: x.sigmoid(),
    "relu": lambda x: x.relu(),
    "sqrt_abs": lambda x: x.abs().sqrt(),
    "log1p_abs": lambda x: (x.abs() + 1.0).log(),
    "sin": lambda x: x.sin(),
    "erf": lambda x: x.erf(),
    "scale": lambda x: x * 1.5 - 0.25,
    "clamp": lambda x: x.clamp(-0.5, 0.7),
    "square": lambda x: x * x,
    "rdiv": lambda x: 1.0 / (x.abs() + 1.0),
    "cast_f64_back": lambda x: x.double().cast(em.f32),
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b.abs() + 1.0),
    "maximum": lambda a, b: em.maximum(a, b),
    "where": lambda a, b: em.where(a > b, a, b * 0.5),
}
REDUCTIONS = ("sum", "mean", "max", "min", "prod", "var", "softmax", "log_softmax",
              "logsumexp")


def _broadcastable(a, b):
    for x, y in zip(reversed(a), reversed(b)):
        if x != y and x != 1 and y != 1:
            return False
    return True


@st.composite
def programs(draw):
    rank = draw(st.integers(1, 4))
    base = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    n_in = draw(st.integers(1, 3))
    shapes = []
    for _ in range(n_in):
        drop = draw(st.integers(0, rank - 1))
        s = tuple(1 if draw(st.booleans()) and draw(st.booleans()) else n for n in base[drop:])
        shapes.append(s)
    steps = []
    n = draw(st.integers(1, 9))
    shape_of = list(shapes)
    for _ in range(n):
        k = draw(st.sampled_from(["u", "u", "b", "b", "v", "v", "r"]))
        i = draw(st.integers(0, len(shape_of) - 1))
        s = shape_of[i]
        if k == "u":
            steps.append(("u", draw(st.sampled_from(sorted(UNARY))), i))
            shape_of.append(s)
        elif k == "b":
            j = draw(st.integers(0, len(shape_of) - 1))
            if not _broadcastable(s, shape_of[j]):
                continue
            steps.append(("b", draw(st.sampled_from(sorted(BINARY))), i, j))
            shape_of.append(tuple(np.broadcast_shapes(s, shape_of[j])))
        elif k == "v":
            v = draw(st.sampled_from(["permute", "reshape_flat", "reshape_split",
                                      "reshape_merge", "expand", "slice", "flip",
                                      "unsqueeze", "squeeze"]))
            r = len(s)
            if v == "permute" and r >= 2:
                perm = tuple(draw(st.permutations(range(r))))
                steps.append(("v", v, i, perm))
                shape_of.append(tuple(s[p] for p in perm))
            elif v == "reshape_flat":
                steps.append(("v", v, i, (int(np.prod(s)),)))
                shape_of.append((int(np.prod(s)),))
            elif v == "reshape_split" and r >= 1:
                d = draw(st.integers(0, r - 1))
                f = next((f for f in (2, 3, 5) if s[d] % f == 0 and s[d] > f), None)
                if f is None:
                    continue
                ns = s[:d] + (f, s[d] // f) + s[d + 1:]
                steps.append(("v", "reshape", i, ns))
                shape_of.append(ns)
            elif v == "reshape_merge" and r >= 2:
                d = draw(st.integers(0, r - 2))
                ns = s[:d] + (s[d] * s[d + 1],) + s[d + 2:]
                steps.append(("v", "reshape", i, ns))
                shape_of.append(ns)
            elif v == "expand" and 1 in s:
                ns = tuple(draw(st.integers(2, 3)) if n == 1 else n for n in s)
                steps.append(("v", v, i, ns))
                shape_of.append(ns)
            elif v in ("slice", "flip") and r >= 1:
                d = draw(st.integers(0, r - 1))
                if v == "flip":
                    sl = slice(None, None, -1)
                else:
                    step = draw(st.sampled_from([1, 2, -1, -2, 3]))
                    start = draw(st.integers(0, s[d] - 1))
                    sl = slice(start, None, step)
                ln = len(range(s[d])[sl])
                if ln == 0:
                    continue
                steps.append(("v", "slice", i, (d, sl)))
                shape_of.append(s[:d] + (ln,) + s[d + 1:])
            elif v == "unsqueeze":
                d = draw(st.integers(0, r))
                steps.append(("v", v, i, d))
                shape_of.append(s[:d] + (1,) + s[d:])
            elif v == "squeeze" and 1 in s:
                d = s.index(1)
                steps.append(("v", v, i, d))
                shape_of.append(s[:d] + s[d + 1:])
        else:
            if not s:
                continue
            red = draw(st.sampled_from(REDUCTIONS))
            r = len(s)
            if red in ("softmax", "log_softmax"):
                d = draw(st.integers(0, r - 1))
                steps.append(("r", red, i, d, None))
                shape_of.append(s)
                continue
            dims = tuple(sorted(set(draw(st.lists(st.integers(0, r - 1), min_size=1,
                                                  max_size=r)))))
            keep = draw(st.booleans())
            if red == "var" and all(s[d] == 1 for d in dims):
                continue
            steps.append(("r", red, i, dims, keep))
            shape_of.append(tuple(1 if d in dims else n for d, n in enumerate(s)) if keep
                            else tuple(n for d, n in enumerate(s) if d not in dims))
    keep_alive = draw(st.lists(st.booleans(), min_size=len(shape_of), max_size=len(shape_of)))
    order = draw(st.permutations(range(len(shape_of))))
    seed = draw(st.integers(0, 2 ** 16))
    return shapes, steps, keep_alive, order, seed


def _run(program, device):
    shapes, steps, keep_alive, order, seed = program
    rng = np.random.default_rng(seed)
    vals = [em.tensor(rng.normal(size=s).astype(np.float32), device=device) for s in shapes]
    for stp in steps:
        k, name, i = stp[0], stp[1], stp[2]
        x = vals[i]
        if k == "u":
            y = UNARY[name](x)
        elif k == "b":
            y = BINARY[name](x, vals[stp[3]])
        elif k == "v":
            a = stp[3]
            if name == "permute":
                y = x.permute(*a)
            elif name in ("reshape_flat", "reshape"):
                y = x.reshape(*a)
            elif name == "expand":
                y = x.expand(*a)
            elif name == "slice":
                d, sl = a
                y = x[(slice(None),) * d + (sl,)]
            elif name == "unsqueeze":
                y = x.unsqueeze(a)
            else:
                y = x.squeeze(a)
        else:
            dims, keep = stp[3], stp[4]
            if name == "softmax":
                y = em.softmax(x, dims)
            elif name == "log_softmax":
                y = em.log_softmax(x, dims)
            elif name == "var":
                y = x.var(dims, correction=0, keepdim=keep)
            elif name == "logsumexp":
                y = x.logsumexp(dims, keepdim=keep)
            else:
                y = getattr(x, name)(dims, keepdim=keep)
        vals.append(y)
    # intermediates not kept alive die now; reads happen in a random order
    for j, alive in enumerate(keep_alive):
        if not alive and j != len(vals) - 1:
            vals[j] = None
    out = {}
    for j in order:
        if vals[j] is not None:
            out[j] = vals[j].numpy()
    return out


def _check(program, runtime):
    dev = fusion_device(runtime)
    got = _run(program, dev)
    want = _run(program, UNFUSED)
    assert got.keys() == want.keys()
    for j in want:
        assert_close(got[j], want[j], rtol=1e-4, atol=2e-5, what=f"value {j} of {program}")


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_chains_interpreted(program):
    _check(program, "interpret")


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_chains_generated_c(program):
    _check(program, "c")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_chains_generated_cuda(program):
    _check(program, "cuda")


def test_chain_with_many_live_values_and_a_stream_bound():
    dev = fusion_device("interpret")
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 4)).astype(np.float32)
    f, u = em.tensor(a, device=dev), em.tensor(a, device=UNFUSED)
    fs, us = [], []
    for i in range(300):                  # more than the stream's bound of pending ops
        f = (f * 0.9 + i * 0.001).tanh()
        u = (u * 0.9 + i * 0.001).tanh()
        if i % 7 == 0:
            fs.append(f)
            us.append(u)
    for x, y in zip(fs, us):
        assert_close(x.numpy(), y.numpy(), rtol=1e-5)
    assert_close(f.numpy(), u.numpy(), rtol=1e-5)


@pytest.mark.parametrize("n", [1, 2])
def test_sync_flushes(n):
    dev = fusion_device("interpret")
    x = em.tensor(np.ones((2, 2), np.float32), device=dev)
    y = x * float(n) + 1.0
    dev.sync()
    assert y._prim.node.value is not None
    assert (y.numpy() == n + 1).all()
