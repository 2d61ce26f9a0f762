"""The metric history of a training run and its end-of-training summary (a table of every
metric per epoch, the best epoch), printed and saved as ``summary.txt``/``summary.json`` in
the artifact directory."""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

__all__ = ["MetricHistory", "TrainingSummary"]


class MetricHistory:
    """Epoch aggregates per split and metric: ``history.values("valid", "loss")`` ->
    ``[(epoch, value), ...]`` in epoch order. JSON-able (``to_dict``/``from_dict``), so a
    checkpoint carries it and a resumed run's summary covers every epoch."""

    def __init__(self):
        self._data: dict[str, dict[str, dict[int, float]]] = {"train": {}, "valid": {}}
        self.meta: dict[str, dict] = {}     # metric name -> {"higher_is_better", "kind"}

    def record(self, split: str, epoch: int, values: dict[str, float]) -> None:
        d = self._data.setdefault(split, {})
        for name, v in values.items():
            d.setdefault(name, {})[int(epoch)] = float(v)

    def values(self, split: str, name: str) -> list[tuple[int, float]]:
        return sorted(self._data.get(split, {}).get(name, {}).items())

    def value(self, split: str, name: str, epoch: int) -> float:
        return self._data.get(split, {}).get(name, {}).get(int(epoch), math.nan)

    def names(self, split: str) -> list[str]:
        return list(self._data.get(split, {}))

    def epochs(self) -> list[int]:
        seen = set()
        for d in self._data.values():
            for per in d.values():
                seen.update(per)
        return sorted(seen)

    def best(self, split: str, name: str, higher_is_better: bool) -> tuple[int, float] | None:
        vals = [(e, v) for e, v in self.values(split, name) if not math.isnan(v)]
        if not vals:
            return None
        pick = max if higher_is_better else min
        return pick(vals, key=lambda ev: (ev[1], -ev[0]) if higher_is_better else (ev[1], ev[0]))

    def truncate(self, last_epoch: int) -> None:
        """Forget epochs after ``last_epoch`` (resuming from an earlier checkpoint)."""
        for d in self._data.values():
            for per in d.values():
                for e in [e for e in per if e > last_epoch]:
                    del per[e]

    def to_dict(self) -> dict:
        return {"splits": {s: {n: {str(e): v for e, v in per.items()} for n, per in d.items()}
                           for s, d in self._data.items()},
                "meta": self.meta}

    @classmethod
    def from_dict(cls, d: dict) -> "MetricHistory":
        h = cls()
        for s, names in d.get("splits", {}).items():
            h._data[s] = {n: {int(e): float(v) for e, v in per.items()}
                          for n, per in names.items()}
        h.meta = dict(d.get("meta", {}))
        return h

    def __repr__(self):
        return f"MetricHistory(epochs={self.epochs()}, metrics={ {s: list(d) for s, d in self._data.items()} })"


def _fmt(value: float, kind: str) -> str:
    if value is None or math.isnan(value):
        return "-"
    if kind == "percent":
        return f"{value:.2f}%"
    if kind == "rate":
        return f"{value:.1f}/s"
    if kind == "memory":
        return f"{value:.0f} MiB"
    if kind == "lr":
        return f"{value:.3e}"
    a = abs(value)
    if a != 0 and (a < 1e-3 or a >= 1e5):
        return f"{value:.3e}"
    return f"{value:.4f}"


@dataclass
class TrainingSummary:
    """What `Learner.fit` ends with. ``epochs_done`` counts completed epochs (resumed ones
    included); ``stopped`` says why training ended: ``"finished"``, ``"early stopping"``,
    ``"interrupted"`` (``q``, Ctrl-C, ``should_stop``); ``best`` is ``(epoch, value)`` of
    the checkpoint metric when one was chosen."""
    history: MetricHistory
    num_epochs: int
    epochs_done: int
    stopped: str = "finished"
    seconds: float = 0.0
    best_metric: tuple[str, str] | None = None     # (split, name)
    best: tuple[int, float] | None = None
    last_checkpoint: str | None = None
    best_checkpoint: str | None = None
    resumed_from: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def best_epoch(self) -> int | None:
        return self.best[0] if self.best else None

    def table(self) -> str:
        """One table per split: a row per epoch, a column per metric."""
        h = self.history
        out = []
        for split in ("train", "valid"):
            names = h.names(split)
            if not names:
                continue
            cols = ["epoch"] + names
            rows = []
            for e in h.epochs():
                row = [str(e)]
                for n in names:
                    kind = h.meta.get(n, {}).get("kind", "float")
                    row.append(_fmt(h.value(split, n, e), kind))
                mark = " *" if self.best and e == self.best[0] else ""
                rows.append((row, mark))
            widths = [max(len(c), *(len(r[i]) for r, _ in rows)) for i, c in enumerate(cols)]
            out.append(f"{split}:")
            out.append("  " + "  ".join(c.rjust(w) for c, w in zip(cols, widths)))
            for row, mark in rows:
                out.append("  " + "  ".join(v.rjust(w) for v, w in zip(row, widths)) + mark)
        return "\n".join(out)

    def text(self) -> str:
        head = f"training summary: {self.epochs_done} of {self.num_epochs} epochs"
        if self.stopped != "finished":
            head += f" ({self.stopped})"
        head += f", {self.seconds:.1f} s"
        if self.resumed_from:
            head += f" (resumed from {self.resumed_from})"
        lines = [head]
        if self.best and self.best_metric:
            split, name = self.best_metric
            kind = self.history.meta.get(name, {}).get("kind", "float")
            lines.append(f"best epoch: {self.best[0]} ({split} {name} "
                         f"{_fmt(self.best[1], kind)})  [marked *]")
        tbl = self.table()
        if tbl:
            lines.append(tbl)
        if self.last_checkpoint:
            lines.append(f"last checkpoint: {self.last_checkpoint}")
        if self.best_checkpoint and self.best_checkpoint != self.last_checkpoint:
            lines.append(f"best checkpoint: {self.best_checkpoint}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def to_dict(self) -> dict:
        return {"num_epochs": self.num_epochs, "epochs_done": self.epochs_done,
                "stopped": self.stopped, "seconds": self.seconds,
                "best_metric": list(self.best_metric) if self.best_metric else None,
                "best": list(self.best) if self.best else None,
                "last_checkpoint": self.last_checkpoint,
                "best_checkpoint": self.best_checkpoint, "resumed_from": self.resumed_from,
                "history": self.history.to_dict()}

    def save(self, directory) -> None:
        """Write ``summary.txt`` and ``summary.json`` into ``directory`` (atomically)."""
        from ._io import write_text_atomic
        os.makedirs(directory, exist_ok=True)
        write_text_atomic(os.path.join(directory, "summary.txt"), self.text() + "\n")
        write_text_atomic(os.path.join(directory, "summary.json"),
                          json.dumps(self.to_dict(), indent=1, allow_nan=True) + "\n")
