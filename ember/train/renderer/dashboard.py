"""`DashboardRenderer`: a terminal dashboard (Textual), like Burn's TUI.

- a plot of each metric, training and validation on one chart (braille dots drawn here);
  ``←``/``→`` switch the metric, ``h`` switches between every step and the epoch averages;
- a table of the metrics' epoch values so far;
- a progress bar with the epoch, the iteration and the ETA;
- ``q`` (or Ctrl-C) stops after the current step: the Learner saves a checkpoint and
  returns, and a later run with ``resume=True`` continues from it.

The Textual app owns the calling (main) thread and the training loop runs in a worker
thread. They share a `DashboardState` behind a lock: the loop's callbacks only record into
it, and the app redraws from it a few times a second, so neither side ever waits on the
other. If the app ends first (an error in the UI, the terminal closed), the worker is asked
to stop and is joined, so a checkpoint is still saved; an error in the loop ends the app and
is re-raised in the calling thread.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable

from .plain import format_duration
from .protocol import EpochEvent, ItemEvent, Renderer, StartEvent

__all__ = ["DashboardRenderer", "DashboardState", "braille_plot"]

SERIES_COLORS = {"train": "#4fa3ff", "valid": "#ff9f43"}


class DashboardState:
    """What the training thread reports and the UI shows (every access under ``lock``)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.stop_requested = threading.Event()
        self.version = 0
        self.metric_names: list[str] = []
        self.kinds: dict[str, str] = {}
        self.steps: dict[tuple[str, str], list[tuple[float, float]]] = {}
        self.epochs: dict[tuple[str, str], list[tuple[int, float]]] = {}
        self.latest: dict[tuple[str, str], Any] = {}
        self.progress = None            # the last Progress
        self.num_epochs = 0
        self.start_epoch = 1
        self.iterations = {"train": None, "valid": None}
        self.t0 = time.perf_counter()
        self.started = False
        self.done = False
        self.summary = None
        self.last_epoch_line = ""
        self.resumed_from = None

    def fraction_done(self) -> float | None:
        """The fraction of this run's work done (epochs since the start epoch)."""
        p = self.progress
        if p is None:
            return 0.0
        nt, nv = self.iterations["train"], self.iterations["valid"]
        if not nt:
            return None
        per_epoch = nt + (nv or 0)
        done = (p.epoch - self.start_epoch) * per_epoch + (
            p.iteration if p.split == "train" else nt + p.iteration)
        total = (self.num_epochs - self.start_epoch + 1) * per_epoch
        return max(0.0, min(1.0, done / total)) if total else None

    def eta(self) -> float | None:
        f = self.fraction_done()
        if not f:
            return None
        el = time.perf_counter() - self.t0
        return el * (1 - f) / f


