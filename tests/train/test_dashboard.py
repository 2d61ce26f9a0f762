"""The Textual dashboard, headless through `App.run_test()`: metric switching, `q` stops the
learner after a step with a checkpoint saved, the run resumes; and the braille plot."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

pytest.importorskip("textual")

from ember.train.renderer.dashboard import DashboardRenderer, braille_plot  # noqa: E402

from .common import assert_same_weights, make_learner  # noqa: E402


async def _wait(pilot, cond, timeout=30.0):
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError("timed out waiting for the dashboard")
        await pilot.pause(0.02)


class GatedDashboard(DashboardRenderer):
    """Training waits at a gate after each step while the test holds it closed: the pilot
    waits for the process to be idle after each key, which a running loop never is, and the
    tiny test model would finish its epochs while the pilot types. ``hold_at``: the worker
    closes the gate itself at that global step (a test that closed it from the UI thread
    raced the worker, which can finish all its epochs first on a busy machine)."""

    def __init__(self, hold_at=None, **kw):
        super().__init__(**kw)
        self.gate = threading.Event()
        self.gate.set()
        self.hold_at = hold_at

    def on_train_item(self, event):
        super().on_train_item(event)
        if self.hold_at is not None and self.state.progress is not None and \
                self.state.progress.global_step >= self.hold_at:
            self.hold_at = None
            self.gate.clear()
        self.gate.wait()


def test_dashboard_switches_metrics_and_q_stops_with_a_checkpoint(tmp_path):
    renderer = GatedDashboard(refresh=0.02, hold_at=3)
    # many epochs: the run is still going when q is pressed (held at step 3 until then)
    learner = make_learner(tmp_path, epochs=200, renderer=renderer)
    learner._renderer = renderer
    app = renderer.make_app(learner.run_loop)
    seen = {}

    async def drive():
        async with app.run_test(size=(110, 32)) as pilot:
            await _wait(pilot, lambda: not renderer.gate.is_set())
            await pilot.pause(0.05)
            seen["first"] = app.shown_metric
            seen["title0"] = str(app.query_one("#plot").border_title)
            await pilot.press("right")
            seen["second"] = app.shown_metric
            seen["title1"] = str(app.query_one("#plot").border_title)
            await pilot.press("left")
            seen["back"] = app.shown_metric
            await pilot.press("left")
            seen["wrapped"] = app.shown_metric
            await pilot.press("h")
            seen["view"] = app.view
            await pilot.press("q")
            assert app.stopping and not app.worker_done     # q: stop after this step
            renderer.gate.set()
            await _wait(pilot, lambda: app.worker_done)
            await _wait(pilot, lambda: not app.is_running)

    asyncio.run(drive())
    result = app.outcome()
    assert seen["first"] == "loss" and seen["title0"].startswith("loss (1/2")
    assert seen["second"] == "accuracy" and seen["title1"].startswith("accuracy (2/2")
    assert seen["back"] == "loss" and seen["wrapped"] == "accuracy"
    assert seen["view"] == "epochs"

    assert result.interrupted and result.summary.epochs_done < 200
    cps = learner.checkpoints()
    assert cps and result.summary.last_checkpoint == cps[-1].path
    state = cps[-1].learner_state()
    assert state["global_step"] >= 3
    # the checkpoint holds the model the learner stopped with
    from .common import make_model
    assert_same_weights(make_model().load_record(cps[-1].path + "/model.safetensors"),
                        result.model)

    # rerunning with resume continues from there (a shorter run, to finish quickly)
    done = state["epoch"] + 1
    resumed = make_learner(tmp_path, epochs=done, resume=True).fit()
    assert resumed.summary.stopped == "finished"
    assert resumed.summary.history.epochs() == list(range(1, done + 1))


def test_dashboard_exits_by_itself_when_training_ends(tmp_path):
    renderer = DashboardRenderer(refresh=0.02)
    learner = make_learner(None, epochs=1, renderer=renderer)
    learner._renderer = renderer
    app = renderer.make_app(learner.run_loop)

    async def drive():
        async with app.run_test(size=(90, 26)) as pilot:
            await _wait(pilot, lambda: not app.is_running)

    asyncio.run(drive())
    assert app.outcome().summary.stopped == "finished"
    assert renderer.state.summary is not None


def test_an_error_in_training_reaches_the_caller(tmp_path):
    renderer = DashboardRenderer(refresh=0.02)
    learner = make_learner(None, epochs=1, renderer=renderer)
    learner._renderer = renderer

    def boom():
        raise RuntimeError("loader broke")

    app = renderer.make_app(boom)

    async def drive():
        async with app.run_test() as pilot:
            await _wait(pilot, lambda: not app.is_running)

    asyncio.run(drive())
    with pytest.raises(RuntimeError, match="loader broke"):
        app.outcome()


def test_braille_plot_draws_a_line_through_the_points():
    text = braille_plot([("train", [(0.0, 0.0), (1.0, 1.0)], "red")], 30, 5)
    lines = text.plain.splitlines()
    assert len(lines) == 5
    rows = [ln.split("\u2502", 1)[1] for ln in lines[:4]]
    # a rising diagonal: the top row is lit at the right end, the bottom row at the left
    assert rows[0].rstrip()[-1] != " " and rows[0][0] == " "
    assert rows[3][0] != " " and rows[3].rstrip() == rows[3][:len(rows[3].rstrip())]
    assert lines[0].split("\u2502")[0].strip() == "1.000"
    assert lines[3].split("\u2502")[0].strip() == "0.000"
    assert all(ch == " " or 0x2800 <= ord(ch) <= 0x28FF for r in rows for ch in r)
    assert "train" in lines[-1]
    empty = braille_plot([("train", [], "red")], 30, 5).plain
    assert "no values yet" in empty


def test_a_crash_in_the_ui_stops_the_worker_with_a_checkpoint(tmp_path):
    renderer = GatedDashboard(refresh=0.02)
    learner = make_learner(tmp_path, epochs=200, renderer=renderer)
    learner._renderer = renderer
    app = renderer.make_app(learner.run_loop)

    def broken(*args):
        if renderer.state.progress and renderer.state.progress.global_step >= 3:
            raise RuntimeError("the UI broke")

    app._draw_metrics = broken

    async def drive():
        async with app.run_test() as pilot:
            await _wait(pilot, lambda: not app.is_running)

    with pytest.raises(RuntimeError, match="the UI broke"):
        asyncio.run(drive())
    app.finish_worker(timeout=60)          # what DashboardRenderer.run does on the way out
    result = app.outcome()
    assert result.interrupted and result.summary.epochs_done < 200
    assert learner.checkpoints() and result.summary.last_checkpoint
