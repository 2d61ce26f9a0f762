"""Training metrics: each one is updated with every step's item and keeps a per-epoch
aggregate. Values are plain floats, so they can be plotted, logged and compared.

A metric is an object with

- ``name`` (str, unique within a split; used for log files and in the dashboard),
- ``higher_is_better`` (bool or None when neither is: the learning rate, memory),
- ``update(item, ctx) -> float``: the value for this step (the batch),
- ``value() -> float``: the aggregate over the epoch so far (NaN before any update),
- ``reset()``: start a new epoch,
- ``state_dict() -> dict`` / ``load_state_dict(d)``: the running aggregate as JSON-able
  values (checkpoints save it, so an epoch interrupted mid-way resumes exactly),
- ``format(value) -> str``: how a value is shown (``"93.10%"``, ``"0.2811"``).

``item`` is what the model's ``train_step``/``valid_step`` returned (a `ClassificationOutput`,
`RegressionOutput`, or any object with ``loss``, ``output``, ``targets`` attributes), seen
through an `ItemView` that converts each field to NumPy once. ``ctx`` is a `MetricContext`
with the learning rate, the batch size, the split and a clock.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "Metric", "MetricContext", "ItemView", "Loss", "Accuracy", "TopKAccuracy", "Precision",
    "Recall", "F1Score", "LearningRate", "IterationSpeed", "CpuUse", "CpuMemory",
    "metric_from_name", "default_classification_metrics",
]


@dataclass
class MetricContext:
    """What a metric may need besides the item."""
    split: str = "train"
    lr: float | None = None
    batch_size: int = 0
    epoch: int = 1
    iteration: int = 0            # steps done in this epoch's split, this one included
    now: float = field(default_factory=time.perf_counter)


def _to_numpy(x) -> np.ndarray:
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):
        return np.asarray(x.numpy())
    return np.asarray(x)


class ItemView:
    """An item seen as NumPy: ``loss`` (float), ``output`` and ``targets`` (arrays), and
    ``batch_size``; each converted on first use and cached, so several metrics reading the
    same field pay for one transfer."""

    __slots__ = ("item", "_loss", "_output", "_targets")

    def __init__(self, item: Any):
        self.item = item
        self._loss = self._output = self._targets = None

    def _field(self, name):
        try:
            return getattr(self.item, name)
        except AttributeError:
            raise TypeError(
                f"metric: the step's item ({type(self.item).__name__}) has no {name!r}; "
                f"return a ClassificationOutput(loss, output, targets) or "
                f"RegressionOutput(loss, output, targets) from train_step/valid_step, or an "
                f"object with that attribute") from None

    @property
    def loss(self) -> float:
        if self._loss is None:
            v = self._field("loss")
            self._loss = float(v.item() if hasattr(v, "item") else v)
        return self._loss

    @property
    def output(self) -> np.ndarray:
        if self._output is None:
            self._output = _to_numpy(self._field("output"))
        return self._output

    @property
    def targets(self) -> np.ndarray:
        if self._targets is None:
            self._targets = _to_numpy(self._field("targets"))
        return self._targets

    @property
    def batch_size(self) -> int:
        for name in ("targets", "output"):
            v = getattr(self.item, name, None)
            if v is not None:
                shape = getattr(v, "shape", None)
                if shape is not None and len(shape) > 0:
                    return int(shape[0])
        return 1


class Metric:
    """Base class: subclasses set ``name`` and ``higher_is_better`` and implement
    ``update``, ``value``, ``reset`` (and ``state_dict``/``load_state_dict`` when they keep
    state beyond ``self._sum``/``self._count``, which the base class saves)."""

    name: str = "metric"
    higher_is_better: bool | None = None
    #: what a metric's value is shown as: "float", "percent", "rate", "memory", "lr"
    kind: str = "float"
    #: the splits the metric is measured on when given to both ("train", "valid")
    splits: tuple[str, ...] = ("train", "valid")

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self._sum = 0.0
        self._count = 0.0

    def update(self, item: ItemView, ctx: MetricContext) -> float:  # pragma: no cover
        raise NotImplementedError

    def value(self) -> float:
        return self._sum / self._count if self._count else math.nan

    def state_dict(self) -> dict:
        return {"sum": self._sum, "count": self._count}

    def load_state_dict(self, state: dict) -> None:
        self._sum = float(state["sum"])
        self._count = float(state["count"])

    def format(self, value: float) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        if self.kind == "percent":
            return f"{value:.2f}%"
        if self.kind == "rate":
            return f"{value:.1f}/s"
        if self.kind == "memory":
            return f"{value:.0f} MiB"
        if self.kind == "lr":
            return f"{value:.3e}"
        a = abs(value)
        if a != 0 and (a < 1e-3 or a >= 1e5):
            return f"{value:.3e}"
        return f"{value:.4f}"

    def _add(self, value: float, weight: float = 1.0) -> float:
        self._sum += value * weight
        self._count += weight
        return value

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class Loss(Metric):
    """The loss, averaged over the epoch's items (each batch weighted by its size)."""
    name = "loss"
    higher_is_better = False

    def update(self, item, ctx):
        return self._add(item.loss, item.batch_size)


