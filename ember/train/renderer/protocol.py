"""The renderer protocol: how the `Learner` reports progress and asks whether to stop.

A renderer is any object with these methods (all called from the thread that runs the
training loop; a renderer that draws elsewhere must hand the data over itself, as
`DashboardRenderer` does):

- ``on_train_item(event: ItemEvent)``: after every training step;
- ``on_valid_item(event: ItemEvent)``: after every validation step;
- ``on_epoch_end(event: EpochEvent)``: after an epoch's training and validation;
- ``on_end(summary: TrainingSummary)``: once, when training ends (finished, stopped
  early, or interrupted);
- ``should_stop() -> bool``: polled after every step; True makes the Learner stop after
  that step, save a checkpoint, and return (a ``q`` key, a button, a deadline...).

Optional:

- ``run(train: Callable[[], T]) -> T``: drive the training. The default (no ``run``) is
  that the Learner calls ``train()`` in the calling thread; the dashboard runs its UI in the
  calling thread and ``train`` in a worker thread.
- ``on_start(event: StartEvent)``: once, before the first step (the metric names, epochs,
  batches per epoch).

`Renderer` is a base class with no-op methods to subclass; anything with the methods works.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, TypeVar, runtime_checkable

__all__ = [
    "Renderer", "RendererProtocol", "Progress", "MetricUpdate", "ItemEvent", "EpochEvent",
    "StartEvent", "NullRenderer", "CallbackRenderer",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Progress:
    """Where training is. ``iteration`` counts the steps done in this epoch's split
    (1-based once a step is done); ``iterations`` is the split's batches per epoch when the
    loader has a length (else None); ``global_step`` counts optimizer steps since the start
    of training (resumed runs included)."""
    split: str
    epoch: int
    num_epochs: int
    iteration: int
    iterations: int | None
    items: int
    global_step: int
    elapsed: float              # seconds since this run of fit() started

    @property
    def fraction(self) -> float | None:
        """Fraction of this split's epoch done, or None when the length is unknown."""
        if not self.iterations:
            return None
        return min(1.0, self.iteration / self.iterations)


@dataclass(frozen=True)
class MetricUpdate:
    """One metric after a step: this step's value, the epoch's aggregate so far, and the
    aggregate formatted for display."""
    name: str
    value: float
    epoch_value: float
    formatted: str
    higher_is_better: bool | None = None


@dataclass(frozen=True)
class ItemEvent:
    progress: Progress
    metrics: dict[str, MetricUpdate]


@dataclass(frozen=True)
class EpochEvent:
    """An epoch's aggregates: ``train`` and ``valid`` map metric name -> value;
    ``formatted`` maps split -> name -> display string."""
    epoch: int
    num_epochs: int
    train: dict[str, float]
    valid: dict[str, float]
    formatted: dict[str, dict[str, str]] = field(default_factory=dict)
    seconds: float = 0.0
    checkpoint: str | None = None       # the checkpoint saved for this epoch, if any
    best_epoch: int | None = None


@dataclass(frozen=True)
class StartEvent:
    num_epochs: int
    start_epoch: int                    # 1 unless resumed
    train_metrics: list[str]
    valid_metrics: list[str]
    train_iterations: int | None
    valid_iterations: int | None
    resumed_from: str | None = None
    history: Any = None                 # MetricHistory of the epochs done before (resume)


@runtime_checkable
class RendererProtocol(Protocol):
    def on_train_item(self, event: ItemEvent) -> None: ...
    def on_valid_item(self, event: ItemEvent) -> None: ...
    def on_epoch_end(self, event: EpochEvent) -> None: ...
    def on_end(self, summary: Any) -> None: ...
    def should_stop(self) -> bool: ...


class Renderer:
    """Base class of renderers: every callback does nothing; ``should_stop`` is False."""

    def on_start(self, event: StartEvent) -> None:
        pass

    def on_train_item(self, event: ItemEvent) -> None:
        pass

    def on_valid_item(self, event: ItemEvent) -> None:
        pass

    def on_epoch_end(self, event: EpochEvent) -> None:
        pass

    def on_end(self, summary: Any) -> None:
        pass

    def should_stop(self) -> bool:
        return False

    def run(self, train: Callable[[], T]) -> T:
        return train()


class NullRenderer(Renderer):
    """Shows nothing (``renderer=None``)."""


class CallbackRenderer(Renderer):
    """A renderer from functions: ``CallbackRenderer(on_epoch_end=print)``; a missing
    callback does nothing; ``should_stop`` is a zero-argument function."""

    def __init__(self, *, on_start=None, on_train_item=None, on_valid_item=None,
                 on_epoch_end=None, on_end=None, should_stop=None):
        self._fns = dict(on_start=on_start, on_train_item=on_train_item,
                         on_valid_item=on_valid_item, on_epoch_end=on_epoch_end, on_end=on_end)
        self._stop = should_stop

    def on_start(self, event):
        if self._fns["on_start"]:
            self._fns["on_start"](event)

    def on_train_item(self, event):
        if self._fns["on_train_item"]:
            self._fns["on_train_item"](event)

    def on_valid_item(self, event):
        if self._fns["on_valid_item"]:
            self._fns["on_valid_item"](event)

    def on_epoch_end(self, event):
        if self._fns["on_epoch_end"]:
            self._fns["on_epoch_end"](event)

    def on_end(self, summary):
        if self._fns["on_end"]:
            self._fns["on_end"](summary)

    def should_stop(self):
        return bool(self._stop()) if self._stop else False
