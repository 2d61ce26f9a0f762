"""Small models and loaders shared by the training tests (fast: a few ms per step)."""
from __future__ import annotations

import numpy as np

import ember as em
import ember.optim as optim
from ember import nn
from ember.data import ClassificationBatcher, DataLoader, DigitsDataset
from ember.train import ClassificationModel, Learner


class Mlp(em.Module, ClassificationModel):
    def __init__(self, hidden=16, dropout=0.2, *, device=None):
        self.fc1 = nn.Linear(64, hidden, device=device)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, 10, device=device)

    def forward(self, x):
        return self.fc2(self.drop(self.fc1(x).relu()))


def loaders(batch=32, n_train=320, n_valid=96, shuffle=True, seed=0, valid=True):
    dev = em.device("cpu")
    tr = DigitsDataset("train", normalize=True, flatten=True, seed=0)
    va = DigitsDataset("test", normalize=True, flatten=True, seed=0)
    tr = tr.partial(0, n_train)
    va = va.partial(0, n_valid)
    b = ClassificationBatcher()
    tl = DataLoader(tr, b, batch, shuffle=shuffle, seed=seed, device=dev)
    vl = DataLoader(va, b, 64, shuffle=False, device=dev) if valid else None
    return tl, vl


def make_model(seed=0, **kw):
    dev = em.device("cpu")
    dev.seed(seed)
    return Mlp(device=dev, **kw)


def make_learner(artifact_dir, *, epochs=3, lr=None, optimizer=None, renderer=None,
                 seed=1, batch=32, n_train=320, shuffle=True, model=None, **kw):
    tl, vl = loaders(batch=batch, n_train=n_train, shuffle=shuffle)
    if lr is None:
        lr = optim.CosineAnnealingLr(3e-2, num_iters=epochs * len(tl))
    return Learner(model if model is not None else make_model(), optimizer or optim.Adam(), lr,
                   train_loader=tl, valid_loader=vl, artifact_dir=artifact_dir,
                   num_epochs=epochs, renderer=renderer, seed=seed, summary=False, **kw)


def weights(model) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in model.state_dict().items()}


def assert_same_weights(a, b, exact=True, rtol=1e-5, atol=1e-6):
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        if exact:
            assert np.array_equal(wa[k], wb[k]), (k, np.abs(wa[k] - wb[k]).max())
        else:
            np.testing.assert_allclose(wa[k], wb[k], rtol=rtol, atol=atol, err_msg=k)
