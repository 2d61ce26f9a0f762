"""SqliteDatasetWriter / SqliteDataset: round trips, splits, and wrong-type rows."""
import os
import sqlite3
import threading

import numpy as np
import pytest

from ember import errors
from ember.data import DataLoader, SqliteDataset, SqliteDatasetWriter, TensorBatcher


def items(n, offset=0):
    rng = np.random.default_rng(offset)
    for i in range(n):
        yield {"image": rng.integers(0, 255, (3, 4), dtype=np.uint8),
               "weights": rng.standard_normal(2),
               "label": i + offset, "score": float(i) / 3, "name": f"item{i}",
               "raw": bytes([i, 255 - i]), "flag": bool(i % 2)}


def test_round_trip_with_splits(tmp_path):
    path = tmp_path / "data.db"
    train, test = list(items(5)), list(items(3, offset=100))
    with SqliteDatasetWriter(path) as w:
        for it in train:
            w.write("train", it)
        w.write_many("test", test)
    assert SqliteDataset.splits(path) == ["test", "train"]
    for split, want in (("train", train), ("test", test)):
        ds = SqliteDataset(path, split)
        assert len(ds) == len(want)
        assert ds.kinds == {"image": "ndarray", "weights": "ndarray", "label": "int",
                            "score": "float", "name": "str", "raw": "bytes", "flag": "bool"}
        for got, exp in zip(ds, want):
            assert got.keys() == exp.keys()
            np.testing.assert_array_equal(got["image"], exp["image"])
            assert got["image"].dtype == np.uint8 and got["image"].shape == (3, 4)
            np.testing.assert_array_equal(got["weights"], exp["weights"])
            assert got["weights"].dtype == np.float64
            for k in ("label", "score", "name", "raw", "flag"):
                assert got[k] == exp[k] and type(got[k]) is type(exp[k])
    sub = SqliteDataset(path, "train", columns=["label", "name"])
    assert sub[4] == {"label": 4, "name": "item4"}
    # the file is plain SQLite: an independent reader sees the rows
    con = sqlite3.connect(path)
    assert con.execute("SELECT label, name FROM train ORDER BY row_id").fetchall() == \
        [(i, f"item{i}") for i in range(5)]
    con.close()


def test_add_split_to_existing_file_and_overwrite(tmp_path):
    path = tmp_path / "d.db"
    with SqliteDatasetWriter(path) as w:
        w.write("train", {"x": 1})
    with SqliteDatasetWriter(path) as w:
        w.write("valid", {"x": 2})
    assert SqliteDataset.splits(path) == ["train", "valid"]
    with pytest.raises(errors.DatasetError, match="split 'train' already exists"):
        with SqliteDatasetWriter(path) as w:
            w.write("train", {"x": 3})
    assert SqliteDataset(path, "train")[0] == {"x": 1}
    with SqliteDatasetWriter(path, overwrite=True) as w:
        w.write("test", {"y": "z"})
    assert SqliteDataset.splits(path) == ["test"]


def test_writer_is_atomic(tmp_path):
    path = tmp_path / "a.db"
    with SqliteDatasetWriter(path) as w:
        w.write("train", {"x": 1})
    with pytest.raises(RuntimeError):
        with SqliteDatasetWriter(path, overwrite=True) as w:
            w.write("train", {"x": 2})
            raise RuntimeError("interrupted")
    assert SqliteDataset(path, "train")[0] == {"x": 1}   # the old file is untouched
    w = SqliteDatasetWriter(tmp_path / "b.db")
    w.write("train", {"x": 1})
    assert not (tmp_path / "b.db").exists()              # nothing visible before close
    w.close()
    assert (tmp_path / "b.db").exists()
    assert [f for f in os.listdir(tmp_path) if f.endswith(".tmp")] == []


def test_writer_schema_errors(tmp_path):
    with SqliteDatasetWriter(tmp_path / "e.db") as w:
        w.write("train", {"x": 1, "y": 1.5})
        w.write("train", {"x": 2, "y": 3})          # an int in a float column is fine
        with pytest.raises(errors.DatasetError, match=r"item 2 of split 'train' has fields"):
            w.write("train", {"x": 1})
        with pytest.raises(errors.DatasetError, match=r"item 2 .* column 'x' holds str"):
            w.write("train", {"x": "one", "y": 1.0})
        with pytest.raises(errors.DatasetError, match="not a valid name"):
            w.write("bad split", {"x": 1})
        with pytest.raises(errors.DTypeError, match="holds list"):
            w.write("other", {"x": [1, 2]})
        with pytest.raises(errors.DTypeError, match="dicts or dataclass"):
            w.write("other", 5)
    assert len(SqliteDataset(tmp_path / "e.db", "train")) == 2


