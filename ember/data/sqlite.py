"""Datasets in SQLite files: one table per split ("train", "test", ...), one row per item.

`SqliteDatasetWriter` builds a file from dict items (ints, floats, strings, bytes, bools and
NumPy arrays); `SqliteDataset` reads one split of it back. Any other SQLite table with
INTEGER / REAL / TEXT / BLOB columns can be read too."""
from __future__ import annotations

import dataclasses
import io
import os
import re
import sqlite3
import tempfile
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..errors import DatasetError, DTypeError
from ..record.atomic import fsync_dir
from .dataset import Dataset

__all__ = ["SqliteDataset", "SqliteDatasetWriter"]

_META = "__ember_columns__"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# column kind -> SQLite declared type, and the Python types a stored value may have
_DECL = {"int": "INTEGER", "bool": "INTEGER", "float": "REAL", "str": "TEXT", "bytes": "BLOB",
         "ndarray": "BLOB"}
_PY = {"int": (int,), "bool": (int,), "float": (float,), "str": (str,), "bytes": (bytes,),
       "ndarray": (bytes,)}


def _check_name(what: str, name: str, path: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or name.startswith("__") \
            or name == "row_id":
        raise DatasetError(f"{path}: {what} {name!r} is not a valid name; use letters, digits "
                           f"and underscores, not starting with a digit or '__', and not "
                           f"'row_id'")
    return name


def _kind_of(value) -> str | None:
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, np.ndarray):
        return "ndarray"
    return None


def _encode(kind: str, value):
    if kind == "bool":
        return int(bool(value))
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "bytes":
        return bytes(value)
    if kind == "ndarray":
        buf = io.BytesIO()
        # (not ascontiguousarray: it makes a 0-d array 1-d; np.save writes any layout)
        np.save(buf, value, allow_pickle=False)
        return buf.getvalue()
    return value


#: one thread at a time parses an array blob's header (`decode_array`)
_HEADER_LOCK = threading.Lock()


def decode_array(blob: bytes) -> np.ndarray:
    """The array `_encode` wrote (``.npy`` bytes), a new writable array.

    The header is a Python literal that NumPy parses with ``ast.literal_eval``; CPython 3.11
    counts the AST constructor's recursion depth per interpreter, not per thread, so loader
    threads parsing at once -- a garbage collection switching threads mid-parse -- fail with
    "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905). The
    header is parsed under a lock; the data is copied outside it."""
    fp = io.BytesIO(blob)
    version = np.lib.format.read_magic(fp)
    read = {(1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0}.get(version)
    if read is None:                     # (another header version: np.load, all of it locked)
        with _HEADER_LOCK:
            return np.load(io.BytesIO(blob), allow_pickle=False)
    with _HEADER_LOCK:
        shape, fortran, dtype = read(fp)
    if dtype.hasobject:
        raise ValueError("the array holds Python objects (pickled data is not read)")
    count = 1
    for n in shape:
        count *= n
    flat = np.frombuffer(blob, dtype, count=count, offset=fp.tell())
    out = flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)
    return out.copy(order="K")


def _as_row(item) -> Mapping[str, Any]:
    if isinstance(item, Mapping):
        return item
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
    raise DTypeError(f"SqliteDatasetWriter: items must be dicts or dataclass instances, got "
                     f"{type(item).__name__}")


