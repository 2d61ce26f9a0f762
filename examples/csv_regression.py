"""Regression from a CSV file: an MLP learns a noisy known function of three features.

The example writes its own data first (`y = sin(2 x1) + 0.5 x2^2 - x1 x3 + noise`, 2,000
rows), then reads it back with `CsvDataset`, standardizes the features, and trains with the
`Learner`. The model's `train_step`/`valid_step` return a `RegressionOutput` (loss,
predictions, targets), which the loss metric reads.

    python examples/csv_regression.py                      # 30 epochs, valid MSE near the noise
    python examples/csv_regression.py --epochs 2 --limit 400 --renderer plain
    python examples/csv_regression.py --device cuda        # on a GPU
"""
from __future__ import annotations

import argparse
import csv
import os
import tempfile

import numpy as np

import ember as em
from ember import nn, optim
from ember.data import CsvDataset, DataLoader, TensorBatcher
from ember.train import Learner, Loss, RegressionOutput, TrainOutput

FEATURES = ("x1", "x2", "x3")
NOISE_STD = 0.1


def write_csv(path: str, n: int, seed: int) -> None:
    """``n`` rows of ``x1,x2,x3,y`` with the features uniform in [-2, 2]."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2.0, 2.0, (n, 3))
    y = np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] ** 2 - x[:, 0] * x[:, 2]
    y += NOISE_STD * rng.standard_normal(n)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*FEATURES, "y"])
        for row, target in zip(x, y):
            w.writerow([f"{v:.6f}" for v in row] + [f"{target:.6f}"])


class Regressor(em.Module):
    """An MLP from the features to one output, with its own training and validation steps:
    the Learner calls ``train_step(batch) -> TrainOutput`` and ``valid_step(batch) -> item``.
    (``ember.train.RegressionModel`` is a mixin that writes the same two methods.)"""

    def __init__(self, d_in: int, hidden: int = 64, *, device=None):
        self.layers = [nn.Linear(d_in, hidden, device=device),
                       nn.Linear(hidden, hidden, device=device),
                       nn.Linear(hidden, 1, device=device)]
        self.loss_fn = nn.MseLoss()

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = nn.functional.gelu(layer(x))
        return self.layers[-1](x)

    def _output(self, batch) -> RegressionOutput:
        features, targets = batch               # the TensorBatcher's (x [B, 3], y [B, 1])
        pred = self(features)
        return RegressionOutput(self.loss_fn(pred, targets), pred, targets)

    def train_step(self, batch) -> TrainOutput:
        item = self._output(batch)
        # TrainOutput.new keys the gradients of loss.backward() by this model's params.
        return TrainOutput.new(self, item.loss.backward(), item)

    def valid_step(self, batch) -> RegressionOutput:
        return self._output(batch)              # run on model.valid(), under em.no_grad()


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--rows", type=int, default=2000, help="rows the CSV gets (default 2000)")
    p.add_argument("--limit", type=int, default=None, help="train on N rows only")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--csv", default=None, help="where to write the data (default: a "
                                               "temporary file)")
    p.add_argument("--renderer", default="auto", choices=["auto", "plain", "dashboard", "none"])
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    args = p.parse_args(argv)
    try:
        device = em.device(args.device)
    except em.errors.EmberError as e:      # no such device, or not usable here: say why
        p.exit(2, f"{p.prog}: error: --device {args.device}: {e}\n")

    tmp = tempfile.TemporaryDirectory(prefix="ember-csv-")
    path = args.csv or os.path.join(tmp.name, "data.csv")
    write_csv(path, args.rows, args.seed)

    # Read the file: typed columns, checked once; items are dicts {"x1": ..., "y": ...}.
    table = CsvDataset(path, {"x1": float, "x2": float, "x3": float, "y": float})
    print(f"read {len(table)} rows of {table.column_names} from {path}")

    # A seeded shuffle, then 80% for training and 20% for validation (lazy views).
    rows = table.shuffled(args.seed)
    n_train = int(0.8 * len(rows))
    train_rows, valid_rows = rows[:n_train], rows[n_train:]
    if args.limit:
        train_rows = train_rows[:args.limit]

    # Standardize the features with the training rows' mean and std, in a map transform
    # that turns each dict into (features [3] float32, target [1] float32).
    x_train = np.array([[r[c] for c in FEATURES] for r in train_rows])
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)

    def to_pair(r):
        x = (np.array([r[c] for c in FEATURES]) - mean) / std
        return x.astype(np.float32), np.array([r["y"]], dtype=np.float32)

    ad = device.autodiff()
    ad.seed(args.seed)
    batcher = TensorBatcher()                   # stacks (x, y) items into (X [B, 3], Y [B, 1])
    train_loader = DataLoader(train_rows.map(to_pair), batcher, args.batch_size,
                              shuffle=True, seed=args.seed, device=ad)
    valid_loader = DataLoader(valid_rows.map(to_pair), batcher, 256, shuffle=False, device=ad)

    model = Regressor(len(FEATURES), device=ad)
    steps = args.epochs * len(train_loader)
    learner = Learner(model, optim.Adam(), optim.CosineAnnealingLr(args.lr, steps),
                      train_loader=train_loader, valid_loader=valid_loader,
                      metrics=[Loss()], num_epochs=args.epochs, seed=args.seed,
                      renderer=None if args.renderer == "none" else args.renderer)
    result = learner.fit()

    # How good is it? The noise alone costs NOISE_STD^2; predicting the mean costs var(y).
    y_valid = np.array([r["y"] for r in valid_rows])
    history = result.summary.history
    valid_mse = history.values("valid", "loss")[-1][1]
    print(f"valid MSE {valid_mse:.4f}; predicting the mean: {y_valid.var():.4f}; the noise "
          f"alone: {NOISE_STD ** 2:.4f}")
    tmp.cleanup()
    return {"train_loss": [v for _, v in history.values("train", "loss")],
            "valid_loss": [v for _, v in history.values("valid", "loss")],
            "baseline_mse": float(y_valid.var()), "noise_mse": NOISE_STD ** 2,
            "device": str(device), "model": result.model}


if __name__ == "__main__":
    main()
