"""The optimizer protocol: ``module = opt.step(lr, module, grads)`` returns the updated module
(Burn's functional style), with per-parameter state (moments) keyed by the parameter's stable
id, and state that saves and loads so a resumed run continues exactly.

A concrete optimizer defines:

- ``_defaults``: {hyperparameter: default};
- ``_fields``: the names of its per-parameter state tensors (a record is the tuple
  ``(step, device, *fields)``; a field may be None, e.g. no momentum buffer without momentum);
- ``_check(hp) -> hp``: validate and normalize one set of hyperparameters (ConfigError);
- ``_prepare(lr, hp) -> consts``: per step and group, everything that does not depend on the
  parameter (done once, not once per parameter);
- ``_update(w, g, record, consts) -> (w, record)``: one parameter's step on the inner
  (untracked) device; ``record`` is None on the parameter's first step.

And may define, to update many parameters in one op where the device's backend runs such an
op (``Adam``: ``adam_update_many`` on Cuda):

- ``_defer(w, g, record, consts)``: None where this parameter's step runs at its visit, else
  what the deferred step needs (worked out once, handed back below);
- ``_update_deferred([(w, g, record, consts, plan)]) -> [(w, record)]``: the deferred steps,
  after the visit. (The visit put a new Param in the new module for each deferred one; it is
  filled with the result before `step` returns, so nothing sees it unfilled.)
"""
from __future__ import annotations

import math

import ember as em
from ember.errors import ConfigError, RecordError
from ember.heap import after_optimizer_step
from ember.module.gradients_params import GradientsParams
from ember.module.param import Param

from . import _io
from .groups import ParamGroup

__all__ = ["Optimizer"]

_FORMAT = "ember.optim"
_VERSION = 1


def _plain_param(cls) -> bool:
    """Whether Params of ``cls`` are built by Param's own constructor (a deferred step fills
    such a Param's fields later; a subclass's constructor may do more)."""
    return cls.__new__ is Param.__new__ and cls.__init__ is Param.__init__


