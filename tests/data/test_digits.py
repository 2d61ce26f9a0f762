"""DigitsDataset wraps the bundled digits; a small end-to-end loader check."""
import numpy as np
import pytest

from ember import errors
from ember.data import ClassificationBatcher, DataLoader, DigitsDataset
from ember.datasets import load_digits


def test_digits_matches_load_digits():
    images, labels = load_digits()
    ds = DigitsDataset()
    assert len(ds) == 1797
    img, lab = ds[100]
    np.testing.assert_array_equal(img, images[100])
    assert lab == labels[100] and img.shape == (8, 8) and img.dtype == np.float32
    flat = DigitsDataset(flatten=True, normalize=True)
    np.testing.assert_allclose(flat[5][0], images[5].reshape(64) / 16)


def test_digits_splits_partition_and_are_seeded():
    train, test = DigitsDataset("train"), DigitsDataset("test")
    assert len(train) + len(test) == 1797 and len(test) == round(1797 * 0.2)
    assert set(train.indices).isdisjoint(test.indices)
    assert np.array_equal(DigitsDataset("test", seed=0).indices, test.indices)
    assert not np.array_equal(DigitsDataset("test", seed=1).indices, test.indices)
    with pytest.raises(errors.DatasetError):
        DigitsDataset("valid")
    with pytest.raises(errors.DatasetError):
        DigitsDataset("train", test_fraction=1.5)


def test_digits_through_loader():
    ds = DigitsDataset("test", flatten=True, normalize=True)
    loader = DataLoader(ds, ClassificationBatcher(), 64, seed=0, num_workers=2)
    seen = []
    for b in loader:
        assert tuple(b.images.shape)[1:] == (64,)
        seen.extend(b.targets.numpy().tolist())
    assert sorted(seen) == sorted(ds.labels[ds.indices].tolist())
