"""Early stopping: end training when a metric has not improved for ``patience`` epochs
(Burn's ``MetricEarlyStoppingStrategy``)."""
from __future__ import annotations

import math

__all__ = ["EarlyStopping"]


class EarlyStopping:
    """``EarlyStopping("loss", patience=3)``: stop when the valid loss has not improved on
    its best by more than ``min_delta`` for ``patience`` epochs in a row.

    ``split``: ``"valid"`` (default) or ``"train"``. ``mode``: ``"min"`` or ``"max"``; by
    default the metric's own direction (``higher_is_better``), ``"min"`` when it has none.
    The state (best value and epoch, epochs without improvement) is saved in checkpoints."""

    def __init__(self, metric: str = "loss", *, patience: int = 3, split: str = "valid",
                 mode: str | None = None, min_delta: float = 0.0):
        if patience < 1:
            raise ValueError(f"EarlyStopping: patience must be >= 1, got {patience}")
        if split not in ("train", "valid"):
            raise ValueError(f"EarlyStopping: split must be 'train' or 'valid', got {split!r}")
        if mode not in (None, "min", "max"):
            raise ValueError(f"EarlyStopping: mode must be 'min', 'max' or None, got {mode!r}")
        if min_delta < 0:
            raise ValueError(f"EarlyStopping: min_delta must be >= 0, got {min_delta}")
        self.metric = metric
        self.patience = int(patience)
        self.split = split
        self.mode = mode
        self.min_delta = float(min_delta)
        self.best: float | None = None
        self.best_epoch: int | None = None
        self.bad_epochs = 0

    def resolve_mode(self, higher_is_better: bool | None) -> None:
        if self.mode is None:
            self.mode = "max" if higher_is_better else "min"

    def improved(self, value: float) -> bool:
        if value is None or math.isnan(value):
            return False
        if self.best is None:
            return True
        if self.mode == "max":
            return value > self.best + self.min_delta
        return value < self.best - self.min_delta

    def update(self, epoch: int, value: float) -> bool:
        """Record the epoch's value; True means: stop now."""
        if self.improved(value):
            self.best, self.best_epoch, self.bad_epochs = float(value), int(epoch), 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience

    def state_dict(self) -> dict:
        return {"best": self.best, "best_epoch": self.best_epoch, "bad_epochs": self.bad_epochs,
                "mode": self.mode}

    def load_state_dict(self, d: dict) -> None:
        self.best = d.get("best")
        self.best_epoch = d.get("best_epoch")
        self.bad_epochs = int(d.get("bad_epochs", 0))
        self.mode = d.get("mode", self.mode)

    def __repr__(self):
        return (f"EarlyStopping({self.metric!r}, patience={self.patience}, split={self.split!r}, "
                f"mode={self.mode!r}, min_delta={self.min_delta})")
