"""MNIST IDX files written here byte by byte (raw and gzip); no download."""
import gzip
import struct

import numpy as np
import pytest

from ember import errors
from ember.data import MnistDataset, read_idx, write_idx


def idx_bytes(arr, code):
    """The IDX format written independently of ember: magic, big-endian dims, data."""
    dt = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}[code]
    head = struct.pack(">BBBB", 0, 0, code, arr.ndim) + struct.pack(f">{arr.ndim}I",
                                                                     *arr.shape)
    return head + arr.astype(dt).tobytes()


def make_mnist(root, n=7, gz=False, prefix="train"):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    for kind, arr, d in (("images", images, 3), ("labels", labels, 1)):
        data = idx_bytes(arr, 0x08)
        name = f"{prefix}-{kind}-idx{d}-ubyte"
        if gz:
            (root / (name + ".gz")).write_bytes(gzip.compress(data))
        else:
            (root / name).write_bytes(data)
    return images, labels


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_train_and_test(tmp_path, gz):
    images, labels = make_mnist(tmp_path, 7, gz)
    t_images, t_labels = make_mnist(tmp_path, 3, gz, prefix="t10k")
    ds = MnistDataset(tmp_path, "train")
    assert len(ds) == 7
    for i in range(7):
        img, lab = ds[i]
        np.testing.assert_array_equal(img, images[i])
        assert img.dtype == np.uint8 and lab == labels[i] and type(lab) is int
    test = MnistDataset(tmp_path, "test")
    assert len(test) == 3
    np.testing.assert_array_equal(test[2][0], t_images[2])
    with pytest.raises(errors.DatasetError, match="split must be"):
        MnistDataset(tmp_path, "valid")


@pytest.mark.parametrize("code,dtype", [(0x08, np.uint8), (0x09, np.int8), (0x0B, np.int16),
                                        (0x0C, np.int32), (0x0D, np.float32),
                                        (0x0E, np.float64)])
def test_read_idx_dtypes(tmp_path, code, dtype):
    arr = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype)
    if dtype == np.uint8:
        arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a.idx").write_bytes(idx_bytes(arr, code))
    got = read_idx(tmp_path / "a.idx")
    assert got.dtype == dtype and got.dtype.isnative
    np.testing.assert_array_equal(got, arr)
    # write_idx produces exactly the independently written bytes
    write_idx(tmp_path / "b.idx", arr)
    assert (tmp_path / "b.idx").read_bytes() == idx_bytes(arr, code)
    write_idx(tmp_path / "c.idx.gz", arr)
    assert gzip.decompress((tmp_path / "c.idx.gz").read_bytes()) == idx_bytes(arr, code)
    np.testing.assert_array_equal(read_idx(tmp_path / "c.idx.gz"), arr)


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_idx_names_file_and_record(tmp_path, gz):
    arr = np.arange(5 * 28 * 28, dtype=np.uint8).reshape(5, 28, 28)
    data = idx_bytes(arr, 0x08)
    cut = data[: 16 + 3 * 784 + 100]          # records 0..2 complete, record 3 partial
    p = tmp_path / ("short.idx" + (".gz" if gz else ""))
    if gz:
        full = gzip.compress(data)
        # a gzip stream cut short: drop the trailer and part of the deflate data
        p.write_bytes(full[: len(gzip.compress(cut)) - 8])
    else:
        p.write_bytes(cut)
    with pytest.raises(errors.DatasetError) as e:
        read_idx(p)
    msg = str(e.value)
    assert str(p) in msg and "truncated" in msg and "of 5" in msg
    if not gz:
        assert "record 3 of 5" in msg and "2452 of 3920 data bytes" in msg
    else:
        assert "gzip stream ends early" in msg


def test_other_idx_errors(tmp_path):
    bad = tmp_path / "bad.idx"
    bad.write_bytes(b"\x01\x02\x08\x01" + b"\x00" * 8)
    with pytest.raises(errors.DatasetError, match="not an IDX file"):
        read_idx(bad)
    bad.write_bytes(b"\x00\x00")
    with pytest.raises(errors.DatasetError, match="too short"):
        read_idx(bad)
    bad.write_bytes(b"\x00\x00\x08\x03\x00\x00")
    with pytest.raises(errors.DatasetError, match="ends inside"):
        read_idx(bad)
    bad.write_bytes(idx_bytes(np.zeros(3, np.uint8), 0x08) + b"xx")
    with pytest.raises(errors.DatasetError, match="2 bytes after the last of 3 records"):
        read_idx(bad)
    (tmp_path / "corrupt.gz").write_bytes(gzip.compress(b"\x00" * 1000)[:12] + b"\xff" * 40)
    with pytest.raises(errors.DatasetError, match="corrupt.gz"):
        read_idx(tmp_path / "corrupt.gz")
    with pytest.raises(errors.DatasetError, match="cannot open"):
        read_idx(tmp_path / "missing.idx")
    with pytest.raises(errors.DTypeError):
        write_idx(tmp_path / "x.idx", np.zeros(2, np.int64))


def test_mnist_mismatch_and_missing(tmp_path):
    with pytest.raises(errors.DatasetError, match="no images file"):
        MnistDataset(tmp_path)
    make_mnist(tmp_path, 4)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(3, np.uint8), 8))
    with pytest.raises(errors.DatasetError, match="4 images but .* 3 labels"):
        MnistDataset(tmp_path)
    # an images file given as the labels (3-d) is refused, naming the file
    with pytest.raises(errors.DatasetError, match=r"images-idx3-ubyte holds an array of shape "
                                                  r"\[4, 28, 28\]; expected \[count\]"):
        MnistDataset.from_files(tmp_path / "train-images-idx3-ubyte",
                                tmp_path / "train-images-idx3-ubyte")
    (tmp_path / "labels4").write_bytes(idx_bytes(np.arange(4, dtype=np.uint8), 8))
    ds = MnistDataset.from_files(tmp_path / "train-images-idx3-ubyte", tmp_path / "labels4")
    assert [ds[i][1] for i in range(4)] == [0, 1, 2, 3]
