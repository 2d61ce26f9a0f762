"""Per-epoch metric logs in the artifact directory:

- ``<artifact_dir>/<split>/epoch-<N>/<metric>.csv``: ``iteration,value`` per step of the
  epoch (the step's value, not the running aggregate);
- ``<artifact_dir>/<split>/epochs.csv``: ``epoch,<metric>,...``: one row of aggregates per
  epoch.

Files are written atomically when an epoch ends (and, for a stopped epoch, when the Learner
stops), so a log is never half written; a resumed epoch continues its files.
"""
from __future__ import annotations

import csv
import io
import math
import os
import re

from ._io import write_text_atomic

__all__ = ["MetricLogger", "metric_file_name", "read_metric_log", "read_epochs_csv"]


def metric_file_name(name: str) -> str:
    """A metric name as a file name: ``"items/s"`` -> ``"items-per-s"``,
    ``"top-5 accuracy"`` -> ``"top-5-accuracy"``."""
    s = name.strip().lower().replace("/", "-per-")
    s = re.sub(r"[^a-z0-9._-]+", "-", s).strip("-.")
    return s or "metric"


def _num(v: float) -> str:
    return "nan" if v is None or (isinstance(v, float) and math.isnan(v)) else repr(float(v))


def read_metric_log(path) -> list[tuple[int, float]]:
    """The ``(iteration, value)`` rows of one metric's epoch log."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return [(int(r[0]), float(r[1])) for r in rows[1:] if r]


def read_epochs_csv(path) -> list[dict[str, float]]:
    """The rows of a split's ``epochs.csv`` as dicts (``epoch`` is an int)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: (int(v) if k == "epoch" else float(v)) for k, v in r.items()} for r in rows]


class MetricLogger:
    """Collects step values per split and epoch, writes them as described above."""

    def __init__(self, directory):
        self.directory = os.fspath(directory)
        self._steps: dict[tuple[str, int], dict[str, list[tuple[int, float]]]] = {}
        self._names: dict[str, list[str]] = {}

    def epoch_dir(self, split: str, epoch: int) -> str:
        return os.path.join(self.directory, split, f"epoch-{epoch}")

    def log_item(self, split: str, epoch: int, iteration: int,
                 values: dict[str, float]) -> None:
        d = self._steps.setdefault((split, epoch), {})
        for name, v in values.items():
            d.setdefault(name, []).append((iteration, float(v)))

    def values(self, split: str, epoch: int, name: str) -> list[tuple[int, float]]:
        return list(self._steps.get((split, epoch), {}).get(name, []))

    def write_epoch(self, split: str, epoch: int) -> None:
        """Write the epoch's step logs (complete so far)."""
        d = self._steps.get((split, epoch))
        if not d:
            return
        directory = self.epoch_dir(split, epoch)
        os.makedirs(directory, exist_ok=True)
        for name, rows in d.items():
            text = "iteration,value\n" + "".join(f"{i},{_num(v)}\n" for i, v in rows)
            write_text_atomic(os.path.join(directory, metric_file_name(name) + ".csv"), text)

    def end_epoch(self, split: str, epoch: int, aggregates: dict[str, float]) -> None:
        """Write the epoch's step logs and its row of ``epochs.csv``; forget its steps."""
        self.write_epoch(split, epoch)
        self._steps.pop((split, epoch), None)
        if not aggregates:
            return
        path = os.path.join(self.directory, split, "epochs.csv")
        rows = {}
        names = list(self._names.get(split, []))
        if os.path.exists(path):
            try:
                for r in read_epochs_csv(path):
                    rows[r["epoch"]] = r
                    for k in r:
                        if k != "epoch" and k not in names:
                            names.append(k)
            except (OSError, ValueError, KeyError):
                rows = {}
        for k in aggregates:
            if k not in names:
                names.append(k)
        self._names[split] = names
        rows[epoch] = {"epoch": epoch, **aggregates}
        buf = io.StringIO()
        buf.write(",".join(["epoch"] + names) + "\n")
        for e in sorted(rows):
            if e > epoch:        # a resumed run rewrites the epochs after its start
                continue
            buf.write(",".join([str(e)] + [_num(rows[e].get(n, math.nan)) for n in names])
                      + "\n")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_text_atomic(path, buf.getvalue())

    def resume_epoch(self, split: str, epoch: int, upto_iteration: int,
                     names: list[str]) -> None:
        """Load the step logs of a stopped epoch to continue them, keeping the rows up to
        ``upto_iteration`` (the steps the checkpoint includes)."""
        directory = self.epoch_dir(split, epoch)
        d = {}
        for name in names:
            path = os.path.join(directory, metric_file_name(name) + ".csv")
            try:
                rows = read_metric_log(path)
            except (OSError, ValueError, IndexError):
                continue
            d[name] = [(i, v) for i, v in rows if i <= upto_iteration]
        self._steps[(split, epoch)] = d

    def clear_epoch_dirs_after(self, split: str, epoch: int) -> None:
        """Remove ``epoch-K`` log folders with K > ``epoch`` (a run resumed from an earlier
        checkpoint rewrites them)."""
        base = os.path.join(self.directory, split)
        if not os.path.isdir(base):
            return
        import shutil
        for fn in os.listdir(base):
            m = re.fullmatch(r"epoch-(\d+)", fn)
            if m and int(m.group(1)) > epoch:
                shutil.rmtree(os.path.join(base, fn), ignore_errors=True)
