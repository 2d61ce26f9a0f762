"""Training: the `Learner` (metrics, checkpoints, resume, early stopping, metric logs, a
summary) and its renderers (a Textual dashboard, plain lines). Built on the public Tensor,
Module and optimizer APIs only."""
from .checkpoint import CheckpointConfig, Checkpointer, CheckpointInfo
from .early_stopping import EarlyStopping
from .learner import Learner, LearnerBuilder, TrainingResult
from .logger import MetricLogger
from .metrics import (Accuracy, CpuMemory, CpuUse, F1Score, IterationSpeed, LearningRate,
                      Loss, Metric, MetricContext, Precision, Recall, TopKAccuracy,
                      metric_from_name)
from .outputs import (ClassificationModel, ClassificationOutput, RegressionModel,
                      RegressionOutput, TrainOutput, split_batch)
from .renderer import (CallbackRenderer, EpochEvent, ItemEvent, MetricUpdate, NullRenderer,
                       PlainRenderer, Progress, Renderer, StartEvent)
from .summary import MetricHistory, TrainingSummary


def __getattr__(name):
    if name == "DashboardRenderer":
        from .renderer.dashboard import DashboardRenderer
        return DashboardRenderer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Learner", "LearnerBuilder", "TrainingResult", "CheckpointConfig",
    "Checkpointer", "CheckpointInfo", "EarlyStopping", "MetricLogger", "Metric",
    "MetricContext", "Loss", "Accuracy", "TopKAccuracy", "Precision", "Recall", "F1Score",
    "LearningRate", "IterationSpeed", "CpuUse", "CpuMemory", "metric_from_name",
    "TrainOutput", "ClassificationOutput", "RegressionOutput", "ClassificationModel",
    "RegressionModel", "split_batch", "Renderer", "PlainRenderer", "DashboardRenderer",
    "NullRenderer", "CallbackRenderer", "Progress", "MetricUpdate", "ItemEvent",
    "EpochEvent", "StartEvent", "MetricHistory", "TrainingSummary",
]
