"""RMSProp (Hinton), optionally centered and with momentum; ``torch.optim.RMSprop``
semantics."""
from __future__ import annotations

from .base import Optimizer, check_range, clipping_from_config, config_decorator

__all__ = ["RmsProp", "RMSprop", "RmsPropConfig"]


class RmsProp(Optimizer):
    """``s = alpha s + (1 - alpha) g^2``; centered: ``a = alpha a + (1 - alpha) g`` and
    ``d = sqrt(s - a^2) + eps``, else ``d = sqrt(s) + eps``; with momentum
    ``b = momentum b + g / d`` and ``w -= lr b``, else ``w -= lr g / d``. ``weight_decay``
    adds ``weight_decay * w`` to the gradient."""

    _defaults = {"alpha": 0.99, "eps": 1e-8, "weight_decay": 0.0, "momentum": 0.0,
                 "centered": False}
    _fields = ("square_avg", "grad_avg", "momentum_buffer")

    def _check(self, hp):
        who = type(self).__name__
        hp["alpha"] = check_range(who, "alpha", hp["alpha"], 0.0, 1.0, hi_open=False)
        hp["eps"] = check_range(who, "eps", hp["eps"], 0.0)
        hp["weight_decay"] = check_range(who, "weight_decay", hp["weight_decay"], 0.0)
        hp["momentum"] = check_range(who, "momentum", hp["momentum"], 0.0)
        hp["centered"] = bool(hp["centered"])
        return hp

    def _prepare(self, lr, hp):
        a = hp["alpha"]
        return (lr, a, 1.0 - a, hp["eps"], hp["weight_decay"], hp["momentum"], hp["centered"])

    def _update(self, w, g, rec, c):
        lr, a, k, eps, wd, mom, centered = c
        if wd:
            g = g + w * wd
        gk = g * k
        if rec is None:  # the state starts at zeros: skip the terms that vanish
            t, sq = 1, g * gk
            ga = gk if centered else None
            old_buf = None
        else:
            t = rec[0] + 1
            sq = rec[2] * a + g * gk
            ga = (gk if rec[3] is None else rec[3] * a + gk) if centered else None
            old_buf = rec[4]
        d = ((sq - ga * ga).sqrt() if centered else sq.sqrt()) + eps
        if mom:
            buf = g / d if old_buf is None else old_buf * mom + g / d
            return w - buf * lr, (t, w.device, sq, ga, buf)
        return w - g * lr / d, (t, w.device, sq, ga, None)


RMSprop = RmsProp


@config_decorator()
class RmsPropConfig:
    """Settings of `RmsProp`; ``RmsPropConfig(centered=True).init()`` builds one."""
    lr: float | None = None
    alpha: float = 0.99
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0
    centered: bool = False
    grad_clip_norm: float | None = None
    grad_clip_value: float | None = None

    def init(self, groups=()) -> RmsProp:
        return RmsProp(self.lr, alpha=self.alpha, eps=self.eps, weight_decay=self.weight_decay,
                       momentum=self.momentum, centered=self.centered, groups=groups,
                       grad_clipping=clipping_from_config(self.grad_clip_norm,
                                                          self.grad_clip_value))


RmsProp._config_cls = RmsPropConfig
