"""CSV files with typed columns, read and checked once, held in memory."""
from __future__ import annotations

import csv as _csv
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import DatasetError, DTypeError
from .dataset import Dataset

__all__ = ["CsvDataset"]

_TRUE = {"1", "true", "t", "yes", "y"}
_FALSE = {"0", "false", "f", "no", "n"}


def _parse_bool(s: str) -> bool:
    v = s.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"not a boolean (valid: {sorted(_TRUE | _FALSE)})")


def _parse_int(s: str) -> int:
    return int(s.strip())


def _parse_float(s: str) -> float:
    return float(s.strip())


_PARSERS: dict[Any, tuple[str, Callable[[str], Any]]] = {
    int: ("int", _parse_int), "int": ("int", _parse_int),
    float: ("float", _parse_float), "float": ("float", _parse_float),
    str: ("str", str), "str": ("str", str),
    bool: ("bool", _parse_bool), "bool": ("bool", _parse_bool),
}


def _parser(path, name, kind):
    if kind in _PARSERS:
        return _PARSERS[kind]
    if callable(kind):
        return getattr(kind, "__name__", "callable"), kind
    raise DTypeError(f"CsvDataset({path}): column {name!r} has type {kind!r}; valid: int, "
                     f"float, str, bool (or the names 'int', 'float', 'str', 'bool'), or a "
                     f"callable that parses the text")


def _infer(values: list[str]) -> str:
    for kind, parse in (("int", _parse_int), ("float", _parse_float)):
        try:
            for v in values:
                parse(v)
            return kind
        except ValueError:
            continue
    return "str"


class CsvDataset(Dataset):
    """The rows of a CSV file, parsed into typed values and checked when the file is opened.

    ``columns`` maps column names to types (``int``, ``float``, ``str``, ``bool``, or any
    callable that parses the cell text); with a header only the named columns are kept, in
    the given order. Without ``columns`` every column is kept and its type inferred (int if
    every cell parses as an int, else float, else str). With ``header=False``, ``columns``
    names the columns in file order (a list of names is read as strings).

    Items are dicts ``{column: value}``; ``item="tuple"`` gives tuples in column order, and a
    class or callable gives ``item(**row)`` (a dataclass, for example). A row with the wrong
    number of cells or a cell that does not parse raises `ember.errors.DatasetError` naming
    the file, the row (1-based, data rows only), its line and the column."""

    __slots__ = ("path", "column_names", "column_types", "_columns", "_n", "_item")

    def __init__(self, path: str | os.PathLike, columns: Mapping[str, Any] | Sequence[str]
                 | None = None, *, header: bool = True, delimiter: str = ",",
                 item: str | Callable = "dict", encoding: str = "utf-8"):
        self.path = os.fspath(path)
        if isinstance(columns, Sequence) and not isinstance(columns, str):
            columns = {c: str for c in columns}
        if item not in ("dict", "tuple") and not callable(item):
            raise DTypeError(f"CsvDataset({self.path}): item must be 'dict', 'tuple' or a "
                             f"callable, got {item!r}")
        self._item = item
        try:
            f = open(self.path, newline="", encoding=encoding)
        except OSError as e:
            raise DatasetError(f"CsvDataset: cannot open {self.path}: {e.strerror or e}") \
                from None
        with f:
            reader = _csv.reader(f, delimiter=delimiter)
            try:
                rows, lines, file_names = self._read(reader, header)
            except UnicodeDecodeError as e:
                raise DatasetError(f"CsvDataset({self.path}): line {reader.line_num + 1} is "
                                   f"not valid {encoding}: {e.reason}") from None
        width = len(file_names)
        if columns is None:
            wanted = list(file_names)
            positions = list(range(width))
            kinds = [_infer([r[p] for r in rows]) if rows else "str" for p in positions]
        else:
            wanted = list(columns)
            if header:
                missing = [c for c in wanted if c not in file_names]
                if missing:
                    raise DatasetError(f"CsvDataset({self.path}): columns {missing} are not "
                                       f"in the header; the file has {file_names}")
                positions = [file_names.index(c) for c in wanted]
            else:
                if rows and width != len(wanted):
                    raise DatasetError(f"CsvDataset({self.path}): row 1 (line {lines[0]}) "
                                       f"has {width} cells but {len(wanted)} columns were "
                                       f"named: {wanted}")
                width = len(wanted)
                positions = list(range(width))
            kinds = [columns[c] for c in wanted]
        parsers = [_parser(self.path, c, k) for c, k in zip(wanted, kinds)]
        self.column_names = tuple(wanted)
        self.column_types = {c: p[0] for c, p in zip(wanted, parsers)}
        values: list[list] = [[] for _ in wanted]
        for r, (row, line) in enumerate(zip(rows, lines), start=1):
            if len(row) != width:
                raise DatasetError(f"CsvDataset({self.path}): row {r} (line {line}) has "
                                   f"{len(row)} cells, expected {width}: {row!r}")
            for k, (pos, (kind, parse)) in enumerate(zip(positions, parsers)):
                cell = row[pos]
                try:
                    values[k].append(parse(cell))
                except (ValueError, TypeError) as e:
                    raise DatasetError(f"CsvDataset({self.path}): row {r} (line {line}), "
                                       f"column {wanted[k]!r}: cannot read {cell!r} as "
                                       f"{kind} ({e})") from None
        self._columns = values
        self._n = len(rows)

    def _read(self, reader, header):
        file_names: list[str] = []
        rows: list[list[str]] = []
        lines: list[int] = []
        try:
            for row in reader:
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue  # blank lines
                if header and not file_names:
                    file_names = [c.strip() for c in row]
                    if len(set(file_names)) != len(file_names):
                        raise DatasetError(f"CsvDataset({self.path}): the header repeats a "
                                           f"column name: {file_names}")
                    continue
                rows.append(row)
                lines.append(reader.line_num)
        except _csv.Error as e:
            raise DatasetError(f"CsvDataset({self.path}): row {len(rows) + 1} (line "
                               f"{reader.line_num}) is not valid CSV: {e}") from None
        if not header:
            file_names = [str(i) for i in range(len(rows[0]))] if rows else []
        elif not file_names:
            raise DatasetError(f"CsvDataset({self.path}): the file is empty; expected a "
                               f"header line")
        return rows, lines, file_names

    def __len__(self) -> int:
        return self._n

    def get(self, index: int):
        if not 0 <= index < self._n:
            return None
        vals = [col[index] for col in self._columns]
        if self._item == "tuple":
            return tuple(vals)
        row = dict(zip(self.column_names, vals))
        if self._item == "dict":
            return row
        return self._item(**row)

    def column(self, name: str) -> np.ndarray:
        """All values of one column as a NumPy array (int64, float64, bool or object)."""
        try:
            k = self.column_names.index(name)
        except ValueError:
            raise DatasetError(f"CsvDataset({self.path}): no column {name!r}; columns: "
                               f"{list(self.column_names)}") from None
        dtype = {"int": np.int64, "float": np.float64, "bool": np.bool_}.get(
            self.column_types[name], object)
        return np.asarray(self._columns[k], dtype=dtype)

    def __repr__(self) -> str:
        cols = ", ".join(f"{c}: {t}" for c, t in self.column_types.items())
        return f"CsvDataset({self.path!r}, len={self._n}, columns={{{cols}}})"
