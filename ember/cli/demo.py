"""`ember demo`: a small CNN learns the bundled 8x8 digits with the `Learner` on the CPU —
a terminal dashboard when stdout is a terminal, one line per epoch otherwise (``--plain``) —
then classifies a few held-out digits.

Everything is the public API: `ember.nn` layers, an `ember.optim` optimizer and schedule,
`ember.data` loaders and `ember.train.Learner` with its metrics, checkpoints and resume.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

N_CLASSES = 10
SHADES = " .:-=+*#%@"


def _model_class():
    import ember as em
    from ember import nn
    from ember.train import ClassificationModel

    class DigitsCnn(em.Module, ClassificationModel):
        """conv 3x3 (1 -> c) + relu + max-pool 2, conv 3x3 (c -> 2c) + relu + max-pool 2,
        linear (2c * 2 * 2 -> 10): about 7k parameters for c = 16."""

        def __init__(self, channels: int = 16, *, device=None):
            self.conv1 = nn.Conv2d(1, channels, 3, padding=1, device=device)
            self.conv2 = nn.Conv2d(channels, 2 * channels, 3, padding=1, device=device)
            self.pool = nn.MaxPool2d(2)
            self.fc = nn.Linear(2 * channels * 2 * 2, N_CLASSES, device=device)

        def forward(self, x):                       # x: [batch, 1, 8, 8]
            x = self.pool(self.conv1(x).relu())     # [batch, c, 4, 4]
            x = self.pool(self.conv2(x).relu())     # [batch, 2c, 2, 2]
            return self.fc(x.reshape(x.shape[0], -1))

    return DigitsCnn


def default_artifact_dir() -> str:
    user = os.environ.get("USER") or os.environ.get("USERNAME") or str(os.getuid()) \
        if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"ember-demo-{user}")


def _metrics():
    from ember.train import Accuracy, F1Score, IterationSpeed, LearningRate, Loss
    ms = [Loss(), Accuracy(), F1Score(), LearningRate(), IterationSpeed()]
    try:
        from ember.train import CpuMemory, CpuUse
        ms += [CpuUse(), CpuMemory()]
    except ImportError:            # psutil is part of the `train` extra
        pass
    return ms


def train(*, epochs: int = 8, batch_size: int = 32, lr: float = 0.01, channels: int = 16,
          seed: int = 0, renderer="auto", artifact_dir=None, resume: bool = False,
          log=print) -> dict:
    """Train the digits CNN; returns ``{"result": TrainingResult, "model", "loss": [train
    loss per epoch], "val_accuracy": [fractions per epoch], "seconds", "n_val",
    "valid_set"}``. ``renderer``: "auto", "plain", "dashboard", None or a renderer.
    ``artifact_dir``: checkpoints and logs (None: a temporary directory, removed after)."""
    import ember as em
    import ember.optim as optim
    from ember.data import DataLoader
    from ember.data.digits import DigitsDataset
    from ember.data.loader import ClassificationBatcher
    from ember.train import CheckpointConfig, Learner

    dev = em.device("cpu")
    dev.seed(seed)
    model = _model_class()(channels, device=dev)
    train_set = DigitsDataset("train", normalize=True, seed=seed)
    valid_set = DigitsDataset("test", normalize=True, seed=seed)
    batcher = ClassificationBatcher(channels_first=True)          # [B, 8, 8] -> [B, 1, 8, 8]
    train_loader = DataLoader(train_set, batcher, batch_size, shuffle=True, seed=seed,
                              device=dev)
    valid_loader = DataLoader(valid_set, batcher, 512, shuffle=False, device=dev)
    schedule = optim.CosineAnnealingLr(lr, num_iters=epochs * len(train_loader))

    tmp = None
    if artifact_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="ember-demo-")
        artifact_dir = tmp.name
    if log:
        log(f"ember demo: a CNN ({model.num_params():,} parameters) learns the 8x8 digits "
            f"(UCI, CC BY 4.0) on {dev}")
        log(f"{len(train_set)} training and {len(valid_set)} validation samples, batch "
            f"{batch_size}, Adam with a cosine schedule from lr {lr}, {epochs} epochs")
    learner = Learner(
        model, optim.Adam(), schedule, train_loader=train_loader, valid_loader=valid_loader,
        metrics=_metrics(), artifact_dir=artifact_dir, num_epochs=epochs,
        checkpoint=CheckpointConfig(keep_last=2, best_metric="accuracy"), resume=resume,
        renderer=renderer, seed=seed, summary=False)
    start = time.perf_counter()
    try:
        result = learner.fit()
    finally:
        if tmp is not None:
            tmp.cleanup()
    seconds = time.perf_counter() - start
    h = result.summary.history
    return {"result": result, "model": result.model, "learner": learner,
            "loss": [v for _, v in h.values("train", "loss")],
            "val_accuracy": [v / 100.0 for _, v in h.values("valid", "accuracy")],
            "seconds": seconds, "n_val": len(valid_set), "valid_set": valid_set,
            "artifact_dir": None if tmp is not None else artifact_dir}


def predict(model, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(classes, confidences)`` for images [N, 8, 8] in 0..1, with the model's validation
    form (no autodiff)."""
    import ember as em
    net = model.valid()
    dev = net.devices()[0]
    with em.no_grad():
        logits = net(em.tensor(images[:, None].astype(np.float32), device=dev))
        probs = logits.softmax(dim=1).numpy()
    return probs.argmax(axis=1), probs.max(axis=1)


