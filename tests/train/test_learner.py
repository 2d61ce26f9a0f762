"""The Learner: training, metric logs, summary, checkpoints (atomic, retention), resume
(exactly the uninterrupted run), early stopping, gradient accumulation, several devices,
renderers."""
from __future__ import annotations

import io
import json
import os
import signal
import threading

import numpy as np
import pytest

import ember as em
import ember.optim as optim
from ember import nn
from ember.data import DataLoader, TensorBatcher
from ember.train import (Accuracy, CallbackRenderer, CheckpointConfig, Checkpointer,
                         EarlyStopping, Learner, LearnerBuilder, LearningRate, Loss,
                         PlainRenderer, RegressionModel, Renderer)
from ember.train.logger import read_epochs_csv, read_metric_log

from .common import assert_same_weights, loaders, make_learner, make_model

STEPS = 10          # 320 training items in batches of 32
VALID_STEPS = 2     # 96 validation items in batches of 64


def _stop_at(step_holder, step):
    """A renderer that asks to stop once the learner has made ``step`` optimizer steps."""
    return CallbackRenderer(should_stop=lambda: step_holder[0]._state["global_step"] >= step)


def test_fit_trains_and_writes_logs_checkpoints_and_summary(tmp_path):
    learner = make_learner(tmp_path, epochs=3, metrics=[Loss(), Accuracy(), LearningRate()])
    result = learner.fit()
    s = result.summary
    assert s.stopped == "finished" and s.epochs_done == 3 and not result.interrupted
    h = s.history
    train_loss = [v for _, v in h.values("train", "loss")]
    assert len(train_loss) == 3 and train_loss[-1] < 0.7 * train_loss[0]
    assert h.values("valid", "accuracy")[-1][1] > 60.0
    assert "lr" not in h.names("valid")                  # the lr is a training metric

    # per-step logs: one row per step; their mean is the epoch's value (equal batches)
    for e in (1, 2, 3):
        rows = read_metric_log(tmp_path / "train" / f"epoch-{e}" / "loss.csv")
        assert [i for i, _ in rows] == list(range(1, STEPS + 1))
        assert np.mean([v for _, v in rows]) == pytest.approx(h.value("train", "loss", e))
        vrows = read_metric_log(tmp_path / "valid" / f"epoch-{e}" / "accuracy.csv")
        assert len(vrows) == VALID_STEPS
    epochs = read_epochs_csv(tmp_path / "valid" / "epochs.csv")
    assert [r["epoch"] for r in epochs] == [1, 2, 3]
    assert [r["loss"] for r in epochs] == pytest.approx([v for _, v in
                                                         h.values("valid", "loss")])

    # checkpoints: the last two and the best by valid loss
    names = [c.name for c in learner.checkpoints()]
    best = h.best("valid", "loss", higher_is_better=False)[0]
    assert set(names) == {"epoch-2", "epoch-3", f"epoch-{best}"}
    cp = tmp_path / "checkpoint" / "epoch-3"
    assert {"model.safetensors", "optim.safetensors", "scheduler.json",
            "learner.json"} <= set(os.listdir(cp))
    state = json.loads((cp / "learner.json").read_text())
    assert state["epoch"] == 3 and state["step"] is None and state["global_step"] == 3 * STEPS
    assert not [f for f in os.listdir(tmp_path / "checkpoint") if f.startswith(".")]

    # the summary: printed text and the saved files
    text = (tmp_path / "summary.txt").read_text()
    assert f"best epoch: {best}" in text and "3 of 3 epochs" in text
    for e in (1, 2, 3):
        assert f"\n      {e}  " in text or f"  {e}  " in text
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["epochs_done"] == 3 and saved["best"][0] == best

    # the checkpoint's model is the returned model
    reloaded = make_model().load_record(cp / "model.safetensors")
    assert_same_weights(reloaded, result.model)


def test_retention_keeps_the_last_n_and_the_best(tmp_path):
    # a falling lr makes epoch 1 the best by "max train lr"
    learner = make_learner(tmp_path, epochs=4, metrics=[Loss(), LearningRate()],
                           checkpoint=CheckpointConfig(keep_last=1, best_metric="lr",
                                                       best_split="train", mode="max"))
    s = learner.fit().summary
    assert s.best[0] == 1
    assert [c.name for c in learner.checkpoints()] == ["epoch-1", "epoch-4"]
    assert s.best_checkpoint.endswith("epoch-1") and s.last_checkpoint.endswith("epoch-4")