def _class_targets(item: ItemView, metric: str) -> tuple[np.ndarray, np.ndarray]:
    out, tgt = item.output, item.targets
    if out.ndim != 2:
        raise ValueError(f"{metric}: expects output logits of shape [batch, classes], got "
                         f"shape {out.shape}")
    if tgt.ndim == 2 and tgt.shape == out.shape:     # one-hot targets
        tgt = tgt.argmax(axis=1)
    if tgt.ndim != 1 or tgt.shape[0] != out.shape[0]:
        raise ValueError(f"{metric}: expects targets of shape [batch] (class indices) or "
                         f"[batch, classes] (one-hot) matching output {out.shape}, got "
                         f"{tgt.shape}")
    return out, tgt.astype(np.int64, copy=False)


class Accuracy(Metric):
    """The percentage of items whose largest logit is the target class. ``pad_token``:
    targets equal to it are not counted (Burn's ``with_pad_token``)."""
    name = "accuracy"
    higher_is_better = True
    kind = "percent"

    def __init__(self, pad_token: int | None = None):
        self.pad_token = pad_token
        super().__init__()

    def update(self, item, ctx):
        out, tgt = _class_targets(item, self.name)
        pred = out.argmax(axis=1)
        keep = tgt != self.pad_token if self.pad_token is not None else slice(None)
        n = int(np.count_nonzero(keep)) if self.pad_token is not None else len(tgt)
        if n == 0:
            return math.nan
        correct = int(np.count_nonzero(pred[keep] == tgt[keep]))
        self._add(100.0 * correct / n, n)
        return 100.0 * correct / n


class TopKAccuracy(Metric):
    """The percentage of items whose target is among the ``k`` largest logits."""
    higher_is_better = True
    kind = "percent"

    def __init__(self, k: int = 5):
        if k < 1:
            raise ValueError(f"TopKAccuracy: k must be >= 1, got {k}")
        self.k = int(k)
        self.name = f"top-{self.k} accuracy"
        super().__init__()

    def update(self, item, ctx):
        out, tgt = _class_targets(item, self.name)
        k = min(self.k, out.shape[1])
        top = np.argpartition(-out, k - 1, axis=1)[:, :k]
        hit = (top == tgt[:, None]).any(axis=1)
        n = len(tgt)
        if n == 0:
            return math.nan
        v = 100.0 * float(hit.mean())
        self._add(v, n)
        return v


class _ConfusionMetric(Metric):
    """Macro-averaged metrics from a confusion matrix accumulated over the epoch. The
    average runs over the classes that occur among the targets or the predictions (as
    scikit-learn does by default); a class with no predicted (or no true) items counts 0
    for its precision (recall)."""
    higher_is_better = True
    kind = "percent"

    def __init__(self, num_classes: int | None = None):
        self.num_classes = num_classes
        super().__init__()

    def reset(self):
        super().reset()
        self._cm = None

    def state_dict(self):
        return {"cm": None if self._cm is None else self._cm.tolist()}

    def load_state_dict(self, state):
        cm = state.get("cm")
        self._cm = None if cm is None else np.asarray(cm, dtype=np.int64)

    def _confusion(self, item) -> np.ndarray:
        out, tgt = _class_targets(item, self.name)
        c = max(self.num_classes or 0, out.shape[1])
        pred = out.argmax(axis=1)
        if len(tgt) and (tgt.min() < 0 or tgt.max() >= c):
            raise ValueError(f"{self.name}: target class {int(tgt.max())} out of range for "
                             f"{c} classes")
        return np.bincount(tgt * c + pred, minlength=c * c).reshape(c, c)

    def update(self, item, ctx):
        cm = self._confusion(item)
        if self._cm is None:
            self._cm = cm
        else:
            if self._cm.shape != cm.shape:
                n = max(self._cm.shape[0], cm.shape[0])
                grow = np.zeros((n, n), np.int64)
                grow[:self._cm.shape[0], :self._cm.shape[0]] += self._cm
                grow[:cm.shape[0], :cm.shape[0]] += cm
                self._cm = grow
            else:
                self._cm = self._cm + cm
        return self._score(cm)

    def value(self):
        return math.nan if self._cm is None else self._score(self._cm)

    def _score(self, cm: np.ndarray) -> float:
        tp = np.diag(cm).astype(np.float64)
        predicted = cm.sum(axis=0).astype(np.float64)
        actual = cm.sum(axis=1).astype(np.float64)
        present = (predicted > 0) | (actual > 0)
        if not present.any():
            return math.nan
        with np.errstate(divide="ignore", invalid="ignore"):
            precision = np.where(predicted > 0, tp / np.maximum(predicted, 1), 0.0)
            recall = np.where(actual > 0, tp / np.maximum(actual, 1), 0.0)
            s = precision + recall
            f1 = np.where(s > 0, 2 * precision * recall / np.where(s > 0, s, 1), 0.0)
        per_class = {"precision": precision, "recall": recall, "f1": f1}[self._which]
        return 100.0 * float(per_class[present].mean())