class DashboardRenderer(Renderer):
    """The Textual dashboard. ``exit_on_end``: close when training ends (default), or keep
    the final state on screen until ``q``. ``refresh``: seconds between redraws."""

    def __init__(self, *, exit_on_end: bool = True, refresh: float = 0.2,
                 max_points: int = 20_000):
        self.state = DashboardState()
        self.exit_on_end = exit_on_end
        self.refresh = refresh
        self.max_points = max_points
        self.app = None
        self.interrupted_by_signal = False

    # -- the protocol (called in the training thread) ----------------------------------------
    def on_start(self, event: StartEvent) -> None:
        s = self.state
        with s.lock:
            names = list(event.train_metrics)
            names += [n for n in event.valid_metrics if n not in names]
            s.metric_names = names
            s.num_epochs = event.num_epochs
            s.start_epoch = event.start_epoch
            s.iterations = {"train": event.train_iterations, "valid": event.valid_iterations}
            s.resumed_from = event.resumed_from
            s.t0 = time.perf_counter()
            h = event.history
            if h is not None:
                for split in ("train", "valid"):
                    for n in h.names(split):
                        s.epochs[(split, n)] = list(h.values(split, n))
                for n, meta in h.meta.items():
                    s.kinds[n] = meta.get("kind", "float")
            s.started = True
            s.version += 1

    def _item(self, event: ItemEvent) -> None:
        s = self.state
        p = event.progress
        x = (p.epoch - 1) + (p.iteration / p.iterations if p.iterations else 0.0)
        with s.lock:
            for name, m in event.metrics.items():
                key = (p.split, name)
                pts = s.steps.setdefault(key, [])
                v = m.value
                if v is not None and not (isinstance(v, float) and math.isnan(v)):
                    pts.append((x, float(v)))
                    if len(pts) > self.max_points:
                        del pts[::2]            # halve the resolution, keep the span
                s.latest[key] = m
            s.progress = p
            s.version += 1

    def on_train_item(self, event: ItemEvent) -> None:
        self._item(event)

    def on_valid_item(self, event: ItemEvent) -> None:
        self._item(event)

    def on_epoch_end(self, event: EpochEvent) -> None:
        s = self.state
        with s.lock:
            for split, vals in (("train", event.train), ("valid", event.valid)):
                for n, v in vals.items():
                    pts = s.epochs.setdefault((split, n), [])
                    pts[:] = [(e, w) for e, w in pts if e != event.epoch]
                    pts.append((event.epoch, float(v)))
            tr = event.formatted.get("train", {})
            va = event.formatted.get("valid", {})
            first = next(iter(tr), None)
            line = f"epoch {event.epoch}/{event.num_epochs} done in {event.seconds:.1f} s"
            if first:
                line += f": train {first} {tr[first]}"
                if first in va:
                    line += f", valid {first} {va[first]}"
            s.last_epoch_line = line
            s.version += 1

    def on_end(self, summary) -> None:
        s = self.state
        with s.lock:
            s.summary = summary
            s.version += 1

    def should_stop(self) -> bool:
        return self.state.stop_requested.is_set()

    # -- driving -------------------------------------------------------------------------------
    def make_app(self, train: Callable[[], Any]):
        """The Textual app that runs ``train`` in a worker thread (for tests: drive it with
        ``app.run_test()``)."""
        self.app = TrainingDashboard(self, train)
        return self.app

    def run(self, train: Callable[[], Any]):
        """Run the app in this thread and ``train`` in a worker; returns what ``train``
        returned, re-raises what it raised."""
        import signal
        app = self.make_app(train)
        old = None
        main = threading.current_thread() is threading.main_thread()
        if main:
            # an external SIGINT (kill -INT) asks for a stop, like q; a second one aborts
            def on_sigint(signum, frame, _count=[0]):
                _count[0] += 1
                self.interrupted_by_signal = True
                self.state.stop_requested.set()
                if _count[0] > 1:
                    raise KeyboardInterrupt
            try:
                old = signal.signal(signal.SIGINT, on_sigint)
            except (ValueError, OSError):
                old = None
        try:
            app.run()
        finally:
            if old is not None:
                try:
                    signal.signal(signal.SIGINT, old)
                except (ValueError, OSError):
                    pass
            app.finish_worker()
        return app.outcome()