def test_a_failed_save_leaves_the_previous_checkpoints_intact(tmp_path):
    learner = make_learner(tmp_path, epochs=3)
    real_save = learner.optimizer.save
    calls = [0]

    def failing_save(path):
        calls[0] += 1
        if calls[0] == 2:        # the second checkpoint: the model is written, then this fails
            real_save(path)
            raise OSError("disk full (simulated)")
        real_save(path)

    learner.optimizer.save = failing_save
    with pytest.raises(OSError, match="disk full"):
        learner.fit()
    cps = Checkpointer(tmp_path / "checkpoint")
    assert [c.name for c in cps.list()] == ["epoch-1"]
    assert os.listdir(tmp_path / "checkpoint") == ["epoch-1"]      # no half-written one

    # what a crash (kill -9) mid-save leaves: a hidden temporary directory, ignored, then
    # removed by the next run; a directory without a learner state is not a checkpoint
    (tmp_path / "checkpoint" / ".tmp-epoch-2-deadbeef").mkdir()
    (tmp_path / "checkpoint" / ".tmp-epoch-2-deadbeef" / "model.safetensors").write_bytes(b"x")
    (tmp_path / "checkpoint" / "epoch-9").mkdir()
    assert [c.name for c in cps.list()] == ["epoch-1"]
    resumed = make_learner(tmp_path, epochs=3, resume=True).fit()
    assert resumed.summary.history.epochs() == [1, 2, 3]
    assert not [f for f in os.listdir(tmp_path / "checkpoint") if f.startswith(".")]


@pytest.mark.parametrize("accumulation", [1, 2])
def test_stop_mid_epoch_then_resume_equals_the_uninterrupted_run(tmp_path, accumulation):
    full = make_learner(tmp_path / "full", epochs=3, grad_accumulation=accumulation).fit()

    holder = [None]
    stop_step = 13 if accumulation == 1 else 8        # in epoch 2 either way
    learner = make_learner(tmp_path / "run", epochs=3, grad_accumulation=accumulation,
                           renderer=_stop_at(holder, stop_step))
    holder[0] = learner
    first = learner.fit()
    assert first.interrupted and first.summary.epochs_done == 1
    batches_done = stop_step * accumulation - STEPS
    assert first.summary.last_checkpoint.endswith(f"epoch-2-step-{batches_done}")

    again = make_learner(tmp_path / "run", epochs=3, grad_accumulation=accumulation,
                         resume=True)
    second = again.fit()
    assert second.summary.stopped == "finished" and second.summary.epochs_done == 3
    assert_same_weights(second.model, full.model)               # nothing lost, nothing redone
    for split in ("train", "valid"):
        for name in ("loss", "accuracy"):
            assert second.summary.history.values(split, name) == \
                full.summary.history.values(split, name)
    # the interrupted epoch's log has every step once
    rows = read_metric_log(tmp_path / "run" / "train" / "epoch-2" / "loss.csv")
    full_rows = read_metric_log(tmp_path / "full" / "train" / "epoch-2" / "loss.csv")
    assert rows == full_rows
    # the mid-epoch checkpoint is gone once later ones exist
    assert not [c for c in again.checkpoints() if not c.complete]


def test_stop_during_validation_resumes_at_the_validation(tmp_path):
    full = make_learner(tmp_path / "full", epochs=2).fit()
    seen = []
    r = CallbackRenderer(on_valid_item=lambda e: seen.append(e.progress.epoch),
                         should_stop=lambda: bool(seen))
    first = make_learner(tmp_path / "run", epochs=2, renderer=r).fit()
    assert first.interrupted and first.summary.epochs_done == 0
    cp = Checkpointer(tmp_path / "run" / "checkpoint").latest()
    assert cp.name == f"epoch-1-step-{STEPS}" and cp.learner_state()["phase"] == "valid"
    second = make_learner(tmp_path / "run", epochs=2, resume=True).fit()
    assert_same_weights(second.model, full.model)
    assert second.summary.history.values("train", "loss") == \
        full.summary.history.values("train", "loss")
    assert second.summary.history.values("valid", "loss") == \
        full.summary.history.values("valid", "loss")
    for split in ("train", "valid"):
        assert read_metric_log(tmp_path / "run" / split / "epoch-1" / "loss.csv") == \
            read_metric_log(tmp_path / "full" / split / "epoch-1" / "loss.csv")