class Optimizer:
    """Base class of ember's optimizers (see the module docstring for the protocol)."""

    _defaults: dict = {}
    _fields: tuple = ()
    _config_cls = None  # the @em.config class that builds this optimizer (set per subclass)

    def __init__(self, lr: float | None = None, *, groups=(), grad_clipping=None, **hp):
        unknown = sorted(set(hp) - set(self._defaults))
        if unknown:
            raise ConfigError(f"{type(self).__name__}: unknown hyperparameter(s) {unknown}; "
                              f"valid: lr, groups, grad_clipping, {', '.join(self._defaults)}")
        self.lr = None if lr is None else _check_lr(type(self).__name__, lr)
        base = self._check({**self._defaults, **hp})
        self.hyperparameters = base
        if isinstance(groups, ParamGroup):
            groups = (groups,)
        self.groups = tuple(groups)
        self._group_hp = [base]
        self._group_mult = [1.0]
        for grp in self.groups:
            if not isinstance(grp, ParamGroup):
                raise ConfigError(f"{type(self).__name__}: groups must be ParamGroup objects, "
                                  f"got {type(grp).__name__}")
            bad = sorted(set(grp.overrides) - set(self._defaults))
            if bad:
                raise ConfigError(f"{type(self).__name__}: {grp!r} overrides unknown "
                                  f"hyperparameter(s) {bad}; valid: lr_mult, "
                                  f"{', '.join(self._defaults)}")
            self._group_hp.append(self._check({**base, **grp.overrides}))
            self._group_mult.append(grp.lr_mult)
        if grad_clipping is not None and not callable(grad_clipping):
            raise ConfigError(f"{type(self).__name__}: grad_clipping must be a ClipByNorm, "
                              f"ClipByValue or a callable on GradientsParams, got "
                              f"{type(grad_clipping).__name__}")
        self.grad_clipping = grad_clipping
        self._state: dict = {}      # param id -> (step, device, *fields)
        self._group_of: dict = {}   # param id -> group index (0: the optimizer's own settings)
        self._unverified: set = set()  # loaded records whose shapes are checked at first use
        self._groups_checked = not self.groups

    # -- the protocol ------------------------------------------------------------------------
    def _check(self, hp: dict) -> dict:
        return hp

    def _prepare(self, lr: float, hp: dict):
        raise NotImplementedError

    def _update(self, w, g, rec, c):
        raise NotImplementedError

    #: ``_defer(w, g, rec, c) -> plan or None`` (None here: every step runs at its visit)
    _defer = None

    def _update_deferred(self, items):
        raise NotImplementedError

    # -- stepping ------------------------------------------------------------------------------
    def step(self, lr, module, grads):
        """One optimization step: a NEW module whose parameters that require grad and have a
        gradient in ``grads`` (a GradientsParams) are updated; the others are unchanged.
        ``lr``: the learning rate of this step (None: the optimizer's ``lr``)."""
        name = type(self).__name__
        if lr is None:
            if self.lr is None:
                raise ConfigError(f"{name}.step: no learning rate: pass one to step(lr, ...) "
                                  f"or give the optimizer lr=...")
            lr = self.lr
        elif type(lr) is not float or not 0.0 <= lr < math.inf:
            lr = _check_lr(f"{name}.step", lr)
        if isinstance(grads, em.Gradients):
            raise TypeError(f"{name}.step: got the Gradients of backward(); pass "
                            f"em.GradientsParams.from_grads(grads, module) (gradients keyed "
                            f"by param id)")
        if self.grad_clipping is not None:
            grads = self.grad_clipping(grads)
        nconst = len(self._group_hp)
        consts = [None] * nconst
        mults, hps = self._group_mult, self._group_hp
        state, group_of, new = self._state, self._group_of, {}
        seen = None if self._groups_checked else [False] * nconst
        update, resolve = self._update, self._resolve
        unverified = self._unverified
        get_grad = grads.get
        # a GradientsParams is read by param id directly (what its `get` does)
        by_id = grads._grads.get if type(grads) is GradientsParams else None
        defer = self._defer
        deferred = []       # (shell, pid, param, inner, dev, (w, g, rec, c, plan))

        def visit(path, param):
            pid = param.id
            if seen is not None:  # first step: every group must select some param
                seen[resolve(path, pid)] = True
            if not param.require_grad_flag:
                return param
            gi = group_of.get(pid)
            if gi is None:
                gi = group_of[pid] = resolve(path, pid)
            g = get_grad(param) if by_id is None else by_id(pid)
            if g is None:
                return param
            c = consts[gi]
            if c is None:
                c = consts[gi] = self._prepare(lr * mults[gi], hps[gi])
            dev = param.device
            inner = dev.without_autodiff()
            w = param.tensor if inner is dev else param.tensor.to_device(inner)
            if g.device is not inner:
                g = g.to_device(inner)
            rec = state.get(pid)
            if rec is not None and (rec[1] is not inner or pid in unverified):
                rec = self._adopt(pid, rec, w, inner)
            plan = None if defer is None or not _plain_param(type(param)) else \
                defer(w, g, rec, c)
            if plan is not None:
                # the new module holds a Param that is filled in once the deferred steps ran
                # (below): one pass over the module either way
                shell = object.__new__(type(param))
                shell._param_id, shell._require_grad_flag = pid, param.require_grad_flag
                shell._prim, shell._device, shell._shape, shell._dtype = \
                    param._prim, param._device, param._shape, param._dtype
                deferred.append((shell, pid, param, inner, dev, (w, g, rec, c, plan)))
                return shell
            w2, rec = update(w, g, rec, c)
            return finish(pid, param, inner, dev, w, w2, rec)

        def finish(pid, param, inner, dev, w, w2, rec):
            if w2.dtype is not w.dtype:
                w2 = w2.cast(w.dtype)
            if rec is not None:
                new[pid] = rec
            return param.with_tensor(w2 if inner is dev else w2.to_device(dev))

        out = module.map(visit)
        if deferred:
            results = self._update_deferred([d[5] for d in deferred])
            for (shell, pid, param, inner, dev, item), (w2, rec) in zip(deferred, results):
                done = finish(pid, param, inner, dev, item[0], w2, rec)
                shell._prim, shell._device, shell._shape, shell._dtype = \
                    done._prim, done._device, done._shape, done._dtype
        if seen is not None:
            self._check_groups_used(seen, module)
        state.update(new)
        self._unverified.difference_update(new)
        after_optimizer_step()      # (the first step of the process freezes the setup's heap)
        return out

    def _resolve(self, path, pid) -> int:
        for i, grp in enumerate(self.groups):
            if grp.matches(path, pid):
                return i + 1
        return 0

    def _check_groups_used(self, seen, module):
        unused = [self.groups[i - 1] for i in range(1, len(seen)) if not seen[i]]
        if unused:
            paths = [p for p, _ in module.named_parameters()]
            shown = ", ".join(paths[:8]) + (", ..." if len(paths) > 8 else "")
            raise ConfigError(f"{type(self).__name__}: parameter group(s) "
                              f"{', '.join(repr(g) for g in unused)} select no parameter of "
                              f"the module (its paths: {shown})")
        self._groups_checked = True

    def _adopt(self, pid, rec, w, inner):
        """A record on another device (the model moved) or freshly loaded: move it next to
        its parameter, and check its shapes once."""
        if pid in self._unverified:
            for name, t in zip(self._fields, rec[2:]):
                if t is not None and tuple(t.shape) != tuple(w.shape):
                    raise RecordError(f"{type(self).__name__}: loaded state {name!r} of param "
                                      f"{pid!r} has shape {tuple(t.shape)}, but the parameter "
                                      f"has shape {tuple(w.shape)}")
        if rec[1] is not inner:
            rec = (rec[0], inner) + tuple(None if t is None else t.to_device(inner)
                                          for t in rec[2:])
        return rec

    # -- state -----------------------------------------------------------------------------
    def __len__(self):
        """The number of parameters with state."""
        return len(self._state)

    def state_of(self, param) -> dict | None:
        """The state of one parameter (a Param or its id): {"step": n, field: Tensor}."""
        pid = param if isinstance(param, str) else param.id
        rec = self._state.get(pid)
        return None if rec is None else self._rec_to_dict(rec)

    def _rec_to_dict(self, rec):
        d = {"step": rec[0]}
        for name, t in zip(self._fields, rec[2:]):
            if t is not None:
                d[name] = t
        return d

    def _meta(self) -> dict:
        return {"format": _FORMAT, "version": _VERSION, "optimizer": type(self).__name__,
                "lr": self.lr, "hyperparameters": _jsonable(self.hyperparameters),
                "groups": [g.name for g in self.groups]}

    def state_dict(self) -> dict:
        """{"optimizer": name, "hyperparameters": ..., "state": {param id: {"step": n,
        field: Tensor}}} (tensors are immutable: nothing is copied)."""
        d = self._meta()
        d["state"] = {pid: self._rec_to_dict(rec) for pid, rec in self._state.items()}
        return d

    def load_state_dict(self, state_dict: dict) -> "Optimizer":
        """Replace this optimizer's per-parameter state (the hyperparameters stay the ones it
        was built with). Returns self."""
        name = type(self).__name__
        if not isinstance(state_dict, dict) or "state" not in state_dict:
            raise RecordError(f"{name}.load_state_dict: expected a dict from state_dict() with "
                              f"a 'state' key, got {type(state_dict).__name__}")
        other = state_dict.get("optimizer")
        if other is not None and other != name:
            raise RecordError(f"{name}.load_state_dict: the state is of a {other} optimizer")
        fields = set(self._fields)
        new = {}
        for pid, entry in state_dict["state"].items():
            bad = sorted(set(entry) - fields - {"step"})
            if bad:
                raise RecordError(f"{name}.load_state_dict: param {pid!r} has unknown state "
                                  f"{bad}; valid: step, {', '.join(self._fields)}")
            tensors = tuple(entry.get(f) for f in self._fields)
            dev = next((t.device for t in tensors if t is not None), None)
            new[pid] = (int(entry.get("step", 0)), dev) + tensors
        self._state = new
        self._unverified = set(new)
        return self

    def save(self, path, format: str = "safetensors") -> None:
        """Write the state to one record file (ember.record; safetensors, or msgpack):
        tensors named "<param id>.<field>", the steps and hyperparameters as JSON metadata;
        atomically."""
        tensors, steps = {}, {}
        for pid, rec in self._state.items():
            steps[pid] = rec[0]
            for name, t in zip(self._fields, rec[2:]):
                if t is not None:
                    tensors[f"{pid}.{name}"] = t
        meta = self._meta()
        meta["steps"] = steps
        _io.save_file(path, tensors, meta, format)

    def load(self, path, device=None) -> "Optimizer":
        """Load state written by ``save`` (tensors go to ``device``, or next to each
        parameter at its next step). Returns self."""
        tensors, meta = _io.load_file(path, device=device)
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            raise RecordError(f"{type(self).__name__}.load: {path!r} holds no optimizer state")
        state = {pid: {"step": n} for pid, n in meta.get("steps", {}).items()}
        for key, t in tensors.items():
            pid, _, field = key.rpartition(".")
            if pid not in state:
                raise RecordError(f"{type(self).__name__}.load: {path!r}: tensor {key!r} "
                                  f"belongs to no parameter listed in the file")
            state[pid][field] = t
        return self.load_state_dict({"optimizer": meta.get("optimizer"), "state": state})

    def to_device(self, device) -> "Optimizer":
        """Move all state tensors to ``device`` (the inner device of the parameters).
        Returns self."""
        device = em.device(device) if isinstance(device, str) else device
        device = device.without_autodiff()
        self._state = {pid: (rec[0], device) + tuple(
            None if t is None else t.to_device(device) for t in rec[2:])
            for pid, rec in self._state.items()}
        return self

    def reset(self) -> None:
        """Forget all per-parameter state (the next step is every parameter's first)."""
        self._state.clear()
        self._unverified.clear()

    def config(self):
        """This optimizer's settings as its @em.config class."""
        cls = self._config_cls
        if cls is None:
            raise ConfigError(f"{type(self).__name__} has no config class")
        hp = dict(self.hyperparameters)
        clip = self.grad_clipping
        from .clipping import ClipByNorm, ClipByValue
        if isinstance(clip, ClipByNorm) and clip.norm_type == 2.0 and not clip.per_param:
            hp["grad_clip_norm"] = clip.max_norm
        elif isinstance(clip, ClipByValue):
            hp["grad_clip_value"] = clip.value
        elif clip is not None:
            raise ConfigError(f"{type(self).__name__}.config: its grad_clipping {clip!r} has "
                              f"no config form")
        names = {f for f in cls.__dataclass_fields__}
        return cls(lr=self.lr, **{k: v for k, v in hp.items() if k in names})

    def __repr__(self):
        hp = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters.items())
        g = f", groups={list(self.groups)!r}" if self.groups else ""
        c = f", grad_clipping={self.grad_clipping!r}" if self.grad_clipping else ""
        return f"{type(self).__name__}(lr={self.lr!r}, {hp}{g}{c})"


