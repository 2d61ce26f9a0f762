"""Checkpoints: the model's record, the optimizer's and the scheduler's state, and the
learner's state, in one directory per checkpoint under ``<artifact_dir>/checkpoint/``:

- ``epoch-<E>/``: after epoch E (training and validation) ended;
- ``epoch-<E>-step-<I>/``: a run stopped in epoch E after I training steps (``q``, Ctrl-C).

Each holds ``model.safetensors``, ``optim.safetensors`` (when the optimizer can save),
``scheduler.json`` (when the scheduler has a state) and ``learner.json``. A checkpoint is
written ATOMICALLY: into a hidden temporary directory next to it, every file fsynced, then
renamed into place (and the parent fsynced); a crash mid-write leaves the previous
checkpoints intact and at most a ``.tmp-*`` directory, which the next run removes.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass

from ._io import fsync_dir, fsync_tree

__all__ = ["CheckpointConfig", "Checkpointer", "CheckpointInfo"]

MODEL_FILE = "model.safetensors"
OPTIM_FILE = "optim.safetensors"
SCHEDULER_FILE = "scheduler.json"
LEARNER_FILE = "learner.json"
_NAME = re.compile(r"epoch-(\d+)(?:-step-(\d+))?")


@dataclass
class CheckpointConfig:
    """``keep_last``: how many end-of-epoch checkpoints to keep (None: all); the checkpoint
    of the best epoch by ``best_metric`` on ``best_split`` is kept besides them (``mode``
    "min"/"max", by default the metric's direction). ``best_metric=None`` keeps no best."""
    keep_last: int | None = 2
    best_metric: str | None = "loss"
    best_split: str = "valid"
    mode: str | None = None

    def __post_init__(self):
        if self.keep_last is not None and self.keep_last < 1:
            raise ValueError(f"CheckpointConfig: keep_last must be >= 1 or None, got "
                             f"{self.keep_last}")
        if self.best_split not in ("train", "valid"):
            raise ValueError(f"CheckpointConfig: best_split must be 'train' or 'valid', got "
                             f"{self.best_split!r}")
        if self.mode not in (None, "min", "max"):
            raise ValueError(f"CheckpointConfig: mode must be 'min', 'max' or None, got "
                             f"{self.mode!r}")


@dataclass(frozen=True)
class CheckpointInfo:
    name: str
    path: str
    epoch: int              # the epoch it belongs to
    step: int | None        # training steps done in that epoch (None: the epoch ended)

    @property
    def complete(self) -> bool:
        """True for an end-of-epoch checkpoint."""
        return self.step is None

    @property
    def order(self) -> tuple:
        # epoch-3-step-5 < epoch-3 (the end of epoch 3) < epoch-4-step-1
        return (self.epoch, 1 if self.step is None else 0, self.step or 0)

    def learner_state(self) -> dict:
        with open(os.path.join(self.path, LEARNER_FILE)) as f:
            return json.load(f)


class Checkpointer:
    """Saves, lists, loads and prunes the checkpoints in ``directory``."""

    def __init__(self, directory):
        self.directory = os.fspath(directory)

    # -- listing ---------------------------------------------------------------------------
    def list(self) -> list[CheckpointInfo]:
        """Valid checkpoints (a learner state present), oldest first."""
        if not os.path.isdir(self.directory):
            return []
        out = []
        for fn in os.listdir(self.directory):
            m = _NAME.fullmatch(fn)
            path = os.path.join(self.directory, fn)
            if not m or not os.path.isfile(os.path.join(path, LEARNER_FILE)):
                continue
            out.append(CheckpointInfo(fn, path, int(m.group(1)),
                                      None if m.group(2) is None else int(m.group(2))))
        return sorted(out, key=lambda c: c.order)

    def latest(self) -> CheckpointInfo | None:
        cps = self.list()
        return cps[-1] if cps else None

    def find(self, epoch: int) -> CheckpointInfo | None:
        """The end-of-epoch checkpoint of ``epoch``."""
        return next((c for c in self.list() if c.epoch == epoch and c.complete), None)

    def get(self, name: str) -> CheckpointInfo | None:
        return next((c for c in self.list() if c.name == name), None)

    @staticmethod
    def name_for(epoch: int, step: int | None) -> str:
        return f"epoch-{epoch}" if step is None else f"epoch-{epoch}-step-{step}"

    # -- saving ----------------------------------------------------------------------------
    def clean_temporaries(self) -> None:
        """Remove ``.tmp-*``/``.old-*`` directories left by an interrupted save."""
        if not os.path.isdir(self.directory):
            return
        for fn in os.listdir(self.directory):
            if fn.startswith((".tmp-", ".old-")):
                shutil.rmtree(os.path.join(self.directory, fn), ignore_errors=True)

    def save(self, epoch: int, step: int | None, *, model, optimizer=None, scheduler=None,
             learner_state: dict) -> CheckpointInfo:
        """Write a checkpoint atomically; an existing one of the same name is replaced."""
        name = self.name_for(epoch, step)
        os.makedirs(self.directory, exist_ok=True)
        tmp = os.path.join(self.directory, f".tmp-{name}-{uuid.uuid4().hex[:8]}")
        os.makedirs(tmp)
        try:
            model.save(os.path.join(tmp, MODEL_FILE))
            files = [MODEL_FILE]
            if optimizer is not None and hasattr(optimizer, "save"):
                optimizer.save(os.path.join(tmp, OPTIM_FILE))
                files.append(OPTIM_FILE)
            sched = _scheduler_state(scheduler)
            if sched is not None:
                with open(os.path.join(tmp, SCHEDULER_FILE), "w") as f:
                    json.dump(sched, f)
                files.append(SCHEDULER_FILE)
            state = dict(learner_state)
            state["files"] = files
            with open(os.path.join(tmp, LEARNER_FILE), "w") as f:
                json.dump(state, f, indent=1, allow_nan=True)
            fsync_tree(tmp)
            final = os.path.join(self.directory, name)
            old = None
            if os.path.exists(final):
                old = os.path.join(self.directory, f".old-{name}-{uuid.uuid4().hex[:8]}")
                os.rename(final, old)
            os.rename(tmp, final)
            fsync_dir(self.directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return CheckpointInfo(name, final, epoch, step)

    # -- loading ---------------------------------------------------------------------------
    def load(self, info: CheckpointInfo, model, optimizer=None, scheduler=None):
        """``(model, learner_state)``: the model with the checkpoint's record (a new module);
        the optimizer's and the scheduler's state are loaded in place."""
        state = info.learner_state()
        files = state.get("files", [])
        model = model.load_record(os.path.join(info.path, MODEL_FILE))
        if optimizer is not None and OPTIM_FILE in files and hasattr(optimizer, "load"):
            optimizer.load(os.path.join(info.path, OPTIM_FILE))
        if scheduler is not None and SCHEDULER_FILE in files:
            with open(os.path.join(info.path, SCHEDULER_FILE)) as f:
                _load_scheduler_state(scheduler, json.load(f))
        return model, state

    # -- pruning ---------------------------------------------------------------------------
    def prune(self, keep_last: int | None, keep: set[str] = frozenset()) -> list[str]:
        """Delete end-of-epoch checkpoints but the last ``keep_last`` and those named in
        ``keep``, and every mid-epoch checkpoint older than the newest checkpoint. Returns
        the names deleted."""
        cps = self.list()
        if not cps:
            return []
        newest = cps[-1]
        complete = [c for c in cps if c.complete]
        keep = set(keep) | {newest.name}
        if keep_last is None:
            keep |= {c.name for c in complete}
        else:
            keep |= {c.name for c in complete[-keep_last:]}
        gone = []
        for c in cps:
            if c.name in keep:
                continue
            shutil.rmtree(c.path, ignore_errors=True)
            gone.append(c.name)
        if gone:
            fsync_dir(self.directory)
        return gone


def _scheduler_state(scheduler):
    if scheduler is None:
        return None
    fn = getattr(scheduler, "state_dict", None)
    if fn is None:
        return None
    return _jsonable(fn())


def _load_scheduler_state(scheduler, state) -> None:
    fn = getattr(scheduler, "load_state_dict", None)
    if fn is not None:
        fn(state)


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (int, float, str, bool)):
        try:
            return v.item()
        except (TypeError, ValueError):
            pass
    if hasattr(v, "tolist"):
        return v.tolist()
    return v
