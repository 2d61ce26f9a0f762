"""Learning-rate schedulers. Each is a closed form of the iteration number, so its whole
state is that number: ``lr = scheduler.step()`` returns the rate for this iteration and
advances; ``scheduler.lr`` is the rate in use (the last one ``step`` returned; before the
first step, the one it will return).

    sched = em.optim.CosineAnnealingLr(1e-3, num_iters=1000, warmup_iters=100)
    for batch in loader:
        ...
        model = opt.step(sched.step(), model, grads)
"""
from __future__ import annotations

import bisect
import math

from ember.errors import ConfigError, RecordError

from . import _io
from .base import config_decorator

__all__ = ["LrScheduler", "ConstantLr", "LinearLr", "ExponentialLr", "StepLr", "MultiStepLr",
           "CosineAnnealingLr", "NoamLr", "LambdaLr", "SequentialLr",
           "ConstantLrConfig", "LinearLrConfig", "ExponentialLrConfig", "StepLrConfig",
           "CosineAnnealingLrConfig", "NoamLrConfig"]

_FORMAT = "ember.lr_scheduler"


class LrScheduler:
    """Base class: subclasses define ``lr_at(t)`` for iteration ``t = 0, 1, ...`` and
    ``_params()`` (their settings, for ``state_dict``)."""

    iteration: int = 0

    def lr_at(self, t: int) -> float:
        raise NotImplementedError

    def _params(self) -> dict:
        return {}

    def step(self) -> float:
        """The learning rate of this iteration; then advance to the next."""
        lr = self.lr_at(self.iteration)
        self.iteration += 1
        return lr

    @property
    def lr(self) -> float:
        """The learning rate in use: the last one ``step`` returned (before any step, the
        first one it will return)."""
        return self.lr_at(self.iteration - 1 if self.iteration > 0 else 0)

    def state_dict(self) -> dict:
        return {"format": _FORMAT, "scheduler": type(self).__name__,
                "iteration": self.iteration, "params": self._params()}

    def load_state_dict(self, state: dict) -> "LrScheduler":
        """Continue from a saved iteration (the settings stay this scheduler's own; a
        scheduler of another kind is a RecordError). Returns self."""
        name = type(self).__name__
        if not isinstance(state, dict) or "iteration" not in state:
            raise RecordError(f"{name}.load_state_dict: expected a dict from state_dict() with "
                              f"an 'iteration' key, got {type(state).__name__}")
        other = state.get("scheduler")
        if other is not None and other != name:
            raise RecordError(f"{name}.load_state_dict: the state is of a {other} scheduler")
        it = state["iteration"]
        if not isinstance(it, int) or it < 0:
            raise RecordError(f"{name}.load_state_dict: iteration must be an int >= 0, got "
                              f"{it!r}")
        self.iteration = it
        return self

    def save(self, path) -> None:
        """Write ``state_dict()`` as JSON, atomically."""
        _io.save_json(path, self.state_dict())

    def load(self, path) -> "LrScheduler":
        state = _io.load_json(path, "scheduler state")
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise RecordError(f"{type(self).__name__}.load: {path!r} holds no scheduler state")
        return self.load_state_dict(state)

    def __repr__(self):
        ps = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({ps}, iteration={self.iteration})"


def _num(who, name, v, lo=None, lo_open=False, integer=False):
    try:
        v = int(v) if integer else float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{who}: {name} must be a{'n int' if integer else ' number'}, "
                          f"got {type(v).__name__}") from None
    if not integer and not math.isfinite(v):
        raise ConfigError(f"{who}: {name} must be finite, got {v}")
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise ConfigError(f"{who}: {name} must be {'>' if lo_open else '>='} {lo}, got {v}")
    return v


class ConstantLr(LrScheduler):
    """The same rate at every iteration."""

    def __init__(self, lr: float):
        self._lr = _num("ConstantLr", "lr", lr, 0.0)

    def lr_at(self, t):
        return self._lr

    def _params(self):
        return {"lr": self._lr}


class LinearLr(LrScheduler):
    """From ``initial_lr`` to ``final_lr`` linearly over ``num_iters`` iterations, then
    ``final_lr``: a warm-up (``LinearLr(0.0, peak, n)``) or a decay."""

    def __init__(self, initial_lr: float, final_lr: float, num_iters: int):
        self.initial_lr = _num("LinearLr", "initial_lr", initial_lr, 0.0)
        self.final_lr = _num("LinearLr", "final_lr", final_lr, 0.0)
        self.num_iters = _num("LinearLr", "num_iters", num_iters, 0, integer=True)

    def lr_at(self, t):
        n = self.num_iters
        if t >= n:
            return self.final_lr
        return self.initial_lr + (self.final_lr - self.initial_lr) * (t / n)

    def _params(self):
        return {"initial_lr": self.initial_lr, "final_lr": self.final_lr,
                "num_iters": self.num_iters}


