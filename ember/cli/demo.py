"""`ember demo`: a small MLP learns the bundled 8x8 digits with autodiff, written with the
plain Tensor API (parameters as tensors, SGD by hand) so every step is visible."""
from __future__ import annotations

import time

import numpy as np

N_CLASSES = 10


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
    """New parameters ``w - lr * grad``. The update runs on the inner (untracked) device, so
    it records no graph; the results are fresh leaves that require grad."""
    inner = dev.without_autodiff()
    return {k: (w.to_device(inner) - lr * w.grad(grads).to_device(inner))
            .to_device(dev).require_grad() for k, w in p.items()}


def accuracy(p: dict, x, labels) -> float:
    """The fraction of samples whose largest logit is the label."""
    import ember as em
    with em.no_grad():
        pred = forward(p, x).argmax(dim=1)
        return float((pred == labels).float().mean().item())


def train(*, epochs: int = 20, batch_size: int = 32, lr: float = 0.1, hidden: int = 64,
          seed: int = 0, val_fraction: float = 0.2, log=print) -> dict:
    """Train on the digits; returns ``{"loss": [...per epoch], "val_accuracy": [...],
    "seconds": float}``. ``log`` receives one line per epoch (None for silence)."""
    import ember as em
    from ..datasets import load_digits

    images, labels = load_digits(flatten=True)
    x_all = images / np.float32(16.0)          # pixel counts 0..16 -> [0, 1]
    one_hot = np.eye(N_CLASSES, dtype=np.float32)[labels]
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(labels))
    n_val = int(round(len(labels) * val_fraction))
    val_idx, train_idx = perm[:n_val], perm[n_val:]

    dev = em.device("cpu").autodiff()
    dev.seed(seed)
    params = init_params(dev, x_all.shape[1], hidden, N_CLASSES)
    x_val = em.tensor(x_all[val_idx], device=dev)
    y_val = em.tensor(labels[val_idx], device=dev)

    if log:
        log(f"ember demo: a {x_all.shape[1]}-{hidden}-{N_CLASSES} MLP learns the 8x8 digits "
            f"(UCI, CC BY 4.0) on {dev}")
        log(f"{len(train_idx)} training and {n_val} validation samples, batch {batch_size}, "
            f"SGD lr {lr}")
    history = {"loss": [], "val_accuracy": []}
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        order = rng.permutation(train_idx)
        total = 0.0
        for s in range(0, len(order), batch_size):
            idx = order[s:s + batch_size]
            xb = em.tensor(x_all[idx], device=dev)
            tb = em.tensor(one_hot[idx], device=dev)
            loss = cross_entropy(forward(params, xb), tb)
            grads = loss.backward()
            params = sgd_step(params, grads, lr, dev)
            total += loss.item() * len(idx)
        mean_loss = total / len(order)
        acc = accuracy(params, x_val, y_val) if n_val else float("nan")
        history["loss"].append(mean_loss)
        history["val_accuracy"].append(acc)
        if log:
            log(f"epoch {epoch:>3}/{epochs}  loss {mean_loss:.4f}  val accuracy {acc:6.1%}")
    history["seconds"] = time.perf_counter() - start
    history["n_val"] = n_val
    return history


def run_demo(**kwargs) -> dict:
    h = train(**kwargs)
    acc = h["val_accuracy"][-1] if h["val_accuracy"] else float("nan")
    print(f"validation accuracy: {acc:.1%} ({round(acc * h['n_val'])} of {h['n_val']}) "
          f"after {len(h['loss'])} epochs in {h['seconds']:.1f} s")
    return h
