"""`PlainRenderer`: one line of text per interval, for logs, pipes and CI (the Learner's
choice when stdout is not a terminal)."""
from __future__ import annotations

import sys
import time

from .protocol import EpochEvent, ItemEvent, Renderer, StartEvent

__all__ = ["PlainRenderer", "format_duration"]


def format_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "--:--"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class PlainRenderer(Renderer):
    """Prints a progress line every ``interval`` seconds (or every ``every`` steps when
    given) during each split, and one line per epoch with the epoch's aggregates:

    ``epoch   2/5  train loss 0.3412  accuracy 91.20%  |  valid loss 0.2811  accuracy 93.10%``

    ``metrics``: the names shown (default: all but the ``items/s``, ``cpu``/``memory``
    samplers on the epoch line). ``file``: where to write (default stdout, looked up at each
    write so pytest's capture works)."""

    def __init__(self, *, interval: float = 5.0, every: int | None = None,
                 metrics: list[str] | None = None, file=None, items: bool = True):
        self.interval = interval
        self.every = every
        self.metrics = metrics
        self.items = items
        self._file = file
        self._last = -float("inf")
        self._start = time.perf_counter()

    def _write(self, line: str) -> None:
        f = self._file or sys.stdout
        f.write(line + "\n")
        f.flush()

    def _shown(self, names):
        if self.metrics is not None:
            return [n for n in self.metrics if n in names]
        return list(names)

    def on_start(self, event: StartEvent) -> None:
        self._start = time.perf_counter()
        if event.resumed_from:
            self._write(f"resuming from {event.resumed_from} (epoch {event.start_epoch} of "
                        f"{event.num_epochs})")

    def _item(self, event: ItemEvent) -> None:
        if not self.items:
            return
        p = event.progress
        now = time.perf_counter()
        if self.every is not None:
            if p.iteration % self.every:
                return
        elif now - self._last < self.interval:
            return
        self._last = now
        total = f"/{p.iterations}" if p.iterations else ""
        pct = f" [{p.fraction:4.0%}]" if p.fraction is not None else ""
        vals = "  ".join(f"{m.name} {m.formatted}" for n, m in event.metrics.items()
                         if n in self._shown(event.metrics))
        self._write(f"{p.split:<5} epoch {p.epoch}/{p.num_epochs}  iteration "
                    f"{p.iteration}{total}{pct}  {vals}")

    def on_train_item(self, event: ItemEvent) -> None:
        self._item(event)

    def on_valid_item(self, event: ItemEvent) -> None:
        self._item(event)

    def on_epoch_end(self, event: EpochEvent) -> None:
        width = len(str(event.num_epochs))
        parts = [f"epoch {event.epoch:>{width}}/{event.num_epochs}"]
        for split in ("train", "valid"):
            shown = event.formatted.get(split, {})
            names = [n for n in self._shown(shown) if self.metrics is not None or
                     n not in ("items/s", "cpu use", "memory", "memory used")]
            if names:
                parts.append(f"{split} " + "  ".join(f"{n} {shown[n]}" for n in names))
        line = "  ".join(parts[:2]) + ("  |  " + parts[2] if len(parts) > 2 else "")
        line += f"  ({event.seconds:.1f} s)"
        self._write(line)

    def on_end(self, summary) -> None:
        pass
