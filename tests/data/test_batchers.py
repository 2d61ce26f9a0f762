"""TensorBatcher and ClassificationBatcher against NumPy references."""
from typing import NamedTuple

import numpy as np
import pytest

import ember as em
from ember import errors
from ember.data import ClassificationBatch, ClassificationBatcher, TensorBatcher

CPU = em.device("cpu")


def test_tensor_batcher_structures():
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(4)]
    ys = [np.int32(k) for k in range(4)]
    b = TensorBatcher().batch(xs, CPU)
    assert tuple(b.shape) == (4, 2, 3) and b.dtype == em.f32
    np.testing.assert_array_equal(b.numpy(), np.stack(xs))
    x, y = TensorBatcher().batch(list(zip(xs, ys)), CPU)
    assert y.dtype == em.i32 and y.numpy().tolist() == [0, 1, 2, 3]
    d = TensorBatcher().batch([{"x": a, "y": k} for k, a in enumerate(xs)], CPU)
    assert set(d) == {"x", "y"} and d["y"].dtype == em.i64   # Python ints -> i64
    f = TensorBatcher().batch([0.5, 1.5], CPU)
    assert f.dtype == em.f32                                   # Python floats -> f32
    rows = TensorBatcher().batch([[1.0, 2.0], [3.0, 4.0]], CPU)
    assert tuple(rows.shape) == (2, 2)                         # a list of numbers is one array

    class Pair(NamedTuple):
        a: object
        b: object

    p = TensorBatcher().batch([Pair(xs[0], 1), Pair(xs[1], 2)], CPU)
    assert isinstance(p, Pair) and tuple(p.a.shape) == (2, 2, 3)
    t = TensorBatcher().batch([em.tensor([1.0, 2.0]), em.tensor([3.0, 4.0])], CPU)
    np.testing.assert_array_equal(t.numpy(), [[1, 2], [3, 4]])


def test_tensor_batcher_dtypes():
    items = [(np.ones(2, np.float64), 1), (np.zeros(2, np.float64), 0)]
    x, y = TensorBatcher(dtype=(em.f32, None)).batch(items, CPU)
    assert x.dtype == em.f32 and y.dtype == em.i64
    d = TensorBatcher(dtype={"x": em.f16}).batch([{"x": 1.0, "y": 2}], CPU)
    assert d["x"].dtype == em.f16 and d["y"].dtype == em.i64
    one = TensorBatcher(dtype=em.f64).batch([np.int8(3)], CPU)
    assert one.dtype == em.f64 and one.numpy().tolist() == [3.0]


def test_tensor_batcher_errors():
    with pytest.raises(errors.ShapeError, match=r"item 1 has shape \[3\] but item 0 has \[2\]"):
        TensorBatcher().batch([np.zeros(2), np.zeros(3)], CPU)
    with pytest.raises(errors.ShapeError, match="field 'x'"):
        TensorBatcher().batch([{"x": np.zeros(2)}, {"x": np.zeros(3)}], CPU)
    with pytest.raises(errors.ShapeError, match="item 1 has fields"):
        TensorBatcher().batch([{"x": 1}, {"y": 1}], CPU)
    with pytest.raises(errors.ShapeError, match="item 1 has 1 fields"):
        TensorBatcher().batch([(1, 2), (1,)], CPU)
    with pytest.raises(errors.ShapeError, match="zero items"):
        TensorBatcher().batch([], CPU)
    with pytest.raises(errors.DTypeError):
        TensorBatcher().batch([np.array(["a"], dtype=object)], CPU)


def test_classification_batcher_matches_numpy():
    rng = np.random.default_rng(1)
    imgs = [rng.integers(0, 256, (4, 5, 3), dtype=np.uint8) for _ in range(6)]
    labels = [int(v) for v in rng.integers(0, 10, 6)]
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    b = ClassificationBatcher(scale=1 / 255, mean=mean, std=std,
                              channels_first=True).batch(list(zip(imgs, labels)), CPU)
    assert isinstance(b, ClassificationBatch)
    ref = (np.stack(imgs).astype(np.float64) / 255 - np.array(mean)) / np.array(std)
    ref = ref.transpose(0, 3, 1, 2)
    assert tuple(b.images.shape) == (6, 3, 4, 5) and b.images.dtype == em.f32
    np.testing.assert_allclose(b.images.numpy(), ref, rtol=1e-5, atol=1e-5)
    assert b.targets.dtype == em.i64 and b.targets.numpy().tolist() == labels
    images, targets = b   # unpacks like a tuple
    assert images is b.images


def test_classification_batcher_layouts_and_dicts():
    gray = [np.full((2, 3), k, np.uint8) for k in range(3)]
    cf = ClassificationBatcher(channels_first=True).batch([(g, 0) for g in gray], CPU)
    assert tuple(cf.images.shape) == (3, 1, 2, 3)
    fl = ClassificationBatcher(flatten=True, dtype=em.f64).batch(
        [{"image": g, "label": k} for k, g in enumerate(gray)], CPU)
    assert tuple(fl.images.shape) == (3, 6) and fl.images.dtype == em.f64
    np.testing.assert_array_equal(fl.images.numpy()[2], np.full(6, 2.0))
    keyed = ClassificationBatcher(image_key="x", label_key="y").batch(
        [{"x": gray[0], "y": 4}], CPU)
    assert keyed.targets.numpy().tolist() == [4]
    with pytest.raises(errors.ShapeError, match="no field 'label'"):
        ClassificationBatcher().batch([{"image": gray[0]}], CPU)
    with pytest.raises(errors.ShapeError, match=r"image 1 has shape \[3, 2\]"):
        ClassificationBatcher().batch([(gray[0], 0), (gray[0].T, 1)], CPU)
    with pytest.raises(errors.DTypeError, match="labels must be integers"):
        ClassificationBatcher().batch([(gray[0], 0.5)], CPU)
    with pytest.raises(errors.ShapeError, match="not both"):
        ClassificationBatcher(channels_first=True, flatten=True)
    with pytest.raises(errors.ShapeError, match=r"expected \(image, label\)"):
        ClassificationBatcher().batch([5], CPU)
