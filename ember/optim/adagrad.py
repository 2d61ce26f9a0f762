"""AdaGrad with learning-rate decay and an initial accumulator value;
``torch.optim.Adagrad`` semantics."""
from __future__ import annotations

from .base import Optimizer, check_range, clipping_from_config, config_decorator

__all__ = ["AdaGrad", "Adagrad", "AdaGradConfig"]


class AdaGrad(Optimizer):
    """``s += g^2`` (``s`` starts at ``initial_accumulator_value``),
    ``w -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(s) + eps)``. ``weight_decay`` adds
    ``weight_decay * w`` to the gradient."""

    _defaults = {"lr_decay": 0.0, "weight_decay": 0.0, "initial_accumulator_value": 0.0,
                 "eps": 1e-10}
    _fields = ("sum",)

    def _check(self, hp):
        who = type(self).__name__
        hp["lr_decay"] = check_range(who, "lr_decay", hp["lr_decay"], 0.0)
        hp["weight_decay"] = check_range(who, "weight_decay", hp["weight_decay"], 0.0)
        hp["initial_accumulator_value"] = check_range(
            who, "initial_accumulator_value", hp["initial_accumulator_value"], 0.0)
        hp["eps"] = check_range(who, "eps", hp["eps"], 0.0)
        return hp

    def _prepare(self, lr, hp):
        return (lr, hp["lr_decay"], hp["weight_decay"], hp["initial_accumulator_value"],
                hp["eps"])

    def _update(self, w, g, rec, c):
        lr, decay, wd, init, eps = c
        if wd:
            g = g + w * wd
        if rec is None:
            t = 1
            s = g * g + init if init else g * g
        else:
            t = rec[0] + 1
            s = rec[2] + g * g
        clr = lr / (1.0 + (t - 1) * decay)
        return w - g * clr / (s.sqrt() + eps), (t, w.device, s)


Adagrad = AdaGrad


@config_decorator()
class AdaGradConfig:
    """Settings of `AdaGrad`; ``AdaGradConfig(lr_decay=1e-4).init()`` builds one."""
    lr: float | None = None
    lr_decay: float = 0.0
    weight_decay: float = 0.0
    initial_accumulator_value: float = 0.0
    eps: float = 1e-10
    grad_clip_norm: float | None = None
    grad_clip_value: float | None = None

    def init(self, groups=()) -> AdaGrad:
        return AdaGrad(self.lr, lr_decay=self.lr_decay, weight_decay=self.weight_decay,
                       initial_accumulator_value=self.initial_accumulator_value, eps=self.eps,
                       groups=groups,
                       grad_clipping=clipping_from_config(self.grad_clip_norm,
                                                          self.grad_clip_value))


AdaGrad._config_cls = AdaGradConfig