class Precision(_ConfusionMetric):
    """Macro-averaged precision (percent)."""
    name = "precision"
    _which = "precision"


class Recall(_ConfusionMetric):
    """Macro-averaged recall (percent)."""
    name = "recall"
    _which = "recall"


class F1Score(_ConfusionMetric):
    """Macro-averaged F1 score (percent): the mean over classes of the harmonic mean of
    each class's precision and recall."""
    name = "f1"
    _which = "f1"


class LearningRate(Metric):
    """The learning rate of each step; the epoch value is its mean."""
    name = "lr"
    kind = "lr"
    splits = ("train",)

    def update(self, item, ctx):
        if ctx.lr is None:
            return math.nan
        return self._add(float(ctx.lr))


class IterationSpeed(Metric):
    """Items per second: per step, the batch over the time since the previous step; per
    epoch, all items over the time since the epoch's first step started."""
    name = "items/s"
    higher_is_better = True
    kind = "rate"

    def reset(self):
        super().reset()
        self._start = None
        self._last = None

    def state_dict(self):
        return {}            # a clock does not survive a restart

    def load_state_dict(self, state):
        pass

    def start(self, now: float) -> None:
        """Called by the Learner when the split's loop begins (before the first batch)."""
        self._start = self._last = now

    def update(self, item, ctx):
        now = ctx.now
        if self._start is None:
            self._start = self._last = now
            self._count += ctx.batch_size or item.batch_size
            return math.nan
        dt = now - self._last
        self._last = now
        n = ctx.batch_size or item.batch_size
        self._count += n
        return n / dt if dt > 0 else math.nan

    def value(self):
        if self._start is None or self._last is None or self._last <= self._start:
            return math.nan
        return self._count / (self._last - self._start)


def _psutil(metric: str):
    try:
        import psutil
    except ImportError:
        raise ImportError(f"{metric}: needs psutil (pip install 'ember[train]')") from None
    return psutil


class CpuUse(Metric):
    """System-wide CPU use in percent (psutil), sampled at most every ``period`` seconds;
    the epoch value is the mean of the samples."""
    name = "cpu use"
    kind = "percent"

    def __init__(self, period: float = 0.5):
        self.period = period
        _psutil(self.name).cpu_percent(None)     # the first call only starts the measurement
        self._t = time.perf_counter()
        self._last = math.nan
        super().__init__()

    def update(self, item, ctx):
        now = ctx.now
        if now - self._t >= self.period or math.isnan(self._last):
            self._last = float(_psutil(self.name).cpu_percent(None))
            self._t = now
            self._add(self._last)
        return self._last

    def value(self):
        return super().value() if self._count else self._last


class CpuMemory(Metric):
    """Memory in MiB (psutil): the resident set of this process, or with
    ``system=True`` the memory in use on the machine; sampled at most every ``period``
    seconds, the epoch value is the mean."""
    kind = "memory"

    def __init__(self, system: bool = False, period: float = 0.5):
        self.system = system
        self.period = period
        self.name = "memory used" if system else "memory"
        _psutil(self.name)
        self._t = -math.inf
        self._last = math.nan
        super().__init__()

    def _read(self) -> float:
        ps = _psutil(self.name)
        if self.system:
            return ps.virtual_memory().used
        return ps.Process().memory_info().rss

    def update(self, item, ctx):
        if ctx.now - self._t >= self.period:
            self._last = self._read() / 2**20
            self._t = ctx.now
            self._add(self._last)
        return self._last

    def value(self):
        return super().value() if self._count else self._last


_BY_NAME = {
    "loss": Loss, "accuracy": Accuracy, "precision": Precision, "recall": Recall,
    "f1": F1Score, "lr": LearningRate, "learning rate": LearningRate,
    "items/s": IterationSpeed, "iteration speed": IterationSpeed, "cpu use": CpuUse,
    "cpu": CpuUse, "memory": CpuMemory,
}


def metric_from_name(name: str) -> Metric:
    """A metric by name: ``"loss"``, ``"accuracy"``, ``"top-5 accuracy"`` (any k),
    ``"precision"``, ``"recall"``, ``"f1"``, ``"lr"``, ``"items/s"``, ``"cpu use"``,
    ``"memory"``."""
    key = name.strip().lower()
    if key.startswith("top-") and key.endswith(" accuracy"):
        return TopKAccuracy(int(key[4:-len(" accuracy")]))
    if key not in _BY_NAME:
        raise ValueError(f"unknown metric {name!r}; known: {sorted(_BY_NAME)} and "
                         f"'top-K accuracy'")
    return _BY_NAME[key]()


def default_classification_metrics() -> list[Metric]:
    """loss, accuracy, lr, items/s: the set `ember demo` shows."""
    return [Loss(), Accuracy(), LearningRate(), IterationSpeed()]