def test_keyboard_interrupt_saves_a_checkpoint_and_resume_continues(tmp_path):
    full = make_learner(tmp_path / "full", epochs=2).fit()

    class Interrupt(Renderer):
        def on_train_item(self, event):
            if event.progress.global_step == 14:
                raise KeyboardInterrupt

    learner = make_learner(tmp_path / "run", epochs=2, renderer=Interrupt())
    with pytest.raises(KeyboardInterrupt):
        learner.fit()
    assert [c.name for c in learner.checkpoints()] == ["epoch-1", "epoch-2-step-4"]
    assert learner.result.interrupted
    resumed = make_learner(tmp_path / "run", epochs=2, resume=True).fit()
    assert_same_weights(resumed.model, full.model)
    assert resumed.summary.history.epochs() == [1, 2]


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signals are delivered to the main thread")
def test_first_sigint_stops_after_the_step_with_a_checkpoint(tmp_path):
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("a SIGINT handler is installed by the test runner")

    class SendSigint(Renderer):
        def on_train_item(self, event):
            if event.progress.global_step == 5:
                os.kill(os.getpid(), signal.SIGINT)

    learner = make_learner(tmp_path, epochs=2, renderer=SendSigint())
    result = learner.fit()
    assert result.interrupted and learner.interrupted_by_signal
    assert [c.name for c in learner.checkpoints()] == ["epoch-1-step-5"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler   # restored


def test_resume_from_an_earlier_epoch_replays_the_rest(tmp_path):
    first = make_learner(tmp_path, epochs=3, checkpoint=CheckpointConfig(keep_last=None)).fit()
    assert [c.name for c in Checkpointer(tmp_path / "checkpoint").list()] == \
        ["epoch-1", "epoch-2", "epoch-3"]
    again = make_learner(tmp_path, epochs=3, resume=1).fit()
    assert again.summary.history.epochs() == [1, 2, 3]
    assert_same_weights(again.model, first.model)
    with pytest.raises(FileNotFoundError, match="no checkpoint of epoch 7"):
        make_learner(tmp_path, epochs=3, resume=7).fit()


def test_early_stopping_and_its_state_across_a_resume(tmp_path):
    # lr 0: the model never changes, so the valid loss never improves after epoch 1
    learner = make_learner(tmp_path, epochs=10, lr=0.0,
                           early_stopping=EarlyStopping("loss", patience=2))
    s = learner.fit().summary
    assert s.stopped == "early stopping" and s.epochs_done == 3

    # two epochs now (one without improvement), the rest after a resume: stops at epoch 3
    make_learner(tmp_path / "b", epochs=2, lr=0.0,
                 early_stopping=EarlyStopping("loss", patience=2)).fit()
    s = make_learner(tmp_path / "b", epochs=10, lr=0.0, resume=True,
                     early_stopping=EarlyStopping("loss", patience=2)).fit().summary
    assert s.stopped == "early stopping" and s.epochs_done == 3

    with pytest.raises(ValueError, match="early stopping watches valid 'f1'"):
        make_learner(tmp_path / "c", epochs=1, early_stopping=EarlyStopping("f1")).fit()


def _sgd_run(tmp_path, batch, **kw):
    model = make_model(dropout=0.0)
    tl, vl = loaders(batch=batch, shuffle=False)
    return Learner(model, optim.SGD(), 0.1, train_loader=tl, valid_loader=vl,
                   artifact_dir=None, num_epochs=2, renderer=None, summary=False, **kw).fit()


def test_gradient_accumulation_equals_a_batch_twice_as_big(tmp_path):
    big = _sgd_run(tmp_path, 32)
    acc = _sgd_run(tmp_path, 16, grad_accumulation=2)
    assert_same_weights(acc.model, big.model, exact=False)
    steps = acc.summary.history.values("train", "loss")
    assert len(steps) == 2


def test_two_devices_average_their_gradients(tmp_path):
    single = _sgd_run(tmp_path, 32)
    devs = [em.device("cpu", 0).autodiff(), em.device("cpu", 1).autodiff()]
    multi = _sgd_run(tmp_path, 16, devices=devs)
    assert_same_weights(multi.model, single.model, exact=False)


def test_the_renderer_protocol_is_called_in_order():
    calls = []

    class Recorder(Renderer):
        def on_start(self, event):
            calls.append(("start", event.num_epochs, event.train_iterations,
                          tuple(event.train_metrics), tuple(event.valid_metrics)))

        def on_train_item(self, event):
            p = event.progress
            calls.append(("train", p.epoch, p.iteration, p.iterations, p.global_step,
                          round(event.metrics["loss"].epoch_value, 6)))

        def on_valid_item(self, event):
            calls.append(("valid", event.progress.epoch, event.progress.iteration))

        def on_epoch_end(self, event):
            calls.append(("epoch", event.epoch, sorted(event.train), sorted(event.valid)))

        def on_end(self, summary):
            calls.append(("end", summary.epochs_done))

    learner = make_learner(None, epochs=2, renderer=Recorder())
    learner.fit()
    assert calls[0] == ("start", 2, STEPS, ("loss", "accuracy"), ("loss", "accuracy"))
    train = [c for c in calls if c[0] == "train"]
    assert [c[2] for c in train] == list(range(1, STEPS + 1)) * 2
    assert [c[4] for c in train] == list(range(1, 2 * STEPS + 1))
    assert all(c[3] == STEPS for c in train)
    kinds = [c[0] for c in calls]
    assert kinds == (["start"] + (["train"] * STEPS + ["valid"] * VALID_STEPS + ["epoch"]) * 2
                     + ["end"])
    assert calls[-2] == ("epoch", 2, ["accuracy", "loss"], ["accuracy", "loss"])


def test_plain_renderer_lines(tmp_path):
    out = io.StringIO()
    make_learner(None, epochs=2, renderer=PlainRenderer(every=5, file=out)).fit()
    lines = out.getvalue().splitlines()
    epoch_lines = [ln for ln in lines if ln.startswith("epoch")]
    assert len(epoch_lines) == 2
    assert epoch_lines[0].startswith("epoch 1/2  train loss ") and "|  valid loss " in \
        epoch_lines[0]
    steps = [ln for ln in lines if ln.startswith("train")]
    assert [ln.split("iteration ")[1].split()[0] for ln in steps] == \
        ["5/10", "10/10", "5/10", "10/10"]


def test_learner_builder_and_default_metrics(tmp_path):
    tl, vl = loaders()
    learner = (LearnerBuilder(tmp_path).num_epochs(1).checkpoint(keep_last=1)
               .renderer(None).seed(3).summary(False).build(make_model(), optim.Adam(), 1e-3))
    s = learner.fit(tl, vl).summary
    assert s.history.names("train") == ["loss", "accuracy"]     # a ClassificationModel
    assert [c.name for c in learner.checkpoints()] == ["epoch-1"]
    with pytest.raises(RuntimeError, match="trained already"):
        learner.fit()


class Linear1(em.Module, RegressionModel):
    def __init__(self, *, device=None):
        self.fc = nn.Linear(3, 1, device=device)

    def forward(self, x):
        return self.fc(x)


def test_regression_model_and_tuple_batches():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)
    items = [(x[i], y[i]) for i in range(128)]
    dev = em.device("cpu")
    tl = DataLoader(items, TensorBatcher(), 16, seed=0, device=dev)
    vl = DataLoader(items[:32], TensorBatcher(), 32, shuffle=False, device=dev)
    dev.seed(0)
    r = Learner(Linear1(device=dev), optim.Adam(), 0.05, train_loader=tl, valid_loader=vl,
                num_epochs=15, renderer=None, summary=False).fit()
    losses = [v for _, v in r.summary.history.values("valid", "loss")]
    assert losses[-1] < 0.01 * losses[0]