class SqliteDatasetWriter:
    """Builds a SQLite dataset file, one table per split::

        with SqliteDatasetWriter("digits.db", overwrite=True) as w:
            for image, label in pairs:
                w.write("train", {"image": image, "label": label})

    Each split's columns and their kinds (int, float, str, bytes, bool, ndarray) are fixed by
    its first item; later items must have the same keys and kinds. NumPy arrays are stored as
    ``.npy`` blobs, so their dtype and shape come back. The file appears atomically when the
    writer closes (a temp file in the same folder, fsynced, then renamed); if the ``with``
    block raises, nothing is written. Splits can be added to an existing file with
    ``overwrite=False`` unless they already exist."""

    def __init__(self, path: str | os.PathLike, *, overwrite: bool = False):
        self.path = os.fspath(path)
        self._closed = False
        self._schemas: dict[str, dict[str, str]] = {}
        self._counts: dict[str, int] = {}
        folder = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(folder, exist_ok=True)
        fd, self._tmp = tempfile.mkstemp(prefix=".ember-", suffix=".db.tmp", dir=folder)
        os.close(fd)
        try:
            if os.path.exists(self.path) and not overwrite:
                src = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
                dst = sqlite3.connect(self._tmp)
                try:
                    src.backup(dst)
                finally:
                    src.close()
                    dst.close()
            self._con = sqlite3.connect(self._tmp)
            self._con.execute(f"CREATE TABLE IF NOT EXISTS {_META} (split TEXT NOT NULL, "
                              f"name TEXT NOT NULL, kind TEXT NOT NULL, position INTEGER NOT "
                              f"NULL, PRIMARY KEY (split, name))")
            self._existing = set(_tables(self._con))
        except sqlite3.DatabaseError as e:
            os.unlink(self._tmp)
            raise DatasetError(f"SqliteDatasetWriter: {self.path} is not a readable SQLite "
                               f"file ({e}); pass overwrite=True to replace it") from None
        except BaseException:
            os.unlink(self._tmp)
            raise

    def __enter__(self) -> "SqliteDatasetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _create(self, split: str, row: Mapping[str, Any]) -> dict[str, str]:
        _check_name("split", split, self.path)
        if split in self._existing:
            raise DatasetError(f"SqliteDatasetWriter({self.path}): split {split!r} already "
                               f"exists; use overwrite=True to rebuild the file")
        if not row:
            raise DatasetError(f"SqliteDatasetWriter({self.path}): the first item of split "
                               f"{split!r} has no fields")
        schema = {}
        for name, value in row.items():
            _check_name("column", name, self.path)
            kind = _kind_of(value)
            if kind is None:
                raise DTypeError(f"SqliteDatasetWriter({self.path}): split {split!r}, column "
                                 f"{name!r} holds {type(value).__name__}; valid: int, float, "
                                 f"str, bytes, bool, NumPy arrays")
            schema[name] = kind
        cols = ", ".join(f"{n} {_DECL[k]} NOT NULL" for n, k in schema.items())
        self._con.execute(f"CREATE TABLE {split} (row_id INTEGER PRIMARY KEY, {cols})")
        self._con.executemany(f"INSERT INTO {_META} VALUES (?, ?, ?, ?)",
                              [(split, n, k, p) for p, (n, k) in enumerate(schema.items())])
        self._schemas[split] = schema
        self._counts[split] = 0
        return schema

    def write(self, split: str, item) -> int:
        """Append one item to ``split``; returns its index in the split."""
        self.write_many(split, [item])
        return self._counts[split] - 1

    def write_many(self, split: str, items: Iterable) -> None:
        """Append items to ``split``, in order."""
        if self._closed:
            raise DatasetError(f"SqliteDatasetWriter({self.path}): the writer is closed")
        schema = self._schemas.get(split)
        rows = []
        n = self._counts.get(split, 0)
        for item in items:
            row = _as_row(item)
            if schema is None:
                schema = self._create(split, row)
            if set(row) != set(schema):
                raise DatasetError(f"SqliteDatasetWriter({self.path}): item {n + len(rows)} "
                                   f"of split {split!r} has fields {sorted(row)}; the split "
                                   f"has {sorted(schema)}")
            vals = [n + len(rows)]
            for name, kind in schema.items():
                v = row[name]
                k = _kind_of(v)
                if k != kind and not (kind == "float" and k == "int"):
                    raise DatasetError(f"SqliteDatasetWriter({self.path}): item "
                                       f"{n + len(rows)} of split {split!r}, column {name!r} "
                                       f"holds {type(v).__name__} ({k}); the column holds "
                                       f"{kind}")
                vals.append(_encode(kind, v))
            rows.append(vals)
        if rows:
            marks = ", ".join("?" * (len(schema) + 1))
            self._con.executemany(f"INSERT INTO {split} VALUES ({marks})", rows)
            self._counts[split] = n + len(rows)

    def close(self) -> None:
        """Commit and move the file into place atomically."""
        if self._closed:
            return
        self._closed = True
        try:
            self._con.commit()
            self._con.close()
            with open(self._tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(self._tmp, self.path)
            fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        except BaseException:
            if os.path.exists(self._tmp):
                os.unlink(self._tmp)
            raise

    def abort(self) -> None:
        """Discard everything written; the target file is left as it was."""
        if self._closed:
            return
        self._closed = True
        try:
            self._con.close()
        finally:
            if os.path.exists(self._tmp):
                os.unlink(self._tmp)

    def __del__(self):
        try:
            self.abort()
        except Exception:
            pass


def _tables(con) -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "ORDER BY name") if r[0] != _META]


def _kind_from_decl(decl: str) -> str | None:
    d = (decl or "").upper()
    # SQLite's type affinity rules, in its order
    if "INT" in d:
        return "int"
    if "CHAR" in d or "CLOB" in d or "TEXT" in d:
        return "str"
    if "BLOB" in d or not d:
        return "bytes" if d else None
    if "REAL" in d or "FLOA" in d or "DOUB" in d:
        return "float"
    return None  # NUMERIC affinity: any number


