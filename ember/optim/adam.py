"""Adam (with L2 weight decay, optionally decoupled) and AdamW (decoupled weight decay), with
AMSGrad; ``torch.optim.Adam``/``AdamW`` semantics."""
from __future__ import annotations

import math
import os

import ember as em
from ember.errors import ConfigError
from ember.ops.optim import ADAM_MANY_MAX, ADAM_UPDATE, ADAM_UPDATE_MANY
from ember.tensor.dispatch import apply

from .base import Optimizer, check_range, clipping_from_config, config_decorator

__all__ = ["Adam", "AdamW", "AdamConfig", "AdamWConfig"]


class Adam(Optimizer):
    """``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2`` (``v_max = max(v_max, v)`` with
    ``amsgrad``), ``w -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)``.

    ``weight_decay`` adds ``weight_decay * w`` to the gradient (L2), or with
    ``decoupled_weight_decay=True`` scales ``w`` by ``1 - lr * weight_decay`` first (AdamW).

    Without ``amsgrad`` a parameter's step is one fused op, ``adam_update``
    (ember/ops/optim.py), bit for bit the Tensor-op formula of ``_composite``; AMSGrad (and
    parameters whose gradient or state differ in dtype or shape) take the formula. Where the
    parameters' backend runs ``adam_update_many`` as one op of its own (it lists it in
    ``Backend.fused_ops``: Cuda), the step's updates go there together, a call per device
    and set of scalars instead of one per parameter (``EMBER_ADAM_MANY=0``: one per
    parameter everywhere); the results are the same, bit for bit.
    """

    _defaults = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "amsgrad": False,
                 "decoupled_weight_decay": False}
    _fields = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")

    def _check(self, hp):
        who = type(self).__name__
        betas = hp["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ConfigError(f"{who}: betas must be a pair (beta1, beta2), got {betas!r}")
        hp["betas"] = (check_range(who, "beta1", betas[0], 0.0, 1.0),
                       check_range(who, "beta2", betas[1], 0.0, 1.0))
        hp["eps"] = check_range(who, "eps", hp["eps"], 0.0)
        hp["weight_decay"] = check_range(who, "weight_decay", hp["weight_decay"], 0.0)
        hp["amsgrad"] = bool(hp["amsgrad"])
        hp["decoupled_weight_decay"] = bool(hp["decoupled_weight_decay"])
        return hp

    def _prepare(self, lr, hp):
        b1, b2 = hp["betas"]
        wd = hp["weight_decay"]
        decoupled = hp["decoupled_weight_decay"]
        # the last item: adam_update's attrs by step number, built once per step
        return (lr, b1, b2, 1.0 - b1, 1.0 - b2, hp["eps"], 0.0 if decoupled else wd,
                1.0 - lr * wd if decoupled and wd else 1.0, hp["amsgrad"], {})

    def _fused(self, w, g, rec, c):
        """``(t, m, v, attrs-cache key)`` where this step is one adam_update, else None."""
        if c[8]:
            return None
        d, s = w._dtype, w._shape
        if g._dtype is not d or g._shape != s or not d.is_float:
            return None
        if rec is None:
            return 1, g, g, 0                  # m, v: not read on the first step
        m, v = rec[2], rec[3]
        if m is None or v is None or m._dtype is not d or v._dtype is not d or \
                m._shape != s or v._shape != s:
            return None
        t = rec[0] + 1
        return t, m, v, t

    def _defer(self, w, g, rec, c):
        """`_fused`'s plan where the device runs adam_update_many, else None."""
        dev = w._device
        many = _MANY.get(dev)
        if many is None:
            many = _MANY[dev] = _runs_many(dev)
        return self._fused(w, g, rec, c) if many else None

    def _update_deferred(self, items):
        groups: dict = {}                      # (device, attrs) -> [item index]
        plans = []
        for i, (w, g, rec, c, (t, m, v, key)) in enumerate(items):
            attrs = c[9].get(key)
            if attrs is None:
                attrs = c[9][key] = self._attrs(c, t, rec is None)
            plans.append((t, m, v))
            groups.setdefault((w._device, id(attrs)), (attrs, []))[1].append(i)
        out = [None] * len(items)
        for attrs, idx in groups.values():
            for lo in range(0, len(idx), ADAM_MANY_MAX):
                part = idx[lo:lo + ADAM_MANY_MAX]
                ins = ([items[i][0] for i in part] + [items[i][1] for i in part] +
                       [plans[i][1] for i in part] + [plans[i][2] for i in part])
                res = apply(ADAM_UPDATE_MANY, tuple(ins), attrs)
                for j, i in enumerate(part):
                    w2, m2, v2 = res[3 * j:3 * j + 3]
                    out[i] = (w2, (plans[i][0], w2.device, m2, v2, None))
        return out

    def _update(self, w, g, rec, c):
        fused = self._fused(w, g, rec, c)
        if fused is None:
            return self._composite(w, g, rec, c)
        t, m, v, key = fused
        attrs = c[9].get(key)
        if attrs is None:
            attrs = c[9][key] = self._attrs(c, t, rec is None)
        w, m, v = apply(ADAM_UPDATE, (w, g, m, v), attrs)
        return w, (t, w.device, m, v, None)

    @staticmethod
    def _attrs(c, t, first):
        """adam_update's attrs for step ``t`` (``first``: the parameter has no state yet):
        the folded scalars of `_composite`."""
        lr, b1, b2, k1, k2, eps, l2, decay = c[:8]
        s2 = math.sqrt(1.0 - b2 ** t)
        return {"beta1": b1, "beta2": b2, "k1": k1, "k2": k2,
                "step": lr * s2 / (1.0 - b1 ** t), "eps": eps * s2, "decay": decay,
                "l2": l2, "first": first}

    def _composite(self, w, g, rec, c):
        """The step with Tensor ops (AMSGrad; what adam_update computes, otherwise)."""
        lr, b1, b2, k1, k2, eps, l2, decay, amsgrad = c[:9]
        if l2:
            g = g + w * l2
        if rec is None:
            t = 1
            m = g * k1
            v = (g * g) * k2
            vmax = v if amsgrad else None
        else:
            t = rec[0] + 1
            m = rec[2] * b1 + g * k1
            v = rec[3] * b2 + (g * g) * k2
            if amsgrad:
                vmax = v if rec[4] is None else em.maximum(rec[4], v)
            else:
                vmax = None
        # lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps) == (lr*sqrt(bc2)/bc1) * m / (sqrt(v) +
        # eps*sqrt(bc2)): the bias corrections fold into two scalars, saving a tensor pass
        s2 = math.sqrt(1.0 - b2 ** t)
        denom = (v if vmax is None else vmax).sqrt() + eps * s2
        upd = m / denom * (lr * s2 / (1.0 - b1 ** t))
        w = (w * decay if decay != 1.0 else w) - upd
        return w, (t, w.device, m, v, vmax)


#: device -> whether its backend runs adam_update_many as one op (`_runs_many`)
_MANY: dict = {}


def _runs_many(device) -> bool:
    """Whether ``device``'s backend, or one it wraps, lists ``adam_update_many`` in its
    ``fused_ops`` (and ``EMBER_ADAM_MANY`` is not "0")."""
    if os.environ.get("EMBER_ADAM_MANY", "1") == "0":
        return False
    b = device.backend
    while b is not None:
        if "adam_update_many" in getattr(b, "fused_ops", ()):
            return True
        b = getattr(b, "inner", None)
    return False


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): ``w *= 1 - lr * weight_decay``
    before the Adam step. ``weight_decay`` defaults to 0.01 as in PyTorch."""

    _defaults = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01, "amsgrad": False}

    def _check(self, hp):
        return super()._check({**hp, "decoupled_weight_decay": True})


@config_decorator()
class AdamConfig:
    """Settings of `Adam`; ``AdamConfig(betas=(0.9, 0.98)).init()`` builds one."""
    lr: float | None = None
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    amsgrad: bool = False
    decoupled_weight_decay: bool = False
    grad_clip_norm: float | None = None
    grad_clip_value: float | None = None

    def init(self, groups=()) -> Adam:
        return Adam(self.lr, betas=tuple(self.betas), eps=self.eps,
                    weight_decay=self.weight_decay, amsgrad=self.amsgrad,
                    decoupled_weight_decay=self.decoupled_weight_decay, groups=groups,
                    grad_clipping=clipping_from_config(self.grad_clip_norm,
                                                       self.grad_clip_value))


@config_decorator()
class AdamWConfig:
    """Settings of `AdamW`; ``AdamWConfig(weight_decay=0.1).init()`` builds one."""
    lr: float | None = None
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01
    amsgrad: bool = False
    grad_clip_norm: float | None = None
    grad_clip_value: float | None = None

    def init(self, groups=()) -> AdamW:
        return AdamW(self.lr, betas=tuple(self.betas), eps=self.eps,
                     weight_decay=self.weight_decay, amsgrad=self.amsgrad, groups=groups,
                     grad_clipping=clipping_from_config(self.grad_clip_norm,
                                                        self.grad_clip_value))


Adam._config_cls = AdamConfig
AdamW._config_cls = AdamWConfig
