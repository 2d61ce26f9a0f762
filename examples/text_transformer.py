"""A small transformer classifies sentences whose meaning depends on word order.

The example makes its own data: sentences of a tiny vocabulary ("the movie was not good and
the cast was fine") labelled positive or negative by one sentiment word, which a "not"
directly before it flips. A "not" elsewhere in the sentence changes nothing, so counting
words cannot solve the task: the model has to see which word the "not" precedes.

Model: `nn.Embedding` + `nn.PositionalEncoding` + `nn.TransformerEncoder`, a mean over the
real (non-padding) tokens, and a `nn.Linear` to two logits. Sentences have different
lengths: a custom batcher pads them and passes the padding mask, which both the attention
(`mask_pad`) and the pooling respect. Trained with the `Learner`.

    python examples/text_transformer.py                 # 10 epochs, about 99% accuracy
    python examples/text_transformer.py --epochs 1 --limit 300 --renderer plain
    python examples/text_transformer.py --device cuda   # on a GPU
"""
from __future__ import annotations

import argparse
from typing import NamedTuple

import numpy as np

import ember as em
from ember import nn, optim
from ember.data import DataLoader, InMemoryDataset
from ember.train import ClassificationModel, ClassificationOutput, Learner

PAD = "<pad>"
POSITIVE = ["good", "great", "fun"]
NEGATIVE = ["bad", "dull", "awful"]
FILLER = ["the", "movie", "film", "plot", "cast", "was", "is", "and", "but", "really",
          "quite", "fine", "long", "today", "ending"]
VOCAB = [PAD, "not", *POSITIVE, *NEGATIVE, *FILLER]
INDEX = {w: i for i, w in enumerate(VOCAB)}
MAX_LEN = 16


