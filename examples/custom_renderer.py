"""A renderer of your own: the `Learner` reports its progress as JSON lines.

The Learner tells a renderer what happens through a few methods (the renderer protocol,
`ember.train.renderer`): `on_start`, `on_train_item` after every training step,
`on_valid_item` after every validation step, `on_epoch_end`, `on_end`, and it polls
`should_stop()` after every step. Any object with these methods is a renderer; no base class
is needed (`ember.train.Renderer` is one with no-op methods, to subclass when you only want
some of them). This one writes one JSON object per line, for a log collector or a script to
read, and stops training after `--max-steps` optimizer steps.

    python examples/custom_renderer.py                      # JSON lines on stdout
    python examples/custom_renderer.py --out run.jsonl --every 10 --max-steps 100
    python examples/custom_renderer.py --device cuda        # on a GPU
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import ember as em
from ember import nn, optim
from ember.data import ClassificationBatcher, DataLoader, DigitsDataset
from ember.train import ClassificationModel, Learner


class JsonLinesRenderer:
    """Writes ``{"event": ..., ...}`` lines to ``file``: ``start``; ``train`` every ``every``
    steps (the step's metric values); ``epoch`` (the epoch's aggregates of both splits);
    ``end`` (the summary). With ``max_steps``, asks the Learner to stop after that many
    optimizer steps (it then saves a checkpoint when it has an artifact dir, and returns)."""

    def __init__(self, file=None, *, every: int = 20, max_steps: int | None = None):
        self.file = file
        self.every = every
        self.max_steps = max_steps
        self.steps = 0
        self.t0 = time.perf_counter()

    def _emit(self, event: str, **fields) -> None:
        f = self.file or sys.stdout
        f.write(json.dumps({"event": event, "time": round(time.perf_counter() - self.t0, 4),
                            **fields}) + "\n")
        f.flush()

    # -- the protocol ------------------------------------------------------------------------
    def on_start(self, event) -> None:                      # optional
        self.t0 = time.perf_counter()
        self._emit("start", epochs=event.num_epochs, start_epoch=event.start_epoch,
                   train_metrics=event.train_metrics, valid_metrics=event.valid_metrics,
                   batches_per_epoch=event.train_iterations)

    def on_train_item(self, event) -> None:
        p = event.progress
        self.steps = p.global_step
        if p.iteration % self.every == 0:
            self._emit("train", epoch=p.epoch, iteration=p.iteration, step=p.global_step,
                       **{name: m.value for name, m in event.metrics.items()})

    def on_valid_item(self, event) -> None:
        pass                                                # the epoch line has the totals

    def on_epoch_end(self, event) -> None:
        self._emit("epoch", epoch=event.epoch, train=event.train, valid=event.valid,
                   seconds=round(event.seconds, 4))

    def on_end(self, summary) -> None:
        self._emit("end", stopped=summary.stopped, epochs_done=summary.epochs_done,
                   seconds=round(summary.seconds, 4))

    def should_stop(self) -> bool:
        return self.max_steps is not None and self.steps >= self.max_steps


class Mlp(em.Module, ClassificationModel):
    def __init__(self, hidden: int = 64, *, device=None):
        self.fc1 = nn.Linear(64, hidden, device=device)
        self.fc2 = nn.Linear(hidden, 10, device=device)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--limit", type=int, default=None, help="train on N images only")
    p.add_argument("--every", type=int, default=20, help="a train line every N steps")
    p.add_argument("--max-steps", type=int, default=None, help="stop after N steps")
    p.add_argument("--out", default=None, help="write the lines to this file (default "
                                               "stdout)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    args = p.parse_args(argv)
    try:
        device = em.device(args.device)
    except em.errors.EmberError as e:      # no such device, or not usable here: say why
        p.exit(2, f"{p.prog}: error: --device {args.device}: {e}\n")

    ad = device.autodiff()
    ad.seed(args.seed)
    train_set = DigitsDataset("train", normalize=True, flatten=True, seed=args.seed)
    valid_set = DigitsDataset("test", normalize=True, flatten=True, seed=args.seed)
    if args.limit:
        train_set = train_set[:args.limit]
    train_loader = DataLoader(train_set, ClassificationBatcher(), 32, seed=args.seed,
                              device=ad)
    valid_loader = DataLoader(valid_set, ClassificationBatcher(), 256, shuffle=False,
                              device=ad)

    out = open(args.out, "w") if args.out else None
    try:
        renderer = JsonLinesRenderer(out, every=args.every, max_steps=args.max_steps)
        learner = Learner(Mlp(device=ad), optim.Adam(), 3e-3, train_loader=train_loader,
                          valid_loader=valid_loader, num_epochs=args.epochs,
                          renderer=renderer, summary=False)
        result = learner.fit()
    finally:
        if out is not None:
            out.close()
    return {"stopped": result.summary.stopped, "steps": renderer.steps,
            "epochs_done": result.summary.epochs_done, "device": str(device),
            "model": result.model}


if __name__ == "__main__":
    main()
