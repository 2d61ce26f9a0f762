"""A training loop written by hand, without the `Learner`: every step in plain sight.

An MLP classifies the bundled digits. Each step: a batch from the `DataLoader`, the forward
pass and the loss on the autodiff device, `loss.backward()` (a `Gradients` value; nothing is
mutated), `GradientsParams.from_grads` (the gradients keyed by each param's stable id),
gradient clipping, and `optimizer.step`, which returns the updated model. After each epoch a
validation pass runs `model.valid()` (the params on the plain device, dropout off) under
`em.no_grad()`.

    python examples/custom_loop.py                 # 10 epochs, about 97% accuracy
    python examples/custom_loop.py --epochs 1 --limit 200
    python examples/custom_loop.py --device cuda   # on a GPU
"""
from __future__ import annotations

import argparse
import time

import ember as em
from ember import nn, optim
from ember.data import ClassificationBatcher, DataLoader, DigitsDataset


class Mlp(em.Module):
    def __init__(self, d_in: int = 64, hidden: int = 128, n_classes: int = 10,
                 dropout: float = 0.1, *, device=None):
        self.fc1 = nn.Linear(d_in, hidden, device=device)
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, n_classes, device=device)

    def forward(self, x):
        return self.fc2(self.dropout(self.fc1(x).relu()))


def evaluate(model, loader, loss_fn) -> tuple[float, float]:
    """Mean loss and accuracy of ``model`` (already ``.valid()``) over ``loader``."""
    total_loss, correct, n = 0.0, 0, 0
    with em.no_grad():
        for images, targets in loader:
            logits = model(images)
            total_loss += loss_fn(logits, targets).item() * len(targets)
            correct += int((logits.argmax(dim=1) == targets).sum().item())
            n += len(targets)
    return total_loss / n, correct / n


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--limit", type=int, default=None, help="train on N images only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    args = p.parse_args(argv)
    try:
        device = em.device(args.device)
    except em.errors.EmberError as e:      # no such device, or not usable here: say why
        p.exit(2, f"{p.prog}: error: --device {args.device}: {e}\n")

    ad = device.autodiff()                 # training: gradients tracked
    ad.seed(args.seed)

    train_set = DigitsDataset("train", normalize=True, flatten=True, seed=args.seed)
    valid_set = DigitsDataset("test", normalize=True, flatten=True, seed=args.seed)
    if args.limit:
        train_set = train_set[:args.limit]
    batcher = ClassificationBatcher()      # -> (images [B, 64] f32, targets [B] i64)
    train_loader = DataLoader(train_set, batcher, args.batch_size, shuffle=True,
                              seed=args.seed, device=ad)
    valid_loader = DataLoader(valid_set, batcher, 256, shuffle=False, device=device)

    model = Mlp(device=ad)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = optim.Adam(lr=args.lr)
    history = {"train_loss": [], "valid_loss": [], "valid_accuracy": []}

    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        model = model.train()              # training mode: dropout on
        total, n = 0.0, 0
        for images, targets in train_loader:      # each iteration is the next epoch's order
            loss = loss_fn(model(images), targets)
            grads = loss.backward()                          # Gradients: a value
            grads = em.GradientsParams.from_grads(grads, model)  # param id -> gradient
            grads, norm = optim.clip_grad_norm(grads, max_norm=1.0)
            model = optimizer.step(args.lr, model, grads)    # a NEW model; the old is intact
            total += loss.item() * len(targets)
            n += len(targets)
        train_loss = total / n
        valid_loss, acc = evaluate(model.valid(), valid_loader, loss_fn)
        history["train_loss"].append(train_loss)
        history["valid_loss"].append(valid_loss)
        history["valid_accuracy"].append(acc)
        print(f"epoch {epoch:>2}/{args.epochs}  train loss {train_loss:.4f}  "
              f"valid loss {valid_loss:.4f}  valid accuracy {acc:6.1%}  "
              f"({time.perf_counter() - t0:.2f} s)")

    history["device"] = str(device)
    history["model"] = model
    return history


if __name__ == "__main__":
    main()
