"""`Learner`: the training loop (Burn's ``Learner``/``LearnerBuilder``).

```python
learner = Learner(model, em.optim.AdamW(), lr=1e-3,
                  train_loader=train, valid_loader=valid,
                  metrics=[Loss(), Accuracy()], artifact_dir="runs/digits", num_epochs=5)
result = learner.fit()          # result.model, result.summary
```

The model provides ``train_step(batch) -> TrainOutput(grads, item)`` and
``valid_step(batch) -> item`` (the `ClassificationModel` mixin writes both). Each epoch runs
every training batch (an optimizer step per batch, or per ``grad_accumulation`` batches),
then every validation batch with ``model.valid()`` under ``em.no_grad()``, logs the metrics,
saves a checkpoint and tells the renderer.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from .checkpoint import CheckpointConfig, Checkpointer, CheckpointInfo
from .early_stopping import EarlyStopping
from .logger import MetricLogger
from .metrics import IterationSpeed, ItemView, Metric, MetricContext, metric_from_name
from .outputs import TrainOutput
from .renderer.protocol import (EpochEvent, ItemEvent, MetricUpdate, NullRenderer, Progress,
                                StartEvent)
from .summary import MetricHistory, TrainingSummary

__all__ = ["Learner", "LearnerBuilder", "TrainingResult"]

_STATE_VERSION = 1


@dataclass
class TrainingResult:
    """What `Learner.fit` returns: the trained ``model`` and the ``summary``."""
    model: Any
    summary: TrainingSummary

    @property
    def interrupted(self) -> bool:
        return self.summary.stopped == "interrupted"

    @property
    def stopped_early(self) -> bool:
        return self.summary.stopped == "early stopping"


class _Stop(Exception):
    """Raised inside the loop when a stop was requested after a step."""


def _map_tensors(obj, fn):
    """``obj`` with every Tensor ``t`` replaced by ``fn(t)`` inside tuples, lists, dicts,
    namedtuples and dataclasses (the batch moved to the model's device)."""
    from ..tensor import Tensor
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, tuple):
        items = [_map_tensors(v, fn) for v in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [_map_tensors(v, fn) for v in obj]
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for f in dataclasses.fields(obj):
            if not f.init:
                continue
            v = getattr(obj, f.name)
            nv = _map_tensors(v, fn)
            if nv is not v:
                changes[f.name] = nv
        return dataclasses.replace(obj, **changes) if changes else obj
    return obj


def _to_device(batch, device):
    def move(t):
        return t if t.device is device else t.to_device(device)
    return _map_tensors(batch, move)


def _chunks(loader, n: int):
    """The loader's batches in lists of ``n`` (the last may be shorter)."""
    chunk = []
    for b in loader:
        chunk.append(b)
        if len(chunk) == n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _loader_len(loader) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None


def _set_loader_epoch(loader, epoch: int) -> None:
    """Tell a loader which epoch it is serving (its shuffle order), so a resumed run sees
    the same order as an uninterrupted one. Loaders count epochs from 0."""
    fn = getattr(loader, "set_epoch", None)
    if callable(fn):
        fn(epoch - 1)


def _loader_seed(loader):
    seed = getattr(loader, "seed", None)
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def _mix_seed(seed: int, *parts: int) -> int:
    h = seed & 0xFFFFFFFFFFFFFFFF
    for p in parts:
        h = (h ^ (p + 0x9E3779B97F4A7C15 + (h << 6) + (h >> 2))) & 0xFFFFFFFFFFFFFFFF
    return h % (2**63)


class Learner:
    """Trains a model; see the module docstring.

    Arguments:

    - ``model``: a Module with ``train_step``/``valid_step``.
    - ``optimizer``: ``model = optimizer.step(lr, model, grads)`` (ember.optim).
    - ``lr``: a float, a scheduler (``step() -> lr`` once per optimizer step, with
      ``state_dict``/``load_state_dict`` for checkpoints), or None (the optimizer's own lr).
    - ``train_loader``, ``valid_loader``: iterables of batches (ember.data.DataLoader); may
      also be given to ``fit``. A loader with ``set_epoch(n)`` is told each epoch.
    - ``metrics``: `Metric` objects or names, measured on both splits (a metric whose
      ``splits`` is ``("train",)``, like ``lr``, on training only); ``train_metrics``,
      ``valid_metrics``: per split instead. Default: loss (and accuracy for classification
      items).
    - ``artifact_dir``: where checkpoints, logs and the summary go (None: nothing written,
      no checkpoints, no resume).
    - ``num_epochs``.
    - ``checkpoint``: a `CheckpointConfig`, an int (``keep_last``), True (defaults) or
      False/None (none).
    - ``resume``: False; True (the latest checkpoint in ``artifact_dir``, a fresh start when
      there is none); an int (the end-of-epoch checkpoint of that epoch); or a checkpoint
      directory name. Without resume, the learner's own files in ``artifact_dir``
      (``checkpoint/``, ``train/``, ``valid/``, ``summary.*``) from an earlier run are removed.
    - ``early_stopping``: an `EarlyStopping`.
    - ``grad_accumulation``: batches per optimizer step (their mean gradient).
    - ``devices``: the devices to train on; the first holds the model and the optimizer
      state. With several, each optimizer step takes one batch per device, runs the
      ``train_step``s in parallel threads on copies of the model and averages the gradients
      on the first (Burn's multi-device training). Default: the model's device.
    - ``renderer``: ``"auto"`` (the dashboard when stdout is a terminal and Textual is
      installed, else plain lines), ``"plain"``, ``"dashboard"``, None (silent) or an object
      following the renderer protocol (``ember.train.renderer``).
    - ``seed``: when given, each step's random stream (dropout...) is seeded from
      ``(seed, step)``, so a resumed run repeats an uninterrupted one exactly.
    - ``summary``: print the summary at the end (it is saved either way).
    """

    def __init__(self, model, optimizer, lr=None, *, train_loader=None, valid_loader=None,
                 metrics=None, train_metrics=None, valid_metrics=None, artifact_dir=None,
                 num_epochs: int = 1, checkpoint=True, resume=False,
                 early_stopping: EarlyStopping | None = None, grad_accumulation: int = 1,
                 devices=None, renderer="auto", seed: int | None = None,
                 summary: bool = True, handle_sigint: bool = True):
        if num_epochs < 1:
            raise ValueError(f"Learner: num_epochs must be >= 1, got {num_epochs}")
        if grad_accumulation < 1:
            raise ValueError(f"Learner: grad_accumulation must be >= 1, got "
                             f"{grad_accumulation}")
        for name in ("train_step", "valid_step"):
            if not callable(getattr(model, name, None)):
                raise TypeError(f"Learner: the model ({type(model).__name__}) has no {name}(); "
                                f"define train_step(batch) -> TrainOutput and valid_step(batch) "
                                f"-> item, or mix in ember.train.ClassificationModel")
        self.model = model
        self.optimizer = optimizer
        if lr is None or isinstance(lr, (int, float)):
            from ..optim import ConstantLr
            self.scheduler = None if lr is None else ConstantLr(lr)
        elif callable(getattr(lr, "step", None)):
            self.scheduler = lr
        else:
            raise TypeError(f"Learner: lr must be a float, a scheduler with step() or None, "
                            f"got {type(lr).__name__}")
        self.train_loader = train_loader
        self.valid_loader = valid_loader
        self._metric_spec = (metrics, train_metrics, valid_metrics)
        self.artifact_dir = None if artifact_dir is None else os.fspath(artifact_dir)
        self.num_epochs = int(num_epochs)
        if checkpoint is True:
            checkpoint = CheckpointConfig()
        elif checkpoint is False or checkpoint is None:
            checkpoint = None
        elif isinstance(checkpoint, int):
            checkpoint = CheckpointConfig(keep_last=checkpoint)
        elif not isinstance(checkpoint, CheckpointConfig):
            raise TypeError(f"Learner: checkpoint must be a CheckpointConfig, an int, True or "
                            f"False, got {type(checkpoint).__name__}")
        self.checkpoint_config = checkpoint
        if resume and self.artifact_dir is None:
            raise ValueError("Learner: resume needs an artifact_dir to find checkpoints in")
        self.resume = resume
        self.early_stopping = early_stopping
        self.grad_accumulation = int(grad_accumulation)
        self.devices = list(devices) if devices is not None else None
        self.renderer = renderer
        self.seed = seed
        self.print_summary = summary
        self.handle_sigint = handle_sigint
        self._stop_event = threading.Event()
        self._sigint_count = 0
        self._critical = False
        self._pending_interrupt = False
        self.result: TrainingResult | None = None
        self._fitted = False

    # -- public controls -------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to stop after the current step (thread-safe); it saves a checkpoint
        and `fit` returns with ``summary.stopped == "interrupted"``."""
        self._stop_event.set()

    @property
    def interrupted_by_signal(self) -> bool:
        """True when a Ctrl-C (SIGINT) stopped the last `fit`."""
        return self._sigint_count > 0

    @property
    def checkpoint_dir(self) -> str | None:
        return None if self.artifact_dir is None else os.path.join(self.artifact_dir,
                                                                    "checkpoint")

    def checkpoints(self) -> list[CheckpointInfo]:
        return [] if self.checkpoint_dir is None else Checkpointer(self.checkpoint_dir).list()

    def fit(self, train_loader=None, valid_loader=None) -> TrainingResult:
        """Train; returns a `TrainingResult`. The renderer drives: the dashboard runs its UI
        in this thread and the loop in a worker thread; other renderers run the loop here."""
        if train_loader is not None:
            self.train_loader = train_loader
        if valid_loader is not None:
            self.valid_loader = valid_loader
        if self.train_loader is None:
            raise ValueError("Learner.fit: no train_loader (give it to Learner(...) or fit())")
        if self._fitted and not self.resume:
            raise RuntimeError("Learner.fit: this learner has trained already (its optimizer "
                               "and schedule moved on); build a new Learner, or set "
                               "learner.resume = True to continue from its checkpoints")
        self._fitted = True
        self._stop_event.clear()
        self._sigint_count = 0
        self._pending_interrupt = False
        renderer = self._make_renderer()
        self._renderer = renderer
        run = getattr(renderer, "run", None)
        result = run(self.run_loop) if callable(run) else self.run_loop()
        self.result = result
        if self.print_summary and result is not None:
            print(result.summary.text())
        return result

    # -- renderer --------------------------------------------------------------------------
    def _make_renderer(self):
        r = self.renderer
        if r is None:
            return NullRenderer()
        if isinstance(r, str):
            if r == "auto":
                r = "dashboard" if _stdout_is_tty() and _have_textual() else "plain"
            if r == "plain":
                from .renderer.plain import PlainRenderer
                return PlainRenderer()
            if r == "dashboard":
                from .renderer.dashboard import DashboardRenderer
                return DashboardRenderer()
            raise ValueError(f"Learner: renderer must be 'auto', 'plain', 'dashboard', None or "
                             f"a renderer object, got {r!r}")
        return r

    # -- metrics ---------------------------------------------------------------------------
    def _build_metrics(self, split: str) -> list[Metric]:
        import copy
        both, train_only, valid_only = self._metric_spec
        own = train_only if split == "train" else valid_only
        if own is not None:
            spec = list(own)
            filt = False
        elif both is not None:
            spec = list(both)
            filt = True
        else:
            spec = None
            filt = False
        if spec is None:
            from .metrics import Accuracy, Loss
            from .outputs import ClassificationModel
            out = [Loss()]
            if isinstance(self.model, ClassificationModel):
                out.append(Accuracy())
        else:
            out = []
            for m in spec:
                m = metric_from_name(m) if isinstance(m, str) else copy.deepcopy(m)
                if filt and split not in getattr(m, "splits", ("train", "valid")):
                    continue
                out.append(m)
        names = [m.name for m in out]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"Learner: two {split} metrics are named {sorted(dup)}; metric "
                             f"names must be unique")
        return out

    # -- the loop --------------------------------------------------------------------------
    def run_loop(self) -> TrainingResult:
        """The training loop in the calling thread, with the renderer's callbacks (what
        `fit` runs, directly or in a worker thread)."""
        renderer = getattr(self, "_renderer", None) or self._make_renderer()
        self._renderer = renderer
        with self._sigint_guard():
            return self._loop(renderer)

    @contextlib.contextmanager
    def _sigint_guard(self):
        """In the main thread: the first Ctrl-C asks for a stop after the current step
        (a checkpoint is saved); a second one raises KeyboardInterrupt at once (but never in
        the middle of an optimizer step)."""
        installed = False
        old = None
        if (self.handle_sigint and threading.current_thread() is threading.main_thread()):
            try:
                old = signal.getsignal(signal.SIGINT)
                if old is signal.default_int_handler:
                    signal.signal(signal.SIGINT, self._on_sigint)
                    installed = True
            except (ValueError, OSError):
                installed = False
        try:
            yield
        finally:
            if installed:
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(signal.SIGINT, old)

    def _on_sigint(self, signum, frame):
        self._sigint_count += 1
        if self._sigint_count == 1:
            self._stop_event.set()
            with contextlib.suppress(Exception):
                sys.stderr.write("\nstopping after this step (a checkpoint is saved); "
                                 "Ctrl-C again to abort\n")
                sys.stderr.flush()
            return
        if self._critical:
            self._pending_interrupt = True
            return
        raise KeyboardInterrupt

    def _should_stop(self, renderer) -> bool:
        if self._stop_event.is_set():
            return True
        try:
            if renderer.should_stop():
                self._stop_event.set()
                return True
        except AttributeError:
            pass
        return False

    def _loop(self, renderer) -> TrainingResult:
        import ember as em
        from ..optim.accumulation import GradientsAccumulator

        t_start = time.perf_counter()
        train_metrics = self._build_metrics("train")
        valid_metrics = self._build_metrics("valid") if self.valid_loader is not None else []
        history = MetricHistory()
        for m in train_metrics + valid_metrics:
            history.meta[m.name] = {"higher_is_better": m.higher_is_better, "kind": m.kind}

        # devices and the model on them
        model = self.model
        devices = self.devices or (model.devices()[:1] or [em.default_device()])
        devices = [d.autodiff() if not d.backend.is_autodiff else d for d in devices]
        main = devices[0]
        inner = main.without_autodiff()
        self._devices = devices
        model = model.fork(main).train()

        # artifacts
        ckpt_cfg = self.checkpoint_config if self.artifact_dir is not None else None
        checkpointer = Checkpointer(self.checkpoint_dir) if self.artifact_dir else None
        logger = MetricLogger(self.artifact_dir) if self.artifact_dir else None
        es = self.early_stopping
        if es is not None:
            hib = next((m.higher_is_better for m in
                        (train_metrics if es.split == "train" else valid_metrics)
                        if m.name == es.metric), None)
            if not any(m.name == es.metric for m in
                       (train_metrics if es.split == "train" else valid_metrics)):
                raise ValueError(f"Learner: early stopping watches {es.split} {es.metric!r}, "
                                 f"which is not among the {es.split} metrics "
                                 f"{[m.name for m in (train_metrics if es.split == 'train' else valid_metrics)]}")
            es.resolve_mode(hib)
        best_key = None
        best_mode = None
        if ckpt_cfg is not None and ckpt_cfg.best_metric is not None:
            split = ckpt_cfg.best_split if valid_metrics else "train"
            ms = train_metrics if split == "train" else valid_metrics
            m = next((m for m in ms if m.name == ckpt_cfg.best_metric), None)
            if m is not None:
                best_key = (split, ckpt_cfg.best_metric)
                best_mode = ckpt_cfg.mode or ("max" if m.higher_is_better else "min")

        # resume or start fresh
        start_epoch, start_step, phase = 1, 0, "train"
        global_step = 0
        resumed_from = None
        partial_metrics = {}
        opt = self.optimizer
        sched = self.scheduler
        if self.artifact_dir is not None:
            os.makedirs(self.artifact_dir, exist_ok=True)
            checkpointer.clean_temporaries()
            info = self._resume_info(checkpointer)
            if info is not None:
                model, st = checkpointer.load(info, model, opt, sched)
                model = model.fork(main).train()
                history = MetricHistory.from_dict(st["history"])
                for m in train_metrics + valid_metrics:
                    history.meta.setdefault(m.name, {"higher_is_better": m.higher_is_better,
                                                     "kind": m.kind})
                global_step = int(st["global_step"])
                if st["step"] is None:
                    start_epoch, start_step, phase = st["epoch"] + 1, 0, "train"
                else:
                    start_epoch, start_step = st["epoch"], int(st["step"])
                    phase = st.get("phase", "train")
                    partial_metrics = st.get("partial_metrics", {})
                if es is not None and st.get("early_stopping"):
                    es.load_state_dict(st["early_stopping"])
                history.truncate(start_epoch - 1)
                resumed_from = info.name
                if st.get("seed") is not None and self.seed is None:
                    self.seed = st["seed"]
                # the shuffle order of the epochs to come is the one the run started with
                # (a loader built with seed=None draws a new seed in every process)
                saved = st.get("loader_seed")
                if saved is not None and _loader_seed(self.train_loader) not in (None, saved):
                    self.train_loader.seed = saved
                # drop checkpoints that lie after the one resumed from, and their logs
                for c in checkpointer.list():
                    if c.order > info.order:
                        shutil.rmtree(c.path, ignore_errors=True)
                for split in ("train", "valid"):
                    logger.clear_epoch_dirs_after(split, start_epoch if phase != "train" or
                                                  start_step else start_epoch - 1)
            else:
                _clean_artifacts(self.artifact_dir)

        n_train = _loader_len(self.train_loader)
        self._n_train = n_train
        n_valid = _loader_len(self.valid_loader) if self.valid_loader is not None else None
        start_event = StartEvent(
            num_epochs=self.num_epochs, start_epoch=start_epoch,
            train_metrics=[m.name for m in train_metrics],
            valid_metrics=[m.name for m in valid_metrics], train_iterations=n_train,
            valid_iterations=n_valid, resumed_from=resumed_from, history=history)
        on_start = getattr(renderer, "on_start", None)
        if callable(on_start):
            on_start(start_event)

        self._state = {"model": model, "global_step": global_step}
        self._resumed_from = resumed_from
        stopped = "finished"
        last_ckpt = None
        best_ckpt = None
        if checkpointer is not None and best_key is not None:
            b = history.best(*best_key, best_mode == "max")
            if b is not None:
                c = checkpointer.find(b[0])
                best_ckpt = c.path if c else None
        acc = GradientsAccumulator()
        epoch = start_epoch - 1
        epochs_done = start_epoch - 1
        run_t0 = time.perf_counter()

        self._lr_now = None
        self._logger = logger
        self._train_steps_done = start_step
        self._phase = (phase, start_epoch, start_step)
        try:
            for epoch in range(start_epoch, self.num_epochs + 1):
                epoch_t0 = time.perf_counter()
                skip = start_step if epoch == start_epoch else 0
                this_phase = phase if epoch == start_epoch else "train"
                # ---- training ----
                for m in train_metrics:
                    m.reset()
                if epoch == start_epoch and partial_metrics:
                    for m in train_metrics:
                        if m.name in partial_metrics.get("train", {}):
                            m.load_state_dict(partial_metrics["train"][m.name])
                if logger is not None and skip:
                    logger.resume_epoch("train", epoch, skip, [m.name for m in train_metrics])
                if this_phase == "train":
                    _set_loader_epoch(self.train_loader, epoch)
                    self._train_epoch(epoch, skip, model_devices=devices, inner=inner,
                                      metrics=train_metrics, logger=logger, renderer=renderer,
                                      acc=acc, n_iter=n_train, run_t0=run_t0)
                # ---- validation ----
                self._phase = ("valid", epoch, n_train if n_train is not None else
                               self._train_steps_done)
                if self.valid_loader is not None:
                    for m in valid_metrics:
                        m.reset()
                    _set_loader_epoch(self.valid_loader, epoch)
                    self._valid_epoch(epoch, inner=inner, metrics=valid_metrics,
                                      logger=logger, renderer=renderer, n_iter=n_valid,
                                      run_t0=run_t0)
                # ---- epoch end ----
                train_vals = {m.name: m.value() for m in train_metrics}
                valid_vals = {m.name: m.value() for m in valid_metrics}
                history.record("train", epoch, train_vals)
                if valid_metrics:
                    history.record("valid", epoch, valid_vals)
                if logger is not None:
                    logger.end_epoch("train", epoch, train_vals)
                    if valid_metrics:
                        logger.end_epoch("valid", epoch, valid_vals)
                epochs_done = epoch
                stop_early = False
                if es is not None:
                    v = (train_vals if es.split == "train" else valid_vals).get(es.metric,
                                                                                 math.nan)
                    stop_early = es.update(epoch, v)
                best = history.best(*best_key, best_mode == "max") if best_key else None
                ckpt_path = None
                if checkpointer is not None and ckpt_cfg is not None:
                    info = self._save_checkpoint(checkpointer, epoch, None, history,
                                                 partial=None)
                    ckpt_path = last_ckpt = info.path
                    keep = set()
                    if best is not None:
                        keep.add(Checkpointer.name_for(best[0], None))
                        bc = checkpointer.find(best[0])
                        best_ckpt = bc.path if bc else None
                    checkpointer.prune(ckpt_cfg.keep_last, keep)
                fmt = {"train": {m.name: m.format(train_vals[m.name]) for m in train_metrics},
                       "valid": {m.name: m.format(valid_vals[m.name]) for m in valid_metrics}}
                renderer.on_epoch_end(EpochEvent(
                    epoch=epoch, num_epochs=self.num_epochs, train=train_vals, valid=valid_vals,
                    formatted=fmt, seconds=time.perf_counter() - epoch_t0,
                    checkpoint=ckpt_path, best_epoch=best[0] if best else None))
                if stop_early:
                    stopped = "early stopping"
                    break
                if self._should_stop(renderer) and epoch < self.num_epochs:
                    stopped = "interrupted"
                    break
        except _Stop:
            stopped = "interrupted"
            if checkpointer is not None and ckpt_cfg is not None:
                last_ckpt = self._save_partial(checkpointer, history, train_metrics)
                if last_ckpt is None:
                    latest = checkpointer.latest()
                    last_ckpt = latest.path if latest else None
        except KeyboardInterrupt:
            stopped = "interrupted"
            if checkpointer is not None and ckpt_cfg is not None:
                with contextlib.suppress(Exception):
                    last_ckpt = self._save_partial(checkpointer, history, train_metrics)
                if last_ckpt is None:
                    latest = checkpointer.latest()
                    last_ckpt = latest.path if latest else None
            self._finish(renderer, history, epochs_done, stopped, t_start, best_key,
                         best_mode, last_ckpt, best_ckpt)
            raise
        return self._finish(renderer, history, epochs_done, stopped, t_start, best_key,
                            best_mode, last_ckpt, best_ckpt)

    def _finish(self, renderer, history, epochs_done, stopped, t_start, best_key, best_mode,
                last_ckpt, best_ckpt) -> TrainingResult:
        best = history.best(*best_key, best_mode == "max") if best_key else None
        summary = TrainingSummary(
            history=history, num_epochs=self.num_epochs, epochs_done=epochs_done,
            stopped=stopped, seconds=time.perf_counter() - t_start, best_metric=best_key,
            best=best, last_checkpoint=last_ckpt, best_checkpoint=best_ckpt,
            resumed_from=self._resumed_from)
        if self.artifact_dir is not None:
            with contextlib.suppress(OSError):
                summary.save(self.artifact_dir)
        model = self._state["model"]
        result = TrainingResult(model=model, summary=summary)
        self.result = result
        renderer.on_end(summary)
        return result

    def _resume_info(self, checkpointer) -> CheckpointInfo | None:
        r = self.resume
        if r is False or r is None:
            return None
        if r is True:
            return checkpointer.latest()
        if isinstance(r, int):
            info = checkpointer.find(r)
            if info is None:
                have = [c.name for c in checkpointer.list()]
                raise FileNotFoundError(f"Learner: no checkpoint of epoch {r} in "
                                        f"{checkpointer.directory}; there are: {have or 'none'}")
            return info
        info = checkpointer.get(str(r))
        if info is None:
            have = [c.name for c in checkpointer.list()]
            raise FileNotFoundError(f"Learner: no checkpoint {r!r} in {checkpointer.directory}; "
                                    f"there are: {have or 'none'}")
        return info

    # -- one epoch -------------------------------------------------------------------------
    def _seed_step(self, device, step: int) -> None:
        if self.seed is not None:
            device.seed(_mix_seed(self.seed, step))

    def _train_epoch(self, epoch, skip, *, model_devices, inner, metrics, logger, renderer,
                     acc, n_iter, run_t0):
        main = model_devices[0]
        for m in metrics:
            if isinstance(m, IterationSpeed):
                m.start(time.perf_counter())
        k = self.grad_accumulation
        ndev = len(model_devices)
        per_step = k * ndev                 # batches per optimizer step
        items = 0
        it = 0
        self._train_steps_done = skip
        self._phase = ("train", epoch, skip)
        ups = {}
        for chunk in _chunks(self.train_loader, ndev):
            first = it + 1
            it += len(chunk)
            if it <= skip:
                continue
            state = self._state
            model = state["model"]
            gstep = state["global_step"]
            micro = ((first - 1) % per_step) // ndev
            if ndev == 1:
                self._seed_step(main, gstep * k + micro)
                b = _to_device(chunk[0], main)
                grads, item = self._grads_of(model.train_step(b), model)
                outs = [(grads, item)]
            else:
                outs = self._parallel_steps(model, chunk, model_devices, gstep * k + micro)
            for grads, _ in outs:
                acc.add(grads)
            do_step = (it % per_step == 0) or (n_iter is not None and it >= n_iter)
            lr = self._lr_now
            if do_step:
                lr = self._next_lr()
                g = acc.take(mean=True)
                self._critical = True
                try:
                    new_model = self.optimizer.step(lr, model, g)
                    self._state = {"model": new_model, "global_step": gstep + 1}
                    self._train_steps_done = it
                    self._phase = ("train", epoch, it)
                finally:
                    self._critical = False
                if self._pending_interrupt:
                    self._pending_interrupt = False
                    raise KeyboardInterrupt
            now = time.perf_counter()
            for grads, item in outs:
                view = ItemView(item)
                ctx = MetricContext(split="train", lr=lr, batch_size=view.batch_size,
                                    epoch=epoch, iteration=it, now=now)
                items += ctx.batch_size
                ups = _update_metrics(metrics, view, ctx, logger)
            prog = Progress("train", epoch, self.num_epochs, it, n_iter, items,
                            self._state["global_step"], time.perf_counter() - run_t0)
            renderer.on_train_item(ItemEvent(prog, ups))
            if do_step and self._should_stop(renderer):
                raise _Stop
        if acc.count:           # an unfinished accumulation at the end of a loader of no len
            lr = self._next_lr()
            state = self._state
            self._critical = True
            try:
                new_model = self.optimizer.step(lr, state["model"], acc.take(mean=True))
                self._state = {"model": new_model, "global_step": state["global_step"] + 1}
            finally:
                self._critical = False
        self._train_steps_done = it
        self._phase = ("train", epoch, it)

    def _next_lr(self):
        lr = self.scheduler.step() if self.scheduler is not None else None
        if lr is None:
            lr = getattr(self.optimizer, "lr", None)
        self._lr_now = lr
        return lr

    def _grads_of(self, out, model):
        from ..module import GradientsParams
        if not isinstance(out, TrainOutput):
            if isinstance(out, tuple) and len(out) == 2:
                out = TrainOutput(*out)
            else:
                raise TypeError(f"Learner: train_step must return TrainOutput(grads, item), "
                                f"got {type(out).__name__}")
        grads = out.grads
        if not isinstance(grads, GradientsParams):
            grads = GradientsParams.from_grads(grads, model)
        return grads, out.item

    def _parallel_steps(self, model, batches, devices, seed_step):
        """One batch per device, in threads, each on a copy of the model on its device;
        the gradients are moved to the first device."""
        from concurrent.futures import ThreadPoolExecutor
        inner = devices[0].without_autodiff()
        pool = getattr(self, "_pool", None)
        if pool is None or pool._max_workers < len(devices):
            pool = self._pool = ThreadPoolExecutor(max_workers=len(devices),
                                                   thread_name_prefix="ember-learner")

        def work(i, batch):
            dev = devices[i]
            m = model if i == 0 else model.fork(dev)
            self._seed_step(dev, seed_step * len(devices) + i)
            b = _to_device(batch, dev)
            grads, item = self._grads_of(m.train_step(b), m)
            if i:
                grads = grads.to_device(inner)
            return grads, item

        futs = [pool.submit(work, i, b) for i, b in enumerate(batches)]
        return [f.result() for f in futs]

    def _valid_epoch(self, epoch, *, inner, metrics, logger, renderer, n_iter, run_t0):
        import ember as em
        model = self._state["model"].valid()
        speed = [m for m in metrics if isinstance(m, IterationSpeed)]
        for m in speed:
            m.start(time.perf_counter())
        it = 0
        items = 0
        for batch in self.valid_loader:
            it += 1
            with em.no_grad():
                item = model.valid_step(_to_device(batch, inner))
            view = ItemView(item)
            now = time.perf_counter()
            ctx = MetricContext(split="valid", lr=None, batch_size=view.batch_size,
                                epoch=epoch, iteration=it, now=now)
            items += ctx.batch_size
            ups = _update_metrics(metrics, view, ctx, logger)
            prog = Progress("valid", epoch, self.num_epochs, it, n_iter, items,
                            self._state["global_step"], time.perf_counter() - run_t0)
            renderer.on_valid_item(ItemEvent(prog, ups))
            if self._should_stop(renderer):
                raise _Stop

    # -- checkpoints -----------------------------------------------------------------------
    def _learner_state(self, epoch, step, history, *, phase="train", partial=None) -> dict:
        st = {"version": _STATE_VERSION, "epoch": epoch, "step": step, "phase": phase,
              "global_step": self._state["global_step"], "num_epochs": self.num_epochs,
              "history": history.to_dict(), "seed": self.seed,
              "loader_seed": _loader_seed(self.train_loader),
              "grad_accumulation": self.grad_accumulation, "time": time.time()}
        if self.early_stopping is not None:
            st["early_stopping"] = self.early_stopping.state_dict()
        if partial is not None:
            st["partial_metrics"] = partial
        return st

    def _save_checkpoint(self, checkpointer, epoch, step, history, *, phase="train",
                         partial=None) -> CheckpointInfo:
        return checkpointer.save(
            epoch, step, model=self._state["model"], optimizer=self.optimizer,
            scheduler=self.scheduler,
            learner_state=self._learner_state(epoch, step, history, phase=phase,
                                              partial=partial))

    def _save_partial(self, checkpointer, history, train_metrics) -> str | None:
        """The checkpoint of a run stopped mid-epoch: the model after the last completed
        optimizer step, the epoch and the steps done in it (a stop during validation resumes
        at that epoch's validation)."""
        split, epoch, step = getattr(self, "_phase", ("train", 1, 0))
        if split == "train" and step == 0:
            # nothing trained in this epoch: the previous epoch's checkpoint is the state
            return None
        per_step = self.grad_accumulation * len(getattr(self, "_devices", [None]))
        if split == "train" and step % per_step and step != getattr(self, "_n_train", None):
            step -= step % per_step       # an unfinished accumulation is redone
            if step == 0:
                return None
        partial = {"train": {m.name: m.state_dict() for m in train_metrics}}
        info = self._save_checkpoint(checkpointer, epoch, step, history, phase=split,
                                     partial=partial)
        logger = getattr(self, "_logger", None)
        if logger is not None:      # the epoch's training steps so far (all, if in validation)
            with contextlib.suppress(OSError):
                logger.write_epoch("train", epoch)
        return info.path



def _update_metrics(metrics, view, ctx, logger) -> dict:
    """Feed one step's item to every metric; log the step's values; return the updates the
    renderer shows."""
    vals, ups = {}, {}
    for m in metrics:
        v = m.update(view, ctx)
        vals[m.name] = v
        ev = m.value()
        ups[m.name] = MetricUpdate(m.name, v, ev, m.format(ev), m.higher_is_better)
    if logger is not None:
        logger.log_item(ctx.split, ctx.epoch, ctx.iteration, vals)
    return ups

class LearnerBuilder:
    """Burn's builder, for those who like it:

    ```python
    learner = (LearnerBuilder("runs/x").metrics(Loss(), Accuracy()).num_epochs(5)
               .checkpoint(keep_last=2).early_stopping("loss", patience=3)
               .build(model, optimizer, lr=1e-3))
    result = learner.fit(train_loader, valid_loader)
    ```
    """

    def __init__(self, artifact_dir=None):
        self._kw: dict = {"artifact_dir": artifact_dir}

    def metrics(self, *metrics) -> "LearnerBuilder":
        self._kw["metrics"] = list(metrics)
        return self

    def metric_train(self, *metrics) -> "LearnerBuilder":
        self._kw.setdefault("train_metrics", []).extend(metrics)
        return self

    def metric_valid(self, *metrics) -> "LearnerBuilder":
        self._kw.setdefault("valid_metrics", []).extend(metrics)
        return self

    def num_epochs(self, n: int) -> "LearnerBuilder":
        self._kw["num_epochs"] = n
        return self

    def checkpoint(self, keep_last: int | None = 2, best_metric: str | None = "loss",
                   best_split: str = "valid", mode: str | None = None) -> "LearnerBuilder":
        self._kw["checkpoint"] = CheckpointConfig(keep_last, best_metric, best_split, mode)
        return self

    def no_checkpoint(self) -> "LearnerBuilder":
        self._kw["checkpoint"] = False
        return self

    def resume(self, which=True) -> "LearnerBuilder":
        self._kw["resume"] = which
        return self

    def early_stopping(self, metric: str = "loss", **kw) -> "LearnerBuilder":
        self._kw["early_stopping"] = EarlyStopping(metric, **kw)
        return self

    def grad_accumulation(self, n: int) -> "LearnerBuilder":
        self._kw["grad_accumulation"] = n
        return self

    def devices(self, devices) -> "LearnerBuilder":
        self._kw["devices"] = list(devices)
        return self

    def renderer(self, renderer) -> "LearnerBuilder":
        self._kw["renderer"] = renderer
        return self

    def seed(self, seed: int) -> "LearnerBuilder":
        self._kw["seed"] = seed
        return self

    def summary(self, flag: bool = True) -> "LearnerBuilder":
        self._kw["summary"] = flag
        return self

    def build(self, model, optimizer, lr=None) -> Learner:
        return Learner(model, optimizer, lr, **self._kw)


def _clean_artifacts(directory: str) -> None:
    """Remove what an earlier run of a Learner wrote into ``directory`` (its checkpoints,
    epoch logs and summary) and nothing else."""
    import re
    cdir = os.path.join(directory, "checkpoint")
    if os.path.isdir(cdir):
        for fn in os.listdir(cdir):
            if re.fullmatch(r"epoch-\d+(-step-\d+)?", fn) or fn.startswith((".tmp-", ".old-")):
                shutil.rmtree(os.path.join(cdir, fn), ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(cdir)
    for split in ("train", "valid"):
        sdir = os.path.join(directory, split)
        if not os.path.isdir(sdir):
            continue
        for fn in os.listdir(sdir):
            path = os.path.join(sdir, fn)
            if re.fullmatch(r"epoch-\d+", fn) and os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif fn == "epochs.csv":
                with contextlib.suppress(OSError):
                    os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(sdir)
    for fn in ("summary.txt", "summary.json"):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, fn))


def _stdout_is_tty() -> bool:
    try:
        return sys.stdout.isatty() and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def _have_textual() -> bool:
    try:
        import textual  # noqa: F401
        return True
    except ImportError:
        return False