class SqliteDataset(Dataset):
    """One split (table) of a SQLite dataset file; items are dicts ``{column: value}``.

    Column kinds come from the writer's metadata, or from the declared column types of a
    table written by other tools (INTEGER, REAL, TEXT, BLOB; other declarations are returned
    as stored). A value whose storage type does not match its column (SQLite allows any value
    in any column), a NULL in a column without NULLs, or an array blob that does not decode
    raises `ember.errors.DatasetError` naming the file, the split, the item index and its
    row id. Rows are read on demand; each thread gets its own read-only connection."""

    def __init__(self, path: str | os.PathLike, split: str = "train",
                 columns: Iterable[str] | None = None):
        self.path = os.fspath(path)
        self.split = split
        if not os.path.exists(self.path):
            raise DatasetError(f"SqliteDataset: no file {self.path}")
        self._local = threading.local()
        con = self._connection()
        try:
            tables = _tables(con)
        except sqlite3.DatabaseError as e:
            raise DatasetError(f"SqliteDataset: {self.path} is not a readable SQLite file "
                               f"({e})") from None
        if split not in tables:
            raise DatasetError(f"SqliteDataset({self.path}): no split {split!r}; splits: "
                               f"{tables}")
        info = con.execute(f'PRAGMA table_info("{split}")').fetchall()
        decl = {r[1]: (r[2], bool(r[3])) for r in info}
        meta = {}
        if _META in [r[0] for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")]:
            meta = {n: k for n, k in con.execute(
                f"SELECT name, kind FROM {_META} WHERE split = ? ORDER BY position", (split,))}
        names = [r[1] for r in info if not (r[1] == "row_id" and r[5])]
        if columns is not None:
            columns = list(columns)
            missing = [c for c in columns if c not in names]
            if missing:
                raise DatasetError(f"SqliteDataset({self.path}): split {split!r} has no "
                                   f"columns {missing}; it has {names}")
            names = columns
        self.columns = tuple(names)
        self.kinds = {n: meta.get(n) or _kind_from_decl(decl[n][0]) for n in names}
        self._not_null = [decl[n][1] or n in meta for n in names]
        self._rowids = np.asarray(
            [r[0] for r in con.execute(f'SELECT rowid FROM "{split}" ORDER BY rowid')],
            dtype=np.int64)
        sel = ", ".join(f'"{n}"' for n in names)
        self._query = f'SELECT {sel} FROM "{split}" WHERE rowid = ?'

    @staticmethod
    def splits(path: str | os.PathLike) -> list[str]:
        """The split (table) names in a dataset file."""
        con = sqlite3.connect(f"file:{os.fspath(path)}?mode=ro", uri=True)
        try:
            return _tables(con)
        finally:
            con.close()

    def _connection(self):
        con = getattr(self._local, "con", None)
        if con is None:
            try:
                con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                      check_same_thread=False)
            except sqlite3.Error as e:
                raise DatasetError(f"SqliteDataset: cannot open {self.path} ({e})") from None
            self._local.con = con
        return con

    def __len__(self) -> int:
        return len(self._rowids)

    def get(self, index: int):
        if not 0 <= index < len(self._rowids):
            return None
        rowid = int(self._rowids[index])
        where = (f"SqliteDataset({self.path}): split {self.split!r}, item {index} "
                 f"(row id {rowid})")
        try:
            row = self._connection().execute(self._query, (rowid,)).fetchone()
        except sqlite3.Error as e:
            raise DatasetError(f"{where}: cannot be read ({e})") from None
        if row is None:
            raise DatasetError(f"{where}: the row is gone; the file changed after it was "
                               f"opened")
        out = {}
        for name, value, not_null in zip(self.columns, row, self._not_null):
            kind = self.kinds[name]
            if value is None:
                if not_null:
                    raise DatasetError(f"{where}, column {name!r}: NULL in a column of "
                                       f"{kind} values")
                out[name] = None
                continue
            if kind is not None and not isinstance(value, _PY[kind]):
                raise DatasetError(f"{where}, column {name!r}: holds "
                                   f"{type(value).__name__} {_short(value)}; the column "
                                   f"holds {kind} values")
            if kind == "bool":
                value = bool(value)
            elif kind == "ndarray":
                try:
                    value = decode_array(value)
                except Exception as e:
                    raise DatasetError(f"{where}, column {name!r}: the array blob does not "
                                       f"decode ({e})") from None
            out[name] = value
        return out

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_local", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._local = threading.local()

    def __del__(self):
        con = getattr(getattr(self, "_local", None), "con", None)
        if con is not None:
            try:
                con.close()
            except Exception:
                pass

    def __repr__(self) -> str:
        cols = ", ".join(f"{c}: {self.kinds[c]}" for c in self.columns)
        return f"SqliteDataset({self.path!r}, split={self.split!r}, len={len(self)}, " \
               f"columns={{{cols}}})"


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."