def _build_app_class():
    from rich.text import Text
    from textual.app import App, ComposeResult
    from textual.binding import Binding
    from textual.containers import Horizontal, Vertical
    from textual.widget import Widget
    from textual.widgets import Footer, Static

    class PlotView(Widget):
        """The braille chart, drawn at the widget's current size on every render."""

        DEFAULT_CSS = "PlotView { width: 1fr; height: 1fr; }"

        def __init__(self, **kw):
            super().__init__(**kw)
            self.series = []

        def set_series(self, series) -> None:
            self.series = series
            self.refresh()

        def render(self):
            w = max(12, self.content_size.width)
            h = max(3, self.content_size.height)
            return braille_plot(self.series, w, h, x_label="epoch")

    class _Dashboard(App):
        """The training dashboard (see the module docstring)."""

        CSS = """
        Screen { layout: vertical; }
        #top { height: 1fr; }
        #plot { width: 3fr; height: 100%; border: round $accent; padding: 0 1; }
        #metrics { width: 2fr; min-width: 34; height: 100%; border: round $secondary;
                   padding: 0 1; }
        #status { height: auto; border: round $primary; padding: 0 1; }
        """
        BINDINGS = [
            Binding("left", "prev_metric", "metric", priority=True),
            Binding("right", "next_metric", "metric", priority=True),
            Binding("h", "toggle_view", "steps/epochs"),
            Binding("q", "stop", "stop & save", priority=True),
            Binding("ctrl+c", "stop", "stop", show=False, priority=True),
        ]
        TITLE = "ember training"

        def __init__(self, renderer: DashboardRenderer, train: Callable[[], Any]):
            super().__init__()
            self.renderer = renderer
            self.state = renderer.state
            self._train = train
            self._thread: threading.Thread | None = None
            self._result = None
            self._error: BaseException | None = None
            self._finished = threading.Event()
            self.metric_index = 0
            self.view = "steps"
            self._seen_version = -1
            self.stopping = False

        # -- worker ---------------------------------------------------------------------
        def _work(self):
            try:
                self._result = self._train()
            except BaseException as e:   # handed to the main thread by outcome()
                self._error = e
            finally:
                self._finished.set()

        def start_worker(self):
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="ember-train",
                                                daemon=True)
                self._thread.start()

        def finish_worker(self, timeout: float | None = None):
            """Ask the worker to stop (if it still runs) and wait for it."""
            t = self._thread
            if t is not None and t.is_alive():
                self.state.stop_requested.set()
                t.join(timeout)

        def outcome(self):
            if self._error is not None:
                raise self._error
            return self._result

        @property
        def worker_done(self) -> bool:
            return self._finished.is_set()

        # -- layout ---------------------------------------------------------------------
        def compose(self) -> ComposeResult:
            with Horizontal(id="top"):
                yield PlotView(id="plot")
                yield Static(id="metrics")
            with Vertical(id="status"):
                yield Static(id="progress")
                yield Static(id="info")
            yield Footer()

        def on_mount(self) -> None:
            self.query_one("#metrics").border_title = "metrics (epoch so far)"
            self.query_one("#status").border_title = "progress"
            self.start_worker()
            self.set_interval(self.renderer.refresh, self.redraw)
            self.redraw()

        # -- actions --------------------------------------------------------------------
        @property
        def shown_metric(self) -> str | None:
            names = self.state.metric_names
            if not names:
                return None
            return names[self.metric_index % len(names)]

        def action_next_metric(self) -> None:
            if self.state.metric_names:
                self.metric_index = (self.metric_index + 1) % len(self.state.metric_names)
            self.redraw(force=True)

        def action_prev_metric(self) -> None:
            if self.state.metric_names:
                self.metric_index = (self.metric_index - 1) % len(self.state.metric_names)
            self.redraw(force=True)

        def action_toggle_view(self) -> None:
            self.view = "epochs" if self.view == "steps" else "steps"
            self.redraw(force=True)

        def action_stop(self) -> None:
            if self.worker_done:
                self.exit()
                return
            self.stopping = True
            self.state.stop_requested.set()
            self.redraw(force=True)

        # -- drawing --------------------------------------------------------------------
        def redraw(self, force: bool = False) -> None:
            s = self.state
            with s.lock:
                changed = s.version != self._seen_version
                self._seen_version = s.version
                name = self.shown_metric
                if name is not None:
                    src = s.steps if self.view == "steps" else s.epochs
                    series = {split: list(src.get((split, name), ()))
                              for split in ("train", "valid")}
                else:
                    series = {}
                latest = dict(s.latest)
                names = list(s.metric_names)
                kinds = dict(s.kinds)
                p = s.progress
                frac = s.fraction_done()
                eta = s.eta()
                epoch_line = s.last_epoch_line
                summary = s.summary
                resumed = s.resumed_from
                elapsed = time.perf_counter() - s.t0
            if changed or force:
                self._draw_plot(name, series, names, kinds)
                self._draw_metrics(names, latest)
                self._draw_progress(p, frac, eta, elapsed, epoch_line, summary, resumed)
            if self.worker_done and not self._exiting:
                if self.renderer.exit_on_end or self.stopping:
                    self._exiting = True
                    self.exit()

        _exiting = False

        def _draw_plot(self, name, series, names, kinds):
            plot = self.query_one("#plot", PlotView)
            if name is None:
                plot.border_title = "waiting for the first step..."
                plot.set_series([])
                return
            i = names.index(name) + 1
            what = "per step" if self.view == "steps" else "per epoch"
            plot.border_title = f"{name} ({i}/{len(names)}, {what})  \u2190/\u2192 metric, h view"
            plot.set_series([(split, pts, SERIES_COLORS[split])
                             for split, pts in series.items()])

        def _draw_metrics(self, names, latest):
            t = Text(no_wrap=True, overflow="ellipsis")
            rows = []
            for n in names:
                tr = latest.get(("train", n))
                va = latest.get(("valid", n))
                rows.append((n, tr.formatted if tr else "-", va.formatted if va else "-"))
            nw = max([len(r[0]) for r in rows] + [6])
            vw = max([len(r[1]) for r in rows] + [len(r[2]) for r in rows] + [5]) + 2
            t.append(f"{'metric':<{nw}}{'train':>{vw}}{'valid':>{vw}}\n", style="bold")
            for n, tr, va in rows:
                style = "bold reverse" if n == self.shown_metric else ""
                t.append(f"{n:<{nw}}", style=style)
                t.append(f"{tr:>{vw}}", style=SERIES_COLORS["train"])
                t.append(f"{va:>{vw}}\n", style=SERIES_COLORS["valid"])
            self.query_one("#metrics", Static).update(t)

        def _draw_progress(self, p, frac, eta, elapsed, epoch_line, summary, resumed):
            width = max(10, self.query_one("#progress", Static).content_size.width - 8)
            f = frac or 0.0
            filled = int(round(f * width))
            bar = Text()
            bar.append("\u2588" * filled, style="green")
            bar.append("\u2591" * (width - filled), style="grey50")
            bar.append(f" {f:6.1%}")
            self.query_one("#progress", Static).update(bar)
            info = Text()
            if p is not None:
                total = f"/{p.iterations}" if p.iterations else ""
                info.append(f"epoch {p.epoch}/{p.num_epochs}", style="bold")
                info.append(f"  {p.split} iteration {p.iteration}{total}  step {p.global_step}"
                            f"  elapsed {format_duration(elapsed)}  ETA {format_duration(eta)}")
            else:
                info.append("starting..." + (f" (resuming from {resumed})" if resumed else ""))
            if summary is not None:
                info.append(f"\ntraining {summary.stopped}: {summary.epochs_done} of "
                            f"{summary.num_epochs} epochs", style="bold")
                if summary.last_checkpoint:
                    info.append(f"; checkpoint {summary.last_checkpoint}")
                if not self.renderer.exit_on_end:
                    info.append("  (q to close)")
            elif self.stopping:
                info.append("\nstopping after this step; saving a checkpoint...",
                            style="bold yellow")
            elif epoch_line:
                info.append("\n" + epoch_line)
            self.query_one("#info", Static).update(info)

        def on_unmount(self) -> None:
            # the UI is going away: the loop must not run on unseen
            if not self.worker_done:
                self.state.stop_requested.set()

    return _Dashboard


