"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay
(PyTorch's ``torch.optim.SGD`` semantics)."""
from __future__ import annotations

from ember.errors import ConfigError

from .base import Optimizer, check_range, clipping_from_config, config_decorator

__all__ = ["SGD", "Sgd", "SgdConfig"]


class SGD(Optimizer):
    """``w -= lr * d`` where ``g' = g + weight_decay * w``; without momentum ``d = g'``; with
    momentum ``b = momentum * b + (1 - dampening) * g'`` (``b = g'`` on the first step) and
    ``d = g' + momentum * b`` (Nesterov) or ``d = b``."""

    _defaults = {"momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False}
    _fields = ("momentum_buffer",)

    def _check(self, hp):
        who = type(self).__name__
        hp["momentum"] = check_range(who, "momentum", hp["momentum"], 0.0)
        hp["dampening"] = check_range(who, "dampening", hp["dampening"], 0.0, 1.0, hi_open=False)
        hp["weight_decay"] = check_range(who, "weight_decay", hp["weight_decay"], 0.0)
        hp["nesterov"] = bool(hp["nesterov"])
        if hp["nesterov"] and (hp["momentum"] <= 0.0 or hp["dampening"] != 0.0):
            raise ConfigError(f"{who}: nesterov momentum needs momentum > 0 and dampening = 0, "
                              f"got momentum={hp['momentum']}, dampening={hp['dampening']}")
        return hp

    def _prepare(self, lr, hp):
        return (lr, hp["momentum"], 1.0 - hp["dampening"], hp["weight_decay"], hp["nesterov"])

    def _update(self, w, g, rec, c):
        lr, mom, keep, wd, nesterov = c
        if mom == 0.0:
            if wd:  # w - lr * (g + wd * w), with one pass fewer
                return w * (1.0 - lr * wd) - g * lr, None
            return w - g * lr, None
        if wd:
            g = g + w * wd
        if rec is None:
            buf, n = g, 1
        else:
            old = rec[2]
            buf = old * mom + (g if keep == 1.0 else g * keep) if old is not None else g
            n = rec[0] + 1
        d = g + buf * mom if nesterov else buf
        return w - d * lr, (n, w.device, buf)


Sgd = SGD


@config_decorator()
class SgdConfig:
    """Settings of `SGD`; ``SgdConfig(momentum=0.9).init()`` builds one."""
    lr: float | None = None
    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False
    grad_clip_norm: float | None = None
    grad_clip_value: float | None = None

    def init(self, groups=()) -> SGD:
        return SGD(self.lr, momentum=self.momentum, dampening=self.dampening,
                   weight_decay=self.weight_decay, nesterov=self.nesterov, groups=groups,
                   grad_clipping=clipping_from_config(self.grad_clip_norm,
                                                      self.grad_clip_value))


SGD._config_cls = SgdConfig
