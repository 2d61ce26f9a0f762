"""The op registry: every primitive op is declared once, here, with all of its rules.

A declaration (`Op`) carries:

* ``name``, ``category`` and ``nin`` (the number of tensor inputs; scalars may stand in for
  tensors of binary ops), the names of its static ``attrs``;
* ``infer(*inputs, **attrs) -> (shape, dtype)`` (a list of them for several outputs): the
  shape and dtype rule, which also validates the inputs. ``inputs`` are tensors (anything
  with ``shape`` and ``dtype``) or Python scalars;
* ``numpy(*arrays, **attrs)``: the reference implementation, used by the NdArray backend.
  It is written against an array namespace: a NumPy ufunc, or a function with a keyword-only
  ``xp`` (NumPy by default) that calls ``xp.*``, so the Cuda backend runs the same reference
  with ``xp=cupy`` (``ember/ops/_xp.py`` holds what CuPy lacks; see docs/cuda_backend.md);
* ``vjp(g, inputs, out, **attrs) -> tuple``: the derivative, written with ember Tensor ops on
  the autodiff's inner device, one gradient (or ``None``) per input. Gradients may keep a
  broadcast shape: the autodiff engine sums them back to each input's shape;
* ``expr``: for elementwise ops, the scalar expression in the kernel IR (used by fusion);
* ``promote``: for binary ops, how inputs are promoted before the op runs (``"same"``:
  the common dtype, ``"float"``: the common dtype, then at least the default float);
* ``nout``: the number of outputs; only the first output of a multi-output op is
  differentiable (indices are not). An op of ``nout > 1`` whose ``infer`` returns fewer
  (shape, dtype) pairs for some attrs (``layer_norm_backward`` without weight or bias)
  returns that many: what ``infer`` returns is what the op returns;
* ``vjp_needs``: the rule takes a ``needs`` keyword, one bool per input saying whether that
  input's gradient is wanted, so expensive ops (matmul, conv) skip the ones that are not;
* ``vjp_uses_out``, ``vjp_uses_inputs``: whether the rule reads ``out`` (``exp``'s does;
  ``add``'s, ``matmul``'s do not), ``inputs`` (``mul``'s does, ``add``'s does not).
  Autodiff keeps an op's output and input values for the backward pass only where its rule
  reads them, as PyTorch saves only what a derivative needs: a value nothing else holds is
  then dead, and Fusion need not write it to memory (a residual add's operands). Declared,
  or else read from the rule's code (`reads_param`: a rule that never loads that parameter
  does not use it; anything it cannot tell counts as using it);
* ``decompose(*inputs, **attrs)``: optional, the op written with other ember Tensor ops (the
  same results, bit for bit), returning its output(s). A backend may run that instead of the
  primitive: Fusion does for large tensors, so the elementwise ops of a fused primitive
  (``adam_update``) still fuse into one generated kernel (docs/fusion.md);
* ``decompose_key(**attrs)``: optional, for an op whose float attrs change from call to call
  (Adam's ``step``): a hashable value holding every attr that is not a float and every
  predicate of a float attr that steers ``decompose``'s Python code. Every float attr must
  then reach ``decompose``'s Tensor ops unchanged, as a scalar operand (never computed with
  in Python, never a divisor), so a backend may trace the decomposition once per key and
  pass the float attrs at run time (Fusion's replays of small primitives,
  ``ember/backend/fusion/replay.py``); without it, a trace is keyed by every attr's value.

Backends implement ops by name or fall back to ``numpy`` (with their own ``xp``); decorators
forward them; tests iterate over ``OPS``.
"""
from __future__ import annotations

import dis
from typing import Callable

OPS: dict[str, "Op"] = {}


class Op:
    __slots__ = ("name", "category", "nin", "attrs", "infer", "numpy", "vjp", "expr",
                 "promote", "nout", "doc", "vjp_needs", "decompose", "decompose_key",
                 "vjp_uses_out", "vjp_uses_inputs", "__weakref__")

    def __init__(self, name, category, nin, attrs, infer, numpy, vjp, expr, promote, nout, doc,
                 vjp_needs=False, decompose=None, decompose_key=None, vjp_uses_out=None,
                 vjp_uses_inputs=None):
        self.name = name
        self.category = category
        self.nin = nin
        self.attrs = attrs
        self.infer = infer
        self.numpy = numpy
        self.vjp = vjp
        self.expr = expr
        self.promote = promote
        self.nout = nout
        self.doc = doc
        self.vjp_needs = vjp_needs
        self.decompose = decompose
        self.decompose_key = decompose_key
        self.vjp_uses_out = reads_param(vjp, 2) if vjp_uses_out is None else \
            bool(vjp_uses_out)
        self.vjp_uses_inputs = reads_param(vjp, 1) if vjp_uses_inputs is None else \
            bool(vjp_uses_inputs)

    @property
    def differentiable(self) -> bool:
        return self.vjp is not None

    def __repr__(self):
        return f"<op {self.name} ({self.category})>"

    # Ops are singletons, looked up by name when unpickled or copied.
    def __reduce__(self):
        return (get, (self.name,))


CATEGORIES = {"unary", "binary", "reduce", "view", "index", "matmul", "conv", "pool",
              "creation", "cast", "random", "sort", "scan", "norm", "optim", "other"}


def declare(name: str, category: str, *, nin: int, infer: Callable, numpy: Callable,
            vjp: Callable | None = None, attrs: tuple = (), expr=None, promote: str | None = None,
            nout: int = 1, doc: str = "", vjp_needs: bool = False,
            decompose: Callable | None = None, decompose_key: Callable | None = None,
            vjp_uses_out: bool | None = None, vjp_uses_inputs: bool | None = None) -> Op:
    """Declare a primitive op. Each name is declared exactly once."""
    if name in OPS:
        raise RuntimeError(f"op {name!r} is declared twice")
    if category not in CATEGORIES:
        raise RuntimeError(f"op {name!r}: unknown category {category!r}")
    op = Op(name, category, nin, tuple(attrs), infer, numpy, vjp, expr, promote, nout, doc,
            vjp_needs, decompose, decompose_key, vjp_uses_out, vjp_uses_inputs)
    OPS[name] = op
    return op


#: the opcodes that read a local variable (3.11-3.13: LOAD_FAST_CHECK, LOAD_FAST_AND_CLEAR,
#: LOAD_FAST_LOAD_FAST among them)
_LOCAL_LOADS = ("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE")


def reads_param(vjp, index: int) -> bool:
    """Whether derivative rule ``vjp(g, inputs, out, ...)`` may read its parameter number
    ``index`` (1: ``inputs``, 2: ``out``): False only for a plain function whose code never
    loads it (nor hands it to a nested function, nor rebinds it); True for anything it cannot
    tell. No rule: False."""
    if vjp is None:
        return False
    code = getattr(vjp, "__code__", None)
    if code is None or code.co_argcount <= index:
        return True
    name = code.co_varnames[index]
    if name in code.co_cellvars:
        return True
    for ins in dis.get_instructions(code):
        if ins.opname.startswith(_LOCAL_LOADS) and (
                ins.argval == name or (type(ins.argval) is tuple and name in ins.argval)):
            return True
        if ins.opname in ("DELETE_FAST", "STORE_FAST") and ins.argval == name:
            return True
    return False


def get(name: str) -> Op:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"no op named {name!r} in the registry") from None