_APP_CLASS = None


def TrainingDashboard(renderer, train):  # noqa: N802 - a factory that looks like a class
    """The dashboard app for ``renderer`` running ``train`` (Textual is imported here)."""
    global _APP_CLASS
    if _APP_CLASS is None:
        _APP_CLASS = _build_app_class()
    return _APP_CLASS(renderer, train)


# -- the braille plot ---------------------------------------------------------------------------
_DOT = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))   # [row][col]


def _nice(v: float) -> str:
    a = abs(v)
    if a != 0 and (a < 1e-2 or a >= 1e5):
        return f"{v:.2e}"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3f}"


def braille_plot(series, width: int, height: int, *, x_label: str = ""):
    """A line chart as Rich ``Text`` of ``width`` x ``height`` cells, each a 2x4 grid of
    braille dots. ``series``: ``[(name, [(x, y), ...], color), ...]``; the y range covers all
    finite values, the x range all points; each pixel column shows the mean of its points.
    The last line is the x axis labels and a legend."""
    from rich.text import Text
    label_w = 9
    pw = max(2, width - label_w - 1)          # plot cells across
    ph = max(1, height - 1)                   # plot cells down (one line for the axis)
    import numpy as np
    arrays = []
    for _, pts, col in series:
        a = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
        arrays.append((a[np.isfinite(a).all(axis=1)], col))
    out = Text()
    if not any(len(a) for a, _ in arrays):
        for r in range(ph):
            out.append(" " * label_w + "\u2502\n")
        out.append(" " * label_w + "\u2514" + "no values yet")
        return out
    both = np.concatenate([a for a, _ in arrays if len(a)])
    x0, x1 = float(both[:, 0].min()), float(both[:, 0].max())
    y0, y1 = float(both[:, 1].min()), float(both[:, 1].max())
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        pad = abs(y0) * 0.05 or 1.0
        y0, y1 = y0 - pad, y1 + pad
    W, H = pw * 2, ph * 4
    cells = [[0] * pw for _ in range(ph)]
    color = [[None] * pw for _ in range(ph)]

    def set_dot(px, py, col):
        if 0 <= px < W and 0 <= py < H:
            r, c = py // 4, px // 2
            cells[r][c] |= _DOT[py % 4][px % 2]
            color[r][c] = col

    for a, col in arrays:
        if not len(a):
            continue
        # each pixel column: the mean of its points
        px = np.rint((a[:, 0] - x0) / (x1 - x0) * (W - 1)).astype(np.int64)
        sums = np.bincount(px, weights=a[:, 1], minlength=W)
        counts = np.bincount(px, minlength=W)
        used = np.nonzero(counts)[0]
        means = sums[used] / counts[used]
        pys = np.rint((y1 - means) / (y1 - y0) * (H - 1)).astype(np.int64)
        line = list(zip(used.tolist(), pys.tolist()))
        prev = None
        for px, py in line:
            if prev is None:
                set_dot(px, py, col)
            else:
                (ax, ay), (bx, by) = prev, (px, py)
                n = max(abs(bx - ax), abs(by - ay), 1)
                for k in range(n + 1):
                    set_dot(int(round(ax + (bx - ax) * k / n)),
                            int(round(ay + (by - ay) * k / n)), col)
            prev = (px, py)

    for r in range(ph):
        if r == 0:
            lab = _nice(y1)
        elif r == ph - 1:
            lab = _nice(y0)
        elif r == ph // 2 and ph > 4:
            lab = _nice((y0 + y1) / 2)
        else:
            lab = ""
        out.append(f"{lab:>{label_w - 1}} \u2502")
        for c in range(pw):
            ch = chr(0x2800 + cells[r][c]) if cells[r][c] else " "
            out.append(ch, style=color[r][c] or "")
        out.append("\n")
    left = f"{x_label} {_nice_x(x0)}"
    right = f"{_nice_x(x1)}"
    axis = " " * label_w + "\u2514" + left
    legend = Text()
    for name, _, col in series:
        legend.append(" \u25cf ", style=col)
        legend.append(name)
    gap = max(1, pw - len(left) - len(right) - legend.cell_len - 2)
    out.append(axis + " " * gap)
    out.append(legend)
    out.append("  " + right)
    return out


def _nice_x(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 1e-9 else f"{x:.2f}"
