"""A convolutional network learns the bundled 8x8 handwritten digits with the `Learner`.

This is the guide to ember's training stack: it walks through a model (`em.Module` with a
config), a dataset and a `DataLoader`, an optimizer with a learning-rate schedule, the
`Learner` with metrics and checkpoints, and, after training, validation and a saved record.

    python examples/digits_cnn.py                       # 8 epochs, about 97-98% accuracy
    python examples/digits_cnn.py --epochs 1 --limit 200 --renderer plain   # a quick look
    python examples/digits_cnn.py --device cuda         # on a GPU

In a terminal the Learner shows a live dashboard (q stops training, after saving a
checkpoint); `--renderer plain` prints lines instead. Run it again with `--resume` to
continue from the last checkpoint in `--artifact-dir`.
"""
from __future__ import annotations

import argparse
import os
import tempfile

import ember as em
from ember import nn, optim
from ember.data import ClassificationBatcher, DataLoader, DigitsDataset
from ember.train import Accuracy, ClassificationModel, Learner, Loss


# -- 1. The model ----------------------------------------------------------------------------
# A module is a plain Python class: the params and sub-modules assigned in __init__ are found
# by walking the attributes (in definition order), so there is nothing to register.
# `ClassificationModel` adds `train_step` / `valid_step`, which the Learner calls: they read
# (images, targets) from a batch, call `forward`, and score the logits with cross-entropy.
class DigitsCNN(em.Module, ClassificationModel):
    """conv 3x3 -> relu -> max-pool, twice ([1, 8, 8] -> [c1, 4, 4] -> [c2, 2, 2]), then
    dropout and a linear layer to the 10 class logits: the network `ember demo` trains,
    with dropout added."""

    def __init__(self, channels: tuple[int, int] = (16, 32), dropout: float = 0.1, *,
                 device=None):
        c1, c2 = channels
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1, device=device)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1, device=device)
        self.pool = nn.MaxPool2d(2)
        self.dropout = nn.Dropout(dropout)      # active in training, off after .valid()
        self.fc = nn.Linear(c2 * 2 * 2, 10, device=device)

    def forward(self, images):                  # images: [batch, 1, 8, 8]
        x = self.pool(self.conv1(images).relu())
        x = self.pool(self.conv2(x).relu())
        x = x.reshape(x.shape[0], -1)           # [batch, c2 * 2 * 2]
        return self.fc(self.dropout(x))         # logits: [batch, 10]