def inference_text(model, valid_set, n: int = 8) -> str:
    """The first ``n`` held-out digits drawn in characters, with the true and the predicted
    class under each."""
    n = min(n, len(valid_set))
    items = [valid_set.get(i) for i in range(n)]
    images = np.stack([img for img, _ in items])
    labels = np.array([lab for _, lab in items])
    pred, conf = predict(model, images)
    lines = [f"predictions on {n} held-out digits:"]
    for r in range(8):
        row = []
        for img in images:
            row.append("".join(SHADES[min(len(SHADES) - 1, int(v * (len(SHADES) - 1) + 0.5))]
                               for v in img[r]))
        lines.append("  " + "  ".join(row))
    lines.append("  " + "  ".join(f"true {t:<3}" for t in labels))
    lines.append("  " + "  ".join(f"pred {p:<3}" for p in pred))
    lines.append("  " + "  ".join(f"{'ok' if p == t else 'NO':<2} {c:>4.0%}".ljust(8)
                                  for p, t, c in zip(pred, labels, conf)))
    return "\n".join(lines)


def run_demo(*, plain: bool = False, samples: int = 8, **kwargs) -> int:
    """`ember demo`: train, print the summary and the predictions; the exit status."""
    renderer = "plain" if plain else "auto"
    h = train(renderer=renderer, **kwargs)
    result = h["result"]
    s = result.summary
    print(s.text())
    if result.interrupted:
        where = h["artifact_dir"]
        if where:
            print(f"stopped: the last checkpoint is in {os.path.join(where, 'checkpoint')}; "
                  f"run the same command with --resume to continue")
        else:
            print("stopped")
    acc = h["val_accuracy"][-1] if h["val_accuracy"] else float("nan")
    if h["val_accuracy"]:
        print(f"validation accuracy: {acc:.2%} ({round(acc * h['n_val'])} of {h['n_val']}) "
              f"after {s.epochs_done} epochs in {h['seconds']:.1f} s")
    if samples > 0:
        print(inference_text(h["model"], h["valid_set"], samples))
    if result.interrupted:
        learner = h["learner"]
        by_signal = learner.interrupted_by_signal or getattr(
            getattr(learner, "_renderer", None), "interrupted_by_signal", False)
        return 130 if by_signal else 0
    return 0


# -- a training step on the bare Tensor API ---------------------------------------------------
# The MLP of the first `ember demo`, kept because bench/overhead.py measures its training step
# (parameters as tensors, SGD by hand): the framework's per-op overhead without modules.
def init_params(dev, n_in: int, hidden: int, n_out: int) -> dict:
    """He-initialized weights ([in, out], Burn's convention) and zero biases, tracked."""
    import ember as em
    return {
        "w1": em.random((n_in, hidden), em.Normal(0.0, (2.0 / n_in) ** 0.5),
                        device=dev).require_grad(),
        "b1": em.zeros(hidden, device=dev).require_grad(),
        "w2": em.random((hidden, n_out), em.Normal(0.0, (2.0 / hidden) ** 0.5),
                        device=dev).require_grad(),
        "b2": em.zeros(n_out, device=dev).require_grad(),
    }


def forward(p: dict, x):
    """Logits of the MLP: linear, relu, linear."""
    h = (x @ p["w1"] + p["b1"]).relu()
    return h @ p["w2"] + p["b2"]


def cross_entropy(logits, targets_one_hot):
    """Mean negative log-likelihood of the one-hot targets."""
    n = logits.shape[0]
    return (logits.log_softmax(dim=1) * targets_one_hot).sum() * (-1.0 / n)


def sgd_step(p: dict, grads, lr: float, dev) -> dict:
    """New parameters ``w - lr * grad``, updated on the inner (untracked) device and made
    fresh leaves that require grad."""
    inner = dev.without_autodiff()
    return {k: (w.to_device(inner) - lr * w.grad(grads).to_device(inner))
            .to_device(dev).require_grad() for k, w in p.items()}