# -- helpers shared by the optimizers -------------------------------------------------------
def _check_lr(who, lr) -> float:
    try:
        lr = float(lr)
    except (TypeError, ValueError):
        raise ConfigError(f"{who}: the learning rate must be a number, got "
                          f"{type(lr).__name__}") from None
    if not (lr >= 0.0 and math.isfinite(lr)):
        raise ConfigError(f"{who}: the learning rate must be finite and >= 0, got {lr}")
    return lr


def check_range(who, name, v, lo, hi=None, lo_open=False, hi_open=True) -> float:
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{who}: {name} must be a number, got {type(v).__name__}") from None
    ok = (v > lo if lo_open else v >= lo) and math.isfinite(v)
    if hi is not None:
        ok = ok and (v < hi if hi_open else v <= hi)
    if not ok:
        rng = f"{'(' if lo_open else '['}{lo}, {hi if hi is not None else 'inf'}" \
              f"{')' if hi_open or hi is None else ']'}"
        raise ConfigError(f"{who}: {name} must be in {rng}, got {v}")
    return v


def _jsonable(hp):
    return {k: list(v) if isinstance(v, tuple) else v for k, v in hp.items()}


def clipping_from_config(grad_clip_norm, grad_clip_value):
    if grad_clip_norm is not None and grad_clip_value is not None:
        raise ConfigError("optimizer config: give grad_clip_norm or grad_clip_value, not both")
    from .clipping import ClipByNorm, ClipByValue
    if grad_clip_norm is not None:
        return ClipByNorm(grad_clip_norm)
    if grad_clip_value is not None:
        return ClipByValue(grad_clip_value)
    return None


def config_decorator():
    """``@em.config`` (imported from ember.module, so that ``ember/__init__`` may import
    this package while it is still initializing)."""
    from ember.module import config
    return config