def test_learner_argument_errors(tmp_path):
    class NoSteps(em.Module):
        def forward(self, x):
            return x

    with pytest.raises(TypeError, match="has no train_step"):
        Learner(NoSteps(), optim.Adam(), 1e-3)
    with pytest.raises(ValueError, match="resume needs an artifact_dir"):
        Learner(make_model(), optim.Adam(), 1e-3, resume=True)
    with pytest.raises(ValueError, match="num_epochs"):
        Learner(make_model(), optim.Adam(), 1e-3, num_epochs=0)
    with pytest.raises(ValueError, match="no train_loader"):
        Learner(make_model(), optim.Adam(), 1e-3, renderer=None).fit()


def test_fresh_start_removes_only_the_learners_own_files(tmp_path):
    make_learner(tmp_path, epochs=1).fit()
    (tmp_path / "train" / "my-notes.txt").write_text("keep me")
    (tmp_path / "other.txt").write_text("keep me too")
    make_learner(tmp_path, epochs=1).fit()          # no resume: a new run
    assert (tmp_path / "train" / "my-notes.txt").read_text() == "keep me"
    assert (tmp_path / "other.txt").exists()
    assert [c.name for c in Checkpointer(tmp_path / "checkpoint").list()] == ["epoch-1"]


def test_resume_keeps_the_shuffle_order_of_a_loader_without_a_seed(tmp_path):
    # seed=None: each DataLoader draws its own seed, as a new process would
    def learner(art, **kw):
        tl, vl = loaders()
        tl = DataLoader(tl.dataset, tl.batcher, 32, seed=None, device=em.device("cpu"))
        first_seed = tl.seed
        lr = optim.CosineAnnealingLr(3e-2, num_iters=2 * len(tl))
        return Learner(make_model(), optim.Adam(), lr, train_loader=tl, valid_loader=vl,
                       artifact_dir=art, num_epochs=2, renderer=kw.pop("renderer", None),
                       seed=1, summary=False, **kw), first_seed

    holder = [None]
    a, seed_a = learner(tmp_path, renderer=_stop_at(holder, 14))
    holder[0] = a
    assert a.fit().interrupted
    b, seed_b = learner(tmp_path, resume=True)
    assert seed_b != seed_a
    b.fit()
    assert b.train_loader.seed == seed_a          # the order of the interrupted run
    full, _ = learner(tmp_path / "full")
    full.train_loader.seed = seed_a
    assert_same_weights(b.result.model, full.fit().model)