def test_wrong_type_row_names_file_and_row(tmp_path):
    path = tmp_path / "w.db"
    with SqliteDatasetWriter(path) as w:
        w.write_many("train", ({"label": i, "score": i / 2} for i in range(6)))
    con = sqlite3.connect(path)
    con.execute("UPDATE train SET label = 'seven' WHERE row_id = 4")
    con.execute("UPDATE train SET score = X'00' WHERE row_id = 1")
    con.commit()
    con.close()
    ds = SqliteDataset(path, "train")
    assert ds[0] == {"label": 0, "score": 0.0}
    with pytest.raises(errors.DatasetError) as e:
        ds[4]
    msg = str(e.value)
    assert str(path) in msg and "item 4" in msg and "'label'" in msg and "'seven'" in msg
    with pytest.raises(errors.DatasetError, match=r"item 1 \(row id 1\), column 'score'"):
        ds[1]


def test_broken_array_blob(tmp_path):
    path = tmp_path / "arr.db"
    with SqliteDatasetWriter(path) as w:
        w.write_many("train", [{"x": np.zeros(3)}, {"x": np.ones(3)}])
    con = sqlite3.connect(path)
    con.execute("UPDATE train SET x = X'0102' WHERE row_id = 1")
    con.commit()
    con.close()
    with pytest.raises(errors.DatasetError, match=r"item 1 .*array blob does not decode"):
        SqliteDataset(path, "train")[1]


def test_foreign_table(tmp_path):
    """A table written by other tools: kinds come from the declared column types."""
    path = tmp_path / "f.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE samples (a INTEGER, b REAL, c TEXT, d BLOB, e)")
    con.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?)",
                    [(1, 0.5, "x", b"\x01", 3), (2, 1.5, None, b"", "any"),
                     (3, 2.5, 7.5, b"", 1)])
    con.commit()
    con.close()
    ds = SqliteDataset(path, "samples")
    assert ds.kinds == {"a": "int", "b": "float", "c": "str", "d": "bytes", "e": None}
    assert ds[0] == {"a": 1, "b": 0.5, "c": "x", "d": b"\x01", "e": 3}
    assert ds[1]["c"] is None and ds[1]["e"] == "any"   # NULL in a nullable column
    # TEXT affinity stores 7.5 as the text '7.5', which is a str: no error
    assert ds[2]["c"] == "7.5"


def test_missing_things(tmp_path):
    with pytest.raises(errors.DatasetError, match="no file"):
        SqliteDataset(tmp_path / "none.db")
    path = tmp_path / "s.db"
    with SqliteDatasetWriter(path) as w:
        w.write("train", {"x": 1})
    with pytest.raises(errors.DatasetError, match=r"no split 'test'; splits: \['train'\]"):
        SqliteDataset(path, "test")
    with pytest.raises(errors.DatasetError, match=r"no columns \['y'\]"):
        SqliteDataset(path, "train", columns=["y"])
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(errors.DatasetError, match="not a readable SQLite file"):
        SqliteDataset(junk)


def test_threaded_loader_reads_sqlite(tmp_path):
    path = tmp_path / "t.db"
    with SqliteDatasetWriter(path) as w:
        w.write_many("train", ({"x": np.full(2, i, np.float32), "y": i} for i in range(40)))
    ds = SqliteDataset(path, "train")
    loader = DataLoader(ds, TensorBatcher(), 8, shuffle=False, num_workers=4)
    ys = [b["y"].numpy() for b in loader]
    np.testing.assert_array_equal(np.concatenate(ys), np.arange(40))
    names = {t.name for t in threading.enumerate()}
    assert not any(n.startswith("ember-data") for n in names)


def test_array_blobs_decode_in_many_threads_at_once():
    """Loader threads decode array blobs at once while garbage collections run: NumPy parses a
    blob's header with ast.literal_eval, which CPython 3.11 cannot run in two threads at once
    (a collection switching threads mid-parse: "AST constructor recursion depth mismatch");
    the SQLite reader parses one header at a time. (With np.load this failed in most runs.)"""
    from ember.data.sqlite import _encode, decode_array
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    blob = _encode("ndarray", a)
    errors = []

    class Garbage:
        def __del__(self):
            sum(range(10))                      # Python code run by a collection

    def work():
        for _ in range(3000):
            junk = [Garbage() for _ in range(3)]
            cycle = [junk]
            cycle.append(cycle)                 # collected by the cycle collector, mid-parse
            try:
                got = decode_array(blob)
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
                return
            if not (got.shape == a.shape and (got == a).all()):
                errors.append(f"decoded {got!r}")
                return

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:2]


def test_array_blob_round_trips_keep_shape_and_layout(tmp_path):
    """Arrays come back with their shape and values: a 0-d array stays 0-d (it came back as
    shape (1,)), a Fortran-ordered or strided one as its values."""
    path = tmp_path / "a.db"
    arrays = [np.array(3.5), np.asfortranarray(np.arange(6.0).reshape(2, 3)),
              np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2], np.zeros((0, 4), np.float32)]
    with SqliteDatasetWriter(path) as w:
        w.write_many("train", ({"x": a} for a in arrays))
    ds = SqliteDataset(path, "train")
    for i, a in enumerate(arrays):
        got = ds.get(i)["x"]
        assert got.shape == a.shape and got.dtype == a.dtype and got.flags.writeable
        np.testing.assert_array_equal(got, a)