# A config is a dataclass that saves to and loads from JSON; `init(device)` builds the model,
# so an experiment's shape is one small file next to its checkpoints.
@em.config
class DigitsCNNConfig:
    channels: tuple = (16, 32)
    dropout: float = 0.1

    def init(self, device) -> DigitsCNN:
        return DigitsCNN(tuple(self.channels), self.dropout, device=device)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    p.add_argument("--limit", type=int, default=None,
                   help="train on the first N training images only (a quick run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--renderer", default="auto", choices=["auto", "plain", "dashboard", "none"],
                   help="auto: the dashboard in a terminal, plain lines otherwise")
    p.add_argument("--artifact-dir", default=None,
                   help="checkpoints, metric logs and the summary (default: a temporary "
                        "directory, removed at the end)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the last checkpoint in --artifact-dir")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    args = p.parse_args(argv)
    if args.resume and args.artifact_dir is None:
        p.error("--resume needs --artifact-dir")

    # -- 2. Devices --------------------------------------------------------------------------
    # `em.device(name)` is "cpu" or "cuda" ("cuda:1", ...): the same code runs on either. An
    # unusable one raises an ember error that says why. The model trains on the autodiff
    # device; `ad.seed` makes its initialization and dropout reproducible. Validation runs on
    # the same device without autodiff (`model.valid()`).
    try:
        device = em.device(args.device)
    except em.errors.EmberError as e:      # no such device, or not usable here: say why
        p.exit(2, f"{p.prog}: error: --device {args.device}: {e}\n")
    ad = device.autodiff()
    ad.seed(args.seed)

    # -- 3. Data -----------------------------------------------------------------------------
    # DigitsDataset: the 1,797 bundled images, split 80/20 by a seed; each item is
    # (image [8, 8] float32 in [0, 1], label int). The batcher stacks items into a
    # ClassificationBatch(images [B, 1, 8, 8] f32, targets [B] i64) on the loader's device.
    train_set = DigitsDataset("train", normalize=True, seed=args.seed)
    valid_set = DigitsDataset("test", normalize=True, seed=args.seed)
    if args.limit:
        train_set = train_set[:args.limit]      # a slice of a dataset is a lazy view
    batcher = ClassificationBatcher(channels_first=True)
    train_loader = DataLoader(train_set, batcher, args.batch_size, shuffle=True,
                              seed=args.seed, device=ad)
    valid_loader = DataLoader(valid_set, batcher, 256, shuffle=False, device=ad)

    # -- 4. Model, optimizer, schedule -------------------------------------------------------
    config = DigitsCNNConfig()
    model = config.init(ad)
    print(model)
    print(f"{model.num_params()} parameters, {len(train_set)} training and "
          f"{len(valid_set)} validation images")
    # AdamW; the optimizer returns a NEW model at each step (`model = opt.step(lr, model,
    # grads)`) and keeps its moments keyed by each param's stable id.
    optimizer = optim.AdamW(weight_decay=1e-4)
    # The schedule steps once per optimizer step: cosine from lr down to lr / 20.
    steps = args.epochs * len(train_loader)
    schedule = optim.CosineAnnealingLr(args.lr, steps, min_lr=args.lr / 20)

    # -- 5. The Learner ----------------------------------------------------------------------
    # Each epoch: every training batch (train_step -> gradients -> optimizer step), then every
    # validation batch with model.valid() under em.no_grad(); the metrics are logged per
    # epoch, a checkpoint (model, optimizer, schedule, loader position) is written atomically
    # to artifact_dir/checkpoint, and the renderer shows progress.
    tmp = None
    artifact_dir = args.artifact_dir
    if artifact_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="ember-digits-")
        artifact_dir = tmp.name
    else:
        os.makedirs(artifact_dir, exist_ok=True)
        config.save(os.path.join(artifact_dir, "config.json"))
    learner = Learner(
        model, optimizer, schedule,
        train_loader=train_loader, valid_loader=valid_loader,
        metrics=[Loss(), Accuracy()],
        artifact_dir=artifact_dir, num_epochs=args.epochs,
        resume=args.resume, seed=args.seed,
        renderer=None if args.renderer == "none" else args.renderer,
    )
    result = learner.fit()                      # prints the summary table at the end
    model = result.model

    # -- 6. After training -------------------------------------------------------------------
    # model.valid(): params on the plain device (no autodiff) and dropout off. Predict a few
    # images.
    evaluator = model.valid()
    images, labels = valid_set.images[valid_set.indices[:10]], valid_set.labels[
        valid_set.indices[:10]]
    with em.no_grad():
        logits = evaluator(em.tensor(images[:, None], device=device))
    print("predicted:", logits.argmax(dim=1).tolist())
    print("true:     ", labels.tolist())

    # Save the trained weights as a record (safetensors) and load them into a fresh model.
    path = os.path.join(artifact_dir, "digits_cnn.safetensors")
    model.save(path)
    restored = config.init(device).load_record(path)
    with em.no_grad():
        same = em.tensor(images[:, None], device=device)
        assert restored.valid()(same).argmax(dim=1).tolist() == logits.argmax(dim=1).tolist()
    print(f"saved the model to {path}" if tmp is None else "saved and reloaded the model")

    history = result.summary.history
    out = {
        "train_loss": [v for _, v in history.values("train", "loss")],
        "valid_loss": [v for _, v in history.values("valid", "loss")],
        "valid_accuracy": [v for _, v in history.values("valid", "accuracy")],
        "device": str(device),
        "model": model,
    }
    if tmp is not None:
        tmp.cleanup()
    return out


if __name__ == "__main__":
    main()