def make_sentences(n: int, seed: int) -> list[tuple[list[int], int]]:
    """``n`` items ``(token ids, label)``: filler words around one sentiment word, maybe
    negated by a "not" right before it, maybe with a harmless "not" somewhere else.
    Label 1 = positive meaning."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        words = list(rng.choice(FILLER, size=rng.integers(2, 9)))
        positive = bool(rng.integers(2))
        sentiment = rng.choice(POSITIVE if positive else NEGATIVE)
        negated = bool(rng.integers(2))
        at = int(rng.integers(0, len(words) + 1))
        words[at:at] = ["not", sentiment] if negated else [sentiment]
        if rng.random() < 0.5:               # a "not" that negates nothing
            s = at + negated                 # where the sentiment word is
            free = [k for k in range(len(words) + 1) if k not in (s - negated, s)]
            words.insert(int(rng.choice(free)), "not")
        words = words[:MAX_LEN]
        out.append(([INDEX[w] for w in words], int(positive != negated)))
    return out


class TextBatch(NamedTuple):
    tokens: em.Tensor        # [B, L] i64, padded with 0
    mask_pad: em.Tensor      # [B, L] bool, True at padding
    targets: em.Tensor       # [B] i64


class PadBatcher:
    """A `Batcher`: pads a list of (token ids, label) items to the longest in the batch."""

    def batch(self, items, device) -> TextBatch:
        longest = max(len(t) for t, _ in items)
        tokens = np.zeros((len(items), longest), dtype=np.int64)
        for row, (t, _) in enumerate(items):
            tokens[row, :len(t)] = t
        labels = np.array([label for _, label in items], dtype=np.int64)
        return TextBatch(em.tensor(tokens, device=device),
                         em.tensor(tokens == 0, device=device),
                         em.tensor(labels, device=device))


class TextClassifier(em.Module, ClassificationModel):
    def __init__(self, vocab: int, d_model: int = 32, n_heads: int = 4, n_layers: int = 2,
                 dropout: float = 0.1, *, device=None):
        self.embed = nn.Embedding(vocab, d_model, device=device)
        self.pos = nn.PositionalEncoding(d_model, MAX_LEN, device=device)
        self.encoder = nn.TransformerEncoder(d_model, 2 * d_model, n_heads, n_layers,
                                             dropout, norm_first=True, device=device)
        self.norm = nn.LayerNorm(d_model, device=device)
        self.head = nn.Linear(d_model, 2, device=device)

    def forward(self, tokens, mask_pad):
        # The embeddings start N(0, 1), as large as the sinusoids, so they are not scaled
        # up by sqrt(d_model) (which would drown the positions the task depends on).
        x = self.pos(self.embed(tokens))                    # [B, L, D]
        x = self.norm(self.encoder(x, mask_pad=mask_pad))  # padding keys are not attended
        keep = (~mask_pad).float().unsqueeze(-1)           # [B, L, 1]: 1 at real tokens
        pooled = (x * keep).sum(dim=1) / keep.sum(dim=1)   # mean over real tokens: [B, D]
        return self.head(pooled)                            # [B, 2]

    # The ClassificationModel mixin reads (inputs, targets) from a batch; this batch has
    # two inputs, so say how to read it.
    def forward_classification(self, batch: TextBatch) -> ClassificationOutput:
        logits = self(batch.tokens, batch.mask_pad)
        return ClassificationOutput(nn.functional.cross_entropy(logits, batch.targets),
                                    logits, batch.targets)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--sentences", type=int, default=4000)
    p.add_argument("--limit", type=int, default=None, help="train on N sentences only")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--renderer", default="auto", choices=["auto", "plain", "dashboard", "none"])
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    args = p.parse_args(argv)
    try:
        device = em.device(args.device)
    except em.errors.EmberError as e:      # no such device, or not usable here: say why
        p.exit(2, f"{p.prog}: error: --device {args.device}: {e}\n")

    data = make_sentences(args.sentences, args.seed)
    n_train = int(0.8 * len(data))
    train_items, valid_items = data[:n_train], data[n_train:]
    if args.limit:
        train_items = train_items[:args.limit]
    for tokens, label in data[:3]:
        print(f"{'positive' if label else 'negative'}: {' '.join(VOCAB[t] for t in tokens)}")

    ad = device.autodiff()
    ad.seed(args.seed)
    train_loader = DataLoader(InMemoryDataset(train_items), PadBatcher(), args.batch_size,
                              shuffle=True, seed=args.seed, device=ad)
    valid_loader = DataLoader(InMemoryDataset(valid_items), PadBatcher(), 256, shuffle=False,
                              device=ad)

    model = TextClassifier(len(VOCAB), device=ad)
    print(f"{model.num_params()} parameters; {len(train_items)} training and "
          f"{len(valid_items)} validation sentences")
    steps = args.epochs * len(train_loader)
    # Warm up linearly for the first 10% of the steps, then decay with a cosine.
    warm = max(1, steps // 10)
    schedule = optim.SequentialLr([optim.LinearLr(args.lr / 10, args.lr, warm),
                                   optim.CosineAnnealingLr(args.lr, max(1, steps - warm))],
                                  [warm])
    learner = Learner(model, optim.AdamW(weight_decay=0.01), schedule,
                      train_loader=train_loader, valid_loader=valid_loader,
                      metrics=["loss", "accuracy"], num_epochs=args.epochs, seed=args.seed,
                      renderer=None if args.renderer == "none" else args.renderer)
    result = learner.fit()

    # The trained model on sentences that differ only in where "not" stands.
    evaluator = result.model.valid()
    probes = ["the movie was not good", "the movie was good not",
              "not the plot was bad", "the plot was not bad"]
    batch = PadBatcher().batch([([INDEX[w] for w in s.split()], 0) for s in probes],
                               evaluator.devices()[0])
    with em.no_grad():
        pred = evaluator(batch.tokens, batch.mask_pad).argmax(dim=1).tolist()
    for s, k in zip(probes, pred):
        print(f"  {s!r:30} -> {'positive' if k else 'negative'}")

    history = result.summary.history
    return {"train_loss": [v for _, v in history.values("train", "loss")],
            "valid_loss": [v for _, v in history.values("valid", "loss")],
            "valid_accuracy": [v for _, v in history.values("valid", "accuracy")],
            "device": str(device), "model": result.model}


if __name__ == "__main__":
    main()
