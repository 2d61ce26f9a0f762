"""CsvDataset: typed columns, header handling, and errors that name the file and the row."""
import csv
import dataclasses

import numpy as np
import pytest

from ember import errors
from ember.data import CsvDataset


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def iris(tmp_path):
    return write(tmp_path / "iris.csv",
                 "sepal,petal,species,label,ok\n"
                 "5.1,1.4,setosa,0,true\n"
                 "\n"
                 "6.2,4.5,\"versi, color\",1,no\n"
                 "7.7,6.7,virginica,2,1\n")


def test_typed_columns(iris):
    ds = CsvDataset(iris, {"label": int, "sepal": float, "species": str, "ok": bool})
    assert len(ds) == 3
    assert ds.column_names == ("label", "sepal", "species", "ok")
    assert ds[1] == {"label": 1, "sepal": 6.2, "species": "versi, color", "ok": False}
    assert type(ds[0]["label"]) is int and type(ds[0]["sepal"]) is float
    assert ds[2]["ok"] is True
    np.testing.assert_array_equal(ds.column("label"), [0, 1, 2])
    assert ds.column("label").dtype == np.int64
    assert ds.column("ok").dtype == np.bool_
    with pytest.raises(errors.DatasetError, match="no column 'petal'"):
        ds.column("petal")


def test_inferred_types_match_csv_module(iris):
    ds = CsvDataset(iris)
    assert ds.column_types == {"sepal": "float", "petal": "float", "species": "str",
                               "label": "int", "ok": "str"}
    # an independent reading with the csv module
    with open(iris, newline="") as f:
        rows = [r for r in csv.DictReader(f)]
    assert [d["species"] for d in ds] == [r["species"] for r in rows]
    assert [d["petal"] for d in ds] == [float(r["petal"]) for r in rows]


def test_item_forms_and_string_type_names(iris):
    ds = CsvDataset(iris, {"species": "str", "label": "int"}, item="tuple")
    assert ds[0] == ("setosa", 0)

    @dataclasses.dataclass
    class Row:
        species: str
        label: int

    ds = CsvDataset(iris, {"species": str, "label": int}, item=Row)
    assert ds[2] == Row("virginica", 2)
    ds = CsvDataset(iris, {"petal": lambda s: round(float(s) * 10)})
    assert [d["petal"] for d in ds] == [14, 45, 67]


def test_no_header_and_delimiter(tmp_path):
    p = write(tmp_path / "x.tsv", "1\t2.5\ta\n3\t4.5\tb\n")
    ds = CsvDataset(p, {"i": int, "f": float, "s": str}, header=False, delimiter="\t")
    assert list(ds) == [{"i": 1, "f": 2.5, "s": "a"}, {"i": 3, "f": 4.5, "s": "b"}]
    plain = CsvDataset(p, header=False, delimiter="\t", item="tuple")
    assert plain.column_names == ("0", "1", "2") and plain[1] == (3, 4.5, "b")
    names_only = CsvDataset(p, ["a", "b", "c"], header=False, delimiter="\t")
    assert names_only[0] == {"a": "1", "b": "2.5", "c": "a"}
    with pytest.raises(errors.DatasetError, match=r"row 1 \(line 1\) has 3 cells but 2"):
        CsvDataset(p, {"i": int, "f": float}, header=False, delimiter="\t")


def test_bad_cell_names_file_row_and_column(tmp_path):
    p = write(tmp_path / "bad.csv", "x,y\n1,2\n3,4\n5,oops\n7,8\n")
    with pytest.raises(errors.DatasetError) as e:
        CsvDataset(p, {"x": int, "y": int})
    msg = str(e.value)
    assert str(p) in msg and "row 3 (line 4)" in msg and "'y'" in msg and "'oops'" in msg
    assert isinstance(e.value, errors.EmberError) and isinstance(e.value, ValueError)


def test_ragged_row(tmp_path):
    p = write(tmp_path / "ragged.csv", "a,b,c\n1,2,3\n4,5\n")
    with pytest.raises(errors.DatasetError, match=r"ragged.csv\): row 2 \(line 3\) has 2 cells"):
        CsvDataset(p, {"a": int})


def test_bad_bool_and_missing_column(tmp_path, iris):
    p = write(tmp_path / "b.csv", "flag\nyes\nmaybe\n")
    with pytest.raises(errors.DatasetError, match=r"row 2 \(line 3\).*'maybe' as bool"):
        CsvDataset(p, {"flag": bool})
    with pytest.raises(errors.DatasetError, match=r"columns \['height'\] are not in the header"):
        CsvDataset(iris, {"height": float})
    with pytest.raises(errors.DTypeError, match="column 'label' has type"):
        CsvDataset(iris, {"label": 42})


def test_file_problems(tmp_path):
    with pytest.raises(errors.DatasetError, match="cannot open"):
        CsvDataset(tmp_path / "missing.csv")
    with pytest.raises(errors.DatasetError, match="empty"):
        CsvDataset(write(tmp_path / "empty.csv", ""))
    bad = tmp_path / "latin.csv"
    bad.write_bytes(b"name\nok\ncaf\xe9\n")
    with pytest.raises(errors.DatasetError, match=r"latin.csv.*not valid utf-8"):
        CsvDataset(bad)
    dup = write(tmp_path / "dup.csv", "a,a\n1,2\n")
    with pytest.raises(errors.DatasetError, match="repeats a column"):
        CsvDataset(dup)
    only_header = CsvDataset(write(tmp_path / "h.csv", "a,b\n"))
    assert len(only_header) == 0
