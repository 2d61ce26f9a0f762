"""ImageFolderDataset on tiny PNGs written here with Pillow."""
import numpy as np
import pytest

from ember import errors
from ember.data import ClassificationBatcher, DataLoader, ImageFolderDataset

Image = pytest.importorskip("PIL.Image")


def make_folder(root, per_class=3, size=(5, 4)):
    rng = np.random.default_rng(0)
    written = {}
    for c in ("dog", "cat", "bird"):
        (root / c).mkdir(parents=True)
        for k in range(per_class):
            arr = rng.integers(0, 256, (size[0], size[1], 3), dtype=np.uint8)
            p = root / c / f"{k:02d}.png"
            Image.fromarray(arr, "RGB").save(p)
            written[str(p)] = arr
    (root / "cat" / "notes.txt").write_text("not an image")
    (root / "cat" / "nested").mkdir()
    arr = rng.integers(0, 256, (size[0], size[1], 3), dtype=np.uint8)
    Image.fromarray(arr, "RGB").save(root / "cat" / "nested" / "zz.png")
    written[str(root / "cat" / "nested" / "zz.png")] = arr
    return written


def test_classes_labels_and_pixels(tmp_path):
    written = make_folder(tmp_path)
    ds = ImageFolderDataset(tmp_path)
    assert ds.classes == ["bird", "cat", "dog"] and ds.class_to_index["dog"] == 2
    assert len(ds) == 10
    assert list(ds.labels) == [0] * 3 + [1] * 4 + [2] * 3
    for i, path in enumerate(ds.paths):
        img, label = ds[i]
        assert img.dtype == np.uint8 and img.shape == (5, 4, 3)
        np.testing.assert_array_equal(img, written[path])    # PNG is lossless
        assert label == ds.class_to_index[path.split("/")[-2] if "nested" not in path
                                          else "cat"]


def test_mode_size_and_class_subset(tmp_path):
    written = make_folder(tmp_path)
    gray = ImageFolderDataset(tmp_path, mode="L", classes=["dog", "bird"])
    assert gray.classes == ["dog", "bird"] and len(gray) == 6
    img, label = gray[0]
    assert img.shape == (5, 4) and label == 0
    ref = np.asarray(Image.fromarray(written[gray.paths[0]], "RGB").convert("L"))
    np.testing.assert_array_equal(img, ref)
    small = ImageFolderDataset(tmp_path, size=(2, 3))
    assert small[0][0].shape == (2, 3, 3)
    with pytest.raises(errors.DatasetError, match=r"no folders for classes \['fish'\]"):
        ImageFolderDataset(tmp_path, classes=["fish"])


def test_broken_image_names_file_and_index(tmp_path):
    make_folder(tmp_path)
    good = (tmp_path / "dog" / "01.png").read_bytes()
    (tmp_path / "dog" / "01.png").write_bytes(good[: len(good) // 2])   # truncated PNG
    (tmp_path / "bird" / "02.png").write_bytes(b"\x89PNG garbage")        # not decodable
    ds = ImageFolderDataset(tmp_path)
    i = ds.paths.index(str(tmp_path / "dog" / "01.png"))
    with pytest.raises(errors.DatasetError) as e:
        ds[i]
    assert f"item {i}" in str(e.value) and "dog/01.png" in str(e.value)
    j = ds.paths.index(str(tmp_path / "bird" / "02.png"))
    with pytest.raises(errors.DatasetError, match=rf"item {j}, file .*bird/02.png"):
        ds[j]
    # through a threaded loader: the same error type, with the loader's note on the index
    loader = DataLoader(ds, ClassificationBatcher(), 4, shuffle=False, num_workers=2)
    with pytest.raises(errors.DatasetError) as e:
        list(loader)
    assert f"item {j}" in str(e.value)
    assert any(f"while reading item {j}" in n for n in e.value.__notes__)


def test_empty_or_missing_root(tmp_path):
    with pytest.raises(errors.DatasetError, match="not a folder"):
        ImageFolderDataset(tmp_path / "nope")
    with pytest.raises(errors.DatasetError, match="no class folders"):
        ImageFolderDataset(tmp_path)


def test_loader_batches_images(tmp_path):
    make_folder(tmp_path)
    ds = ImageFolderDataset(tmp_path)
    loader = DataLoader(ds, ClassificationBatcher(scale=1 / 255, channels_first=True), 4,
                        shuffle=False, num_workers=2)
    batches = list(loader)
    assert [tuple(b.images.shape) for b in batches] == [(4, 3, 5, 4)] * 2 + [(2, 3, 5, 4)]
    ref = np.stack([ds[i][0] for i in range(4)]).astype(np.float32) / 255
    np.testing.assert_allclose(batches[0].images.numpy(), ref.transpose(0, 3, 1, 2),
                               rtol=1e-6)
    np.testing.assert_array_equal(np.concatenate([b.targets.numpy() for b in batches]),
                                  ds.labels)
