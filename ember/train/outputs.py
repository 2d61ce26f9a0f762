"""What a model's training and validation steps return (Burn's ``TrainOutput``,
``ClassificationOutput``, ``RegressionOutput``), and the `ClassificationModel` /
`RegressionModel` mixins that give a module default steps."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["TrainOutput", "ClassificationOutput", "RegressionOutput", "ClassificationModel",
           "RegressionModel", "split_batch"]


@dataclass
class ClassificationOutput:
    """``loss``: a scalar Tensor; ``output``: logits [batch, classes]; ``targets``: class
    indices [batch] (int)."""
    loss: Any
    output: Any
    targets: Any


@dataclass
class RegressionOutput:
    """``loss``: a scalar Tensor; ``output`` and ``targets``: predictions and targets of the
    same shape."""
    loss: Any
    output: Any
    targets: Any


class TrainOutput:
    """What ``train_step`` returns: the gradients and the item the metrics read.

    ``TrainOutput(grads, item)``: ``grads`` is a ``GradientsParams`` or the ``Gradients`` of
    ``loss.backward()`` (the Learner then keys them by the model's params).
    ``TrainOutput.new(model, loss.backward(), item)`` (Burn's form) converts at once."""

    __slots__ = ("grads", "item")

    def __init__(self, grads, item):
        self.grads = grads
        self.item = item

    @classmethod
    def new(cls, model, grads, item) -> "TrainOutput":
        from ..module import GradientsParams
        if not isinstance(grads, GradientsParams):
            grads = GradientsParams.from_grads(grads, model)
        return cls(grads, item)

    def __repr__(self):
        return f"TrainOutput(grads={self.grads!r}, item={type(self.item).__name__})"


_INPUT_NAMES = ("inputs", "input", "images", "image", "x", "features", "data")
_TARGET_NAMES = ("targets", "target", "labels", "label", "y")


def split_batch(batch) -> tuple[Any, Any]:
    """``(inputs, targets)`` of a batch: a 2-tuple/list, a dict or an object (dataclass,
    namedtuple) with an inputs field (``inputs``, ``images``, ``x``, ...) and a targets field
    (``targets``, ``labels``, ``y``, ...)."""
    if isinstance(batch, (tuple, list)) and not hasattr(batch, "_fields") and len(batch) == 2:
        return batch[0], batch[1]
    if isinstance(batch, dict):
        get = batch.get
    else:
        def get(name, default=None):
            return getattr(batch, name, default)
    x = next((get(n) for n in _INPUT_NAMES if get(n) is not None), None)
    y = next((get(n) for n in _TARGET_NAMES if get(n) is not None), None)
    if x is None or y is None:
        if isinstance(batch, tuple) and len(batch) == 2:      # a 2-field namedtuple
            return batch[0], batch[1]
        fields = list(batch) if isinstance(batch, dict) else (
            [f.name for f in dataclasses.fields(batch)] if dataclasses.is_dataclass(batch)
            else type(batch).__name__)
        raise TypeError(f"split_batch: cannot find inputs and targets in the batch ({fields}); "
                        f"use an (inputs, targets) pair or fields named one of {_INPUT_NAMES} "
                        f"and {_TARGET_NAMES}, or override forward_classification/"
                        f"forward_regression")
    return x, y


class ClassificationModel:
    """A mixin for `Module`s that classify: ``class Net(em.Module, ClassificationModel)``
    gets ``train_step`` and ``valid_step`` that call ``forward`` on the batch's inputs and
    score the logits with cross-entropy (``self.loss_fn`` when set, e.g.
    ``nn.CrossEntropyLoss(label_smoothing=0.1)``). Override ``forward_classification(batch)``
    to change how a batch is read."""

    def forward_classification(self, batch) -> ClassificationOutput:
        x, y = split_batch(batch)
        logits = self(x)
        loss_fn = getattr(self, "loss_fn", None)
        if loss_fn is None:
            from ..nn import CrossEntropyLoss
            loss_fn = CrossEntropyLoss()
        return ClassificationOutput(loss_fn(logits, y), logits, y)

    def train_step(self, batch) -> TrainOutput:
        item = self.forward_classification(batch)
        return TrainOutput.new(self, item.loss.backward(), item)

    def valid_step(self, batch) -> ClassificationOutput:
        return self.forward_classification(batch)


class RegressionModel:
    """Like `ClassificationModel`, for regression: mean squared error (``self.loss_fn``
    when set) between ``forward(inputs)`` and the targets."""

    def forward_regression(self, batch) -> RegressionOutput:
        x, y = split_batch(batch)
        out = self(x)
        loss_fn = getattr(self, "loss_fn", None)
        if loss_fn is None:
            from ..nn import MseLoss
            loss_fn = MseLoss()
        return RegressionOutput(loss_fn(out, y), out, y)

    def train_step(self, batch) -> TrainOutput:
        item = self.forward_regression(batch)
        return TrainOutput.new(self, item.loss.backward(), item)

    def valid_step(self, batch) -> RegressionOutput:
        return self.forward_regression(batch)
