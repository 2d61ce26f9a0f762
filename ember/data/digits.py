"""The bundled 8x8 digits (`ember.datasets.load_digits`) as a `Dataset`."""
from __future__ import annotations

import numpy as np

from ..errors import DatasetError
from .dataset import Dataset

__all__ = ["DigitsDataset"]


class DigitsDataset(Dataset):
    """The 1,797 bundled 8x8 handwritten digits; item ``i`` is ``(image, label)``: a float32
    array of shape [8, 8] (or [64] with ``flatten=True``) and an int in 0..9.

    Pixels are counts 0..16, or 0..1 with ``normalize=True``. ``split="train"`` or ``"test"``
    takes a seeded random split with ``test_fraction`` of the samples in "test" (the same
    seed always gives the same split, and the two splits never overlap); ``split=None``
    keeps all samples in file order."""

    __slots__ = ("images", "labels", "indices", "split")

    def __init__(self, split: str | None = None, *, flatten: bool = False,
                 normalize: bool = False, test_fraction: float = 0.2, seed: int = 0):
        from ..datasets import load_digits
        images, labels = load_digits(flatten=flatten)
        if normalize:
            images = images / np.float32(16.0)
        n = len(labels)
        if split is None:
            idx = np.arange(n)
        elif split in ("train", "test"):
            if not 0.0 < test_fraction < 1.0:
                raise DatasetError(f"DigitsDataset: test_fraction must be in (0, 1), got "
                                   f"{test_fraction}")
            perm = np.random.default_rng(seed).permutation(n)
            n_test = int(round(n * test_fraction))
            idx = np.sort(perm[:n_test] if split == "test" else perm[n_test:])
        else:
            raise DatasetError(f"DigitsDataset: split must be None, 'train' or 'test', got "
                               f"{split!r}")
        self.images, self.labels, self.indices, self.split = images, labels, idx, split

    def __len__(self) -> int:
        return len(self.indices)

    def get(self, index: int):
        if not 0 <= index < len(self.indices):
            return None
        j = self.indices[index]
        return self.images[j], int(self.labels[j])

    def __repr__(self) -> str:
        return f"DigitsDataset(split={self.split!r}, len={len(self)})"