class ExponentialLr(LrScheduler):
    """``initial_lr * gamma ** t``."""

    def __init__(self, initial_lr: float, gamma: float):
        self.initial_lr = _num("ExponentialLr", "initial_lr", initial_lr, 0.0)
        self.gamma = _num("ExponentialLr", "gamma", gamma, 0.0, lo_open=True)

    def lr_at(self, t):
        return self.initial_lr * self.gamma ** t

    def _params(self):
        return {"initial_lr": self.initial_lr, "gamma": self.gamma}


class StepLr(LrScheduler):
    """``initial_lr * gamma ** (t // step_size)``: multiplied by ``gamma`` every
    ``step_size`` iterations."""

    def __init__(self, initial_lr: float, step_size: int, gamma: float = 0.1):
        self.initial_lr = _num("StepLr", "initial_lr", initial_lr, 0.0)
        self.step_size = _num("StepLr", "step_size", step_size, 0, lo_open=True, integer=True)
        self.gamma = _num("StepLr", "gamma", gamma, 0.0)

    def lr_at(self, t):
        return self.initial_lr * self.gamma ** (t // self.step_size)

    def _params(self):
        return {"initial_lr": self.initial_lr, "step_size": self.step_size,
                "gamma": self.gamma}


class MultiStepLr(LrScheduler):
    """``initial_lr`` multiplied by ``gamma`` at each of the iterations in ``milestones``."""

    def __init__(self, initial_lr: float, milestones, gamma: float = 0.1):
        self.initial_lr = _num("MultiStepLr", "initial_lr", initial_lr, 0.0)
        ms = [_num("MultiStepLr", "milestones", m, 0, integer=True) for m in milestones]
        if ms != sorted(ms):
            raise ConfigError(f"MultiStepLr: milestones must be increasing, got {ms}")
        self.milestones = ms
        self.gamma = _num("MultiStepLr", "gamma", gamma, 0.0)

    def lr_at(self, t):
        return self.initial_lr * self.gamma ** bisect.bisect_right(self.milestones, t)

    def _params(self):
        return {"initial_lr": self.initial_lr, "milestones": list(self.milestones),
                "gamma": self.gamma}


class CosineAnnealingLr(LrScheduler):
    """Optionally ``warmup_iters`` of linear warm-up from ``warmup_start_lr`` to
    ``initial_lr``, then half a cosine from ``initial_lr`` down to ``min_lr`` over
    ``num_iters`` iterations (PyTorch's ``T_max``), then ``min_lr``."""

    def __init__(self, initial_lr: float, num_iters: int, min_lr: float = 0.0, *,
                 warmup_iters: int = 0, warmup_start_lr: float = 0.0):
        who = "CosineAnnealingLr"
        self.initial_lr = _num(who, "initial_lr", initial_lr, 0.0)
        self.num_iters = _num(who, "num_iters", num_iters, 0, lo_open=True, integer=True)
        self.min_lr = _num(who, "min_lr", min_lr, 0.0)
        self.warmup_iters = _num(who, "warmup_iters", warmup_iters, 0, integer=True)
        self.warmup_start_lr = _num(who, "warmup_start_lr", warmup_start_lr, 0.0)

    def lr_at(self, t):
        w = self.warmup_iters
        if t < w:
            return self.warmup_start_lr + (self.initial_lr - self.warmup_start_lr) * (t / w)
        u = min(t - w, self.num_iters) / self.num_iters
        return self.min_lr + (self.initial_lr - self.min_lr) * (1.0 + math.cos(math.pi * u)) / 2

    def _params(self):
        return {"initial_lr": self.initial_lr, "num_iters": self.num_iters,
                "min_lr": self.min_lr, "warmup_iters": self.warmup_iters,
                "warmup_start_lr": self.warmup_start_lr}


class NoamLr(LrScheduler):
    """The Transformer schedule (Vaswani et al.): ``factor * model_size ** -0.5 *
    min(s ** -0.5, s * warmup_steps ** -1.5)`` with ``s = t + 1``."""

    def __init__(self, factor: float = 1.0, *, warmup_steps: int = 4000,
                 model_size: int = 512):
        self.factor = _num("NoamLr", "factor", factor, 0.0)
        self.warmup_steps = _num("NoamLr", "warmup_steps", warmup_steps, 0, lo_open=True,
                                 integer=True)
        self.model_size = _num("NoamLr", "model_size", model_size, 0, lo_open=True,
                               integer=True)

    def lr_at(self, t):
        s = t + 1
        return self.factor * self.model_size ** -0.5 * min(s ** -0.5,
                                                           s * self.warmup_steps ** -1.5)

    def _params(self):
        return {"factor": self.factor, "warmup_steps": self.warmup_steps,
                "model_size": self.model_size}


class LambdaLr(LrScheduler):
    """``fn(t)`` for any function of the iteration (its state saves; the function does
    not)."""

    def __init__(self, fn):
        if not callable(fn):
            raise ConfigError(f"LambdaLr: fn must be callable, got {type(fn).__name__}")
        self.fn = fn

    def lr_at(self, t):
        return float(self.fn(t))


class SequentialLr(LrScheduler):
    """Schedulers one after the other: ``schedulers[i]`` runs from ``milestones[i - 1]``,
    counting its own iterations from 0 (``torch.optim.lr_scheduler.SequentialLR``).
    ``milestones`` may be left out when every scheduler but the last has a length
    (``num_iters``, or ``warmup_iters + num_iters``)."""

    def __init__(self, schedulers, milestones=None):
        self.schedulers = list(schedulers)
        if not self.schedulers:
            raise ConfigError("SequentialLr: needs at least one scheduler")
        for s in self.schedulers:
            if not isinstance(s, LrScheduler):
                raise ConfigError(f"SequentialLr: expected LrScheduler objects, got "
                                  f"{type(s).__name__}")
        if milestones is None:
            milestones, t = [], 0
            for s in self.schedulers[:-1]:
                n = getattr(s, "num_iters", None)
                if n is None:
                    raise ConfigError(f"SequentialLr: {type(s).__name__} has no length; give "
                                      f"milestones=[...]")
                t += n + getattr(s, "warmup_iters", 0)
                milestones.append(t)
        ms = [_num("SequentialLr", "milestones", m, 0, integer=True) for m in milestones]
        if len(ms) != len(self.schedulers) - 1 or ms != sorted(ms):
            raise ConfigError(f"SequentialLr: needs {len(self.schedulers) - 1} increasing "
                              f"milestone(s) for {len(self.schedulers)} schedulers, got {ms}")
        self.milestones = ms

    def lr_at(self, t):
        i = bisect.bisect_right(self.milestones, t)
        start = self.milestones[i - 1] if i else 0
        return self.schedulers[i].lr_at(t - start)

    def _params(self):
        return {"milestones": list(self.milestones),
                "schedulers": [{"scheduler": type(s).__name__, "params": s._params()}
                               for s in self.schedulers]}


# -- configs ---------------------------------------------------------------------------------
_config = config_decorator()


@_config
class ConstantLrConfig:
    lr: float

    def init(self) -> ConstantLr:
        return ConstantLr(self.lr)


@_config
class LinearLrConfig:
    initial_lr: float
    final_lr: float
    num_iters: int

    def init(self) -> LinearLr:
        return LinearLr(self.initial_lr, self.final_lr, self.num_iters)


@_config
class ExponentialLrConfig:
    initial_lr: float
    gamma: float

    def init(self) -> ExponentialLr:
        return ExponentialLr(self.initial_lr, self.gamma)


@_config
class StepLrConfig:
    initial_lr: float
    step_size: int
    gamma: float = 0.1

    def init(self) -> StepLr:
        return StepLr(self.initial_lr, self.step_size, self.gamma)


@_config
class CosineAnnealingLrConfig:
    initial_lr: float
    num_iters: int
    min_lr: float = 0.0
    warmup_iters: int = 0
    warmup_start_lr: float = 0.0

    def init(self) -> CosineAnnealingLr:
        return CosineAnnealingLr(self.initial_lr, self.num_iters, self.min_lr,
                                 warmup_iters=self.warmup_iters,
                                 warmup_start_lr=self.warmup_start_lr)


@_config
class NoamLrConfig:
    factor: float = 1.0
    warmup_steps: int = 4000
    model_size: int = 512

    def init(self) -> NoamLr:
        return NoamLr(self.factor, warmup_steps=self.warmup_steps, model_size=self.model_size)
