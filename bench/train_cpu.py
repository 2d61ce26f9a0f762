#!/usr/bin/env python
"""Training on CPU, ember against PyTorch, measured in one process on one thread.

Two models train on the bundled 8x8 digits (ember.data.DigitsDataset: the seeded 80/20
split, pixels scaled to [0, 1]) with the same batch size, the same optimizer (Adam, lr 1e-3),
the same initial weights (ember's, copied into PyTorch) and the same batch order:

- ``cnn``: the digits CNN of `ember demo` (conv 3x3 -> relu -> max-pool, twice, then a
  linear layer), mirrored layer for layer in PyTorch; the two are checked to compute the same
  logits from the same weights before anything is timed;
- ``mlp``: a 64-256-10 MLP (linear, relu, linear).

Contenders, per model:

- ``ember fusion`` / ``ember ndarray``: ember in a plain loop -- ``loss.backward()``,
  ``GradientsParams.from_grads``, ``optimizer.step`` (the code of examples/custom_loop.py) --
  on Autodiff(Fusion(NdArray)) (``em.device("cpu")``, the default) and on Autodiff(NdArray)
  (``em.device("cpu", fusion=False)``); ``--fusion on|off|both`` (default both) picks them;
- ``torch eager``: PyTorch CPU eager, the usual ``zero_grad``/``backward``/``step`` loop;
- ``Learner fusion`` / ``Learner ndarray``: the same model trained by ``ember.train.Learner``
  (DataLoader, ClassificationBatcher, loss and accuracy metrics, no renderer, no
  checkpoints): what the Learner costs on top of the loop. They run after the loops (not
  interleaved), from the same initial weights, in the DataLoader's own seeded order.

The loops alternate epoch by epoch, so a slower or faster moment of the machine falls on
all of them, and the order rotates each epoch, so none always runs first after another's
epoch (with colder caches). Each epoch is timed (training only; validation runs afterwards,
untimed); the table shows the median and the best epoch, the ratio ember / PyTorch of the
medians (target <= 1.0), the final mean training loss and validation accuracy of each (a sanity check: all
start from the same weights and see the same batches, so they should end close), and per
model the ratio Fusion / NdArray of the medians (target <= 1.0: training on Fusion is no
slower than on NdArray). ``--json PATH`` saves everything with the machine, versions and
commit. A peer that is not installed, or an ember piece that is missing, is reported as
absent with the reason. Every thread pool, ember's kernels included, runs one thread.

    python bench/train_cpu.py [--epochs 5] [--batch-size 32] [--models cnn,mlp]
                              [--fusion both] [--json out.json]
"""
import os

# One thread everywhere: set before NumPy or PyTorch is imported, so their pools start small.
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
           "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS",
           "EMBER_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))   # bench/overhead.py's helpers
try:
    import ember as em  # noqa: E402
except ImportError:            # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))
    import ember as em  # noqa: E402
import numpy as np  # noqa: E402

from overhead import _absent, _import_torch, _machine, _thread_limits  # noqa: E402

TARGET_RATIO = 1.0          # ember seconds per epoch / PyTorch seconds per epoch
TARGET_FUSION_RATIO = 1.0   # Fusion(NdArray) seconds per epoch / NdArray seconds per epoch
MODELS = ("cnn", "mlp")
FUSION_MODES = {"on": (True,), "off": (False,), "both": (True, False)}


def _mode(fused: bool) -> str:
    return "fusion" if fused else "ndarray"
MLP_SIZES = (64, 256, 10)
WARMUP_STEPS = 5


# -- data -----------------------------------------------------------------------------------
def load_data(seed: int = 0) -> dict:
    """The digits split both frameworks train on, as NumPy arrays: images [N, 1, 8, 8] f32
    in [0, 1] and int64 labels, from ember.data.DigitsDataset (the split `ember demo` uses)
    when it is there, else the same seeded split made here."""
    try:
        from ember.data import DigitsDataset
        tr = DigitsDataset("train", normalize=True, seed=seed)
        te = DigitsDataset("test", normalize=True, seed=seed)
        xs = [d.images[d.indices] for d in (tr, te)]
        ys = [d.labels[d.indices] for d in (tr, te)]
    except ImportError:
        from ember.datasets import load_digits
        images, labels = load_digits()
        images = images / np.float32(16.0)
        perm = np.random.default_rng(seed).permutation(len(labels))
        n_test = int(round(len(labels) * 0.2))
        idx = [np.sort(perm[n_test:]), np.sort(perm[:n_test])]
        xs, ys = [images[i] for i in idx], [labels[i] for i in idx]
    return {"x_train": np.ascontiguousarray(xs[0][:, None], dtype=np.float32),
            "y_train": np.ascontiguousarray(ys[0], dtype=np.int64),
            "x_test": np.ascontiguousarray(xs[1][:, None], dtype=np.float32),
            "y_test": np.ascontiguousarray(ys[1], dtype=np.int64)}


def epoch_orders(n: int, epochs: int, seed: int) -> list:
    """One permutation of the training set per epoch, shared by every contender."""
    rng = np.random.default_rng([seed, 1])
    return [rng.permutation(n) for _ in range(epochs)]


def _inputs(model: str, x: np.ndarray) -> np.ndarray:
    return x if model == "cnn" else x.reshape(len(x), -1)


# -- ember models ---------------------------------------------------------------------------
def ember_cnn_class():
    """The CNN of `ember demo` (``ember.cli.demo._model_class()``, 16 and 32 channels), or,
    should that move, the identical definition below."""
    try:
        from ember.cli.demo import _model_class
        return _model_class(), "the model of `ember demo` (ember/cli/demo.py)"
    except (ImportError, AttributeError):
        pass
    import ember as em
    from ember import nn

    class DigitsCNN(em.Module):
        def __init__(self, *, device=None):
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1, device=device)
            self.conv2 = nn.Conv2d(16, 32, 3, padding=1, device=device)
            self.pool = nn.MaxPool2d(2)
            self.fc = nn.Linear(32 * 2 * 2, 10, device=device)

        def forward(self, x):
            x = self.pool(self.conv1(x).relu())
            x = self.pool(self.conv2(x).relu())
            return self.fc(x.reshape(x.shape[0], -1))
    return DigitsCNN, "bench/train_cpu.py DigitsCNN"


def ember_mlp_class():
    import ember as em
    from ember import nn

    class DigitsMLP(em.Module):
        def __init__(self, *, device=None):
            self.fc1 = nn.Linear(MLP_SIZES[0], MLP_SIZES[1], device=device)
            self.fc2 = nn.Linear(MLP_SIZES[1], MLP_SIZES[2], device=device)

        def forward(self, x):
            return self.fc2(self.fc1(x).relu())
    return DigitsMLP, "bench/train_cpu.py DigitsMLP"


def make_ember_model(model: str, device):
    cls, where = ember_cnn_class() if model == "cnn" else ember_mlp_class()
    return cls(device=device), where


# -- PyTorch mirrors ------------------------------------------------------------------------
def torch_model(torch, model: str, ember_model):
    """The PyTorch twin of ``ember_model`` with ember's initial weights copied in (linear
    weights transposed: ember stores [in, out], PyTorch [out, in])."""
    nn = torch.nn
    if model == "cnn":
        class DigitsCNN(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
                self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
                self.pool = nn.MaxPool2d(2)
                self.fc = nn.Linear(32 * 2 * 2, 10)

            def forward(self, x):
                x = self.pool(torch.relu(self.conv1(x)))
                x = self.pool(torch.relu(self.conv2(x)))
                return self.fc(x.flatten(1))
        net = DigitsCNN()
    else:
        class DigitsMLP(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = nn.Linear(MLP_SIZES[0], MLP_SIZES[1])
                self.fc2 = nn.Linear(MLP_SIZES[1], MLP_SIZES[2])

            def forward(self, x):
                return self.fc2(torch.relu(self.fc1(x)))
        net = DigitsMLP()
    copy_weights(torch, ember_model, net)
    return net


def copy_weights(torch, ember_model, net) -> None:
    """ember's params into ``net``, matched by path; every tensor of ``net`` must be set."""
    src = {k: v.numpy() for k, v in ember_model.state_dict().items()}
    dst = net.state_dict()
    if set(src) != set(dst):
        raise RuntimeError(f"the PyTorch mirror does not match the ember model: ember has "
                           f"{sorted(set(src) - set(dst))} that PyTorch lacks, PyTorch has "
                           f"{sorted(set(dst) - set(src))} that ember lacks")
    new = {}
    for k, t in dst.items():
        a = src[k]
        if a.ndim == 2 and a.shape[::-1] == tuple(t.shape) and a.shape != tuple(t.shape):
            a = a.T                                # a linear weight
        if a.shape != tuple(t.shape):
            raise RuntimeError(f"{k}: ember {a.shape} vs PyTorch {tuple(t.shape)}")
        new[k] = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    net.load_state_dict(new)


def check_same_function(torch, model: str, ember_model, net, data) -> float:
    """Both models on the same 64 test images: the largest logit difference (they are the
    same architecture with the same weights iff this is at float32 rounding level)."""
    x = _inputs(model, data["x_test"][:64])
    cpu = em.device("cpu")
    with em.no_grad():
        a = ember_model.valid()(em.tensor(x, device=cpu)).numpy()
    net.eval()
    with torch.no_grad():
        b = net(torch.from_numpy(x)).numpy()
    net.train()
    diff = float(np.max(np.abs(a.astype(np.float64) - b)))
    if not diff < 1e-3:
        raise RuntimeError(f"the PyTorch mirror of the {model} computes different logits "
                           f"from the same weights (max |diff| {diff:.3g}); the two "
                           f"architectures differ, fix torch_model() in bench/train_cpu.py")
    return diff


# -- contenders: each is an object with run_epoch(order) -> mean loss, accuracy() ----------
def _warmup_batches(n: int, batch_size: int, steps: int) -> list:
    """Index arrays of ``steps`` full batches, cycling through the ``n`` samples."""
    return [np.arange(s * batch_size, (s + 1) * batch_size) % n for s in range(steps)]


class EmberLoop:
    """ember in a plain loop (examples/custom_loop.py) on ``dev``: Autodiff(Fusion(NdArray))
    or Autodiff(NdArray)."""

    def __init__(self, model: str, module, data, batch_size: int, lr: float, dev):
        from ember import nn, optim
        self.dev = dev
        self.model = module
        self.kind, self.data, self.bs, self.lr = model, data, batch_size, lr
        self.x = _inputs(model, data["x_train"])
        self.y = data["y_train"]
        self.loss_fn = nn.CrossEntropyLoss()
        self.opt = optim.Adam(lr=lr)

    def _step(self, model, opt, xb, yb):
        x = em.tensor(xb, device=self.dev)
        y = em.tensor(yb, device=self.dev)
        loss = self.loss_fn(model(x), y)
        grads = em.GradientsParams.from_grads(loss.backward(), model)
        return opt.step(self.lr, model, grads), loss.item()

    def warmup(self, steps: int) -> None:
        from ember import optim
        model, opt = self.model, optim.Adam(lr=self.lr)   # thrown away afterwards
        for i in _warmup_batches(len(self.y), self.bs, steps):
            model, _ = self._step(model, opt, self.x[i], self.y[i])

    def run_epoch(self, order) -> float:
        model, total = self.model, 0.0
        for s in range(0, len(order), self.bs):
            idx = order[s:s + self.bs]
            model, loss = self._step(model, self.opt, self.x[idx], self.y[idx])
            total += loss * len(idx)
        self.model = model
        return total / len(order)

    def accuracy(self) -> float:
        x = _inputs(self.kind, self.data["x_test"])
        model = self.model.valid()
        with em.no_grad():
            pred = model(em.tensor(x, device=model.devices()[0])).argmax(dim=1).numpy()
        return float(np.mean(pred.reshape(-1) == self.data["y_test"]))


class TorchLoop:
    """PyTorch CPU eager: zero_grad, F.cross_entropy, backward, Adam step."""

    def __init__(self, torch, model: str, net, data, batch_size: int, lr: float):
        self.torch, self.net, self.kind, self.data, self.bs = torch, net, model, data, batch_size
        self.lr = lr
        self.x = torch.from_numpy(_inputs(model, data["x_train"]))
        self.y = torch.from_numpy(data["y_train"])
        self.opt = torch.optim.Adam(net.parameters(), lr=lr)
        self.F = torch.nn.functional

    def _step(self, net, opt, xb, yb) -> float:
        opt.zero_grad(set_to_none=True)
        loss = self.F.cross_entropy(net(xb), yb)
        loss.backward()
        opt.step()
        return loss.item()

    def warmup(self, steps: int) -> None:
        net = copy.deepcopy(self.net)
        opt = self.torch.optim.Adam(net.parameters(), lr=self.lr)
        for i in _warmup_batches(len(self.y), self.bs, steps):
            self._step(net, opt, self.x[i], self.y[i])

    def run_epoch(self, order) -> float:
        self.net.train()
        total = 0.0
        idx_all = self.torch.from_numpy(order)
        for s in range(0, len(order), self.bs):
            idx = idx_all[s:s + self.bs]
            total += self._step(self.net, self.opt, self.x[idx], self.y[idx]) * len(idx)
        return total / len(order)

    def accuracy(self) -> float:
        torch = self.torch
        self.net.eval()
        with torch.no_grad():
            x = torch.from_numpy(_inputs(self.kind, self.data["x_test"]))
            pred = self.net(x).argmax(dim=1).numpy()
        self.net.train()
        return float(np.mean(pred == self.data["y_test"]))


class _EpochClock:
    """A renderer that notes when each epoch's training ends (the Learner gets no
    validation loader here, so an epoch is its training pass)."""

    def __init__(self):
        self.times, self.losses = [], []
        self._t0 = None

    def mark(self):
        self._t0 = time.perf_counter()

    def on_start(self, event):
        self.mark()

    def on_train_item(self, event):
        pass

    def on_valid_item(self, event):
        pass

    def on_epoch_end(self, event):
        self.times.append(time.perf_counter() - self._t0)
        self.losses.append(float(event.train.get("loss", float("nan"))))
        self.mark()

    def on_end(self, summary):
        pass

    def should_stop(self):
        return False


def run_learner(model: str, data, batch_size: int, lr: float, epochs: int, seed: int,
                fused: bool = True):
    """ember.train.Learner on the same model and data, on Autodiff(Fusion(NdArray)) or
    Autodiff(NdArray); returns (epoch seconds, losses, accuracy)."""
    from ember import optim
    from ember.data import DataLoader, InMemoryDataset, ClassificationBatcher
    from ember.train import ClassificationModel, Learner

    cls, _ = ember_cnn_class() if model == "cnn" else ember_mlp_class()
    if not issubclass(cls, ClassificationModel):
        cls = type(cls.__name__, (cls, ClassificationModel), {})
    dev = em.device("cpu", fusion=fused).autodiff()
    dev.seed(seed)
    net = cls(device=dev)
    x = _inputs(model, data["x_train"])
    items = list(zip(x, data["y_train"].tolist()))
    batcher = ClassificationBatcher()
    loader = DataLoader(InMemoryDataset(items), batcher, batch_size, shuffle=True, seed=seed,
                        device=dev)
    clock = _EpochClock()
    learner = Learner(net, optim.Adam(lr=lr), lr, train_loader=loader, num_epochs=epochs,
                      metrics=["loss", "accuracy"], renderer=clock, checkpoint=False,
                      summary=False, handle_sigint=False)
    result = learner.fit()
    trained = result.model.valid()
    xt = _inputs(model, data["x_test"])
    with em.no_grad():
        pred = trained(em.tensor(xt, device=trained.devices()[0])).argmax(dim=1).numpy()
    return clock.times, clock.losses, float(np.mean(pred.reshape(-1) == data["y_test"]))


# -- the benchmark --------------------------------------------------------------------------
def bench_model(torch, model: str, data, *, epochs: int, batch_size: int, lr: float,
                seed: int, learner: bool, log, modes=(True, False)) -> dict:
    res = {"contenders": {}, "absent": {}}
    runners = {}
    module = None
    for fused in modes:
        name = f"ember {_mode(fused)}"
        try:
            dev = em.device("cpu", fusion=fused).autodiff()
            dev.seed(seed)
            mod, where = make_ember_model(model, dev)
            if module is None:
                module = mod
                res["ember_model"] = where
                res["num_params"] = mod.num_params()
                res["architecture"] = repr(mod)
            else:                 # the same initial weights on every ember contender
                for k, v in module.state_dict().items():
                    if not np.array_equal(v.numpy(), mod.state_dict()[k].numpy()):
                        raise RuntimeError(f"{name}: initial weights differ at {k}")
            runners[name] = EmberLoop(model, mod, data, batch_size, lr, dev)
        except Exception as e:  # noqa: BLE001  (a piece of the training stack not there yet)
            res["absent"][name] = _absent(e)
    if torch is not None and module is not None:
        try:
            net = torch_model(torch, model, module)
            res["max_logit_diff_same_weights"] = check_same_function(torch, model, module,
                                                                     net, data)
            runners["torch eager"] = TorchLoop(torch, model, net, data, batch_size, lr)
        except Exception as e:  # noqa: BLE001
            res["absent"]["torch eager"] = _absent(e)
    elif torch is None:
        res["absent"]["torch eager"] = "torch not installed"

    for name, r in list(runners.items()):
        try:
            r.warmup(WARMUP_STEPS)
        except Exception as e:  # noqa: BLE001
            res["absent"][name] = _absent(e)
            del runners[name]
    orders = epoch_orders(len(data["y_train"]), epochs, seed)
    times = {n: [] for n in runners}
    losses = {n: [] for n in runners}
    for e, order in enumerate(orders, 1):
        # alternate: each contender, every epoch, starting one later each epoch (the first
        # to run after another framework's epoch meets colder caches: about 3% here)
        names = list(runners)
        k = (e - 1) % max(1, len(names))
        for name in names[k:] + names[:k]:
            r = runners.get(name)
            if r is None:
                continue
            try:
                t0 = time.perf_counter()
                loss = r.run_epoch(order)
                times[name].append(time.perf_counter() - t0)
                losses[name].append(loss)
            except Exception as e_:  # noqa: BLE001
                res["absent"][name] = _absent(e_)
                del runners[name]
        if log:
            log(f"  {model} epoch {e}/{epochs}: " + ", ".join(
                f"{n} {times[n][-1]:.3f} s loss {losses[n][-1]:.4f}"
                for n in runners if times[n]))
    for name, r in runners.items():
        res["contenders"][name] = {"epoch_seconds": times[name], "epoch_loss": losses[name],
                                   "val_accuracy": r.accuracy()}
    if learner:
        for fused in modes:
            name = f"Learner {_mode(fused)}"
            try:
                t, ls, acc = run_learner(model, data, batch_size, lr, epochs, seed, fused)
                res["contenders"][name] = {"epoch_seconds": t, "epoch_loss": ls,
                                           "val_accuracy": acc}
                if log:
                    log(f"  {model} {name}: " + ", ".join(f"{s:.3f} s" for s in t))
            except Exception as e:  # noqa: BLE001
                res["absent"][name] = _absent(e)
    for c in res["contenders"].values():
        s = c["epoch_seconds"]
        c["median_s"] = statistics.median(s) if s else None
        c["best_s"] = min(s) if s else None
        c["mean_s"] = statistics.fmean(s) if s else None
    t = res["contenders"].get("torch eager", {}).get("median_s")
    for n, c in res["contenders"].items():
        c["over_torch"] = c["median_s"] / t if t and c["median_s"] is not None and \
            n != "torch eager" else None
    for kind in ("ember", "Learner"):
        f = res["contenders"].get(f"{kind} fusion", {}).get("median_s")
        u = res["contenders"].get(f"{kind} ndarray", {}).get("median_s")
        res[f"{kind.lower()}_fusion_over_ndarray"] = f / u if f and u else None
    return res


def _fusion_state() -> str:
    """Whether Fusion(NdArray) runs generated kernels here, and the default CPU device."""
    from ember.backend import Fusion, NdArray
    fused = Fusion(NdArray())
    return (f"{'kernels on' if fused.fusing else 'OFF (no C compiler: a pass-through)'}, "
            f"min_numel {fused.min_numel}; em.device('cpu') is {em.device('cpu')}")


def _fmt(v, spec):
    return format(v, spec) if v is not None else "absent"


def report(res: dict) -> str:
    m = res["machine"]
    a = res["args"]
    lines = [f"ember {m['ember']} (commit {m['commit']}), {m['date']}",
             f"{m['cpu']}, {m['cpus']} CPUs usable; Python {m['python']}, numpy {m['numpy']}, "
             f"torch {m['torch'] or 'absent'}; thread pools: {m['thread_pools']}",
             f"digits: {res['n_train']} training / {res['n_test']} validation images; batch "
             f"{a['batch_size']}, Adam lr {a['lr']:g}, {a['epochs']} epochs (+ "
             f"{WARMUP_STEPS} warm-up steps), 1 thread; ember fusion: {res['fusion']}", ""]
    lines.append("seconds per training epoch (median of epochs; lower is better); ember / "
                 f"torch target <= {TARGET_RATIO:g}")
    head = (f"  {'model':<6}{'contender':<16}{'s/epoch':>9}{'best':>9}{'x torch':>9}"
            f"{'loss':>9}{'val acc':>9}")
    lines.append(head)
    for model, r in res["models"].items():
        names = ["ember fusion", "ember ndarray", "torch eager", "Learner fusion",
                 "Learner ndarray"]
        for n in names:
            c = r["contenders"].get(n)
            if c is None:
                why = r["absent"].get(n)
                if why:
                    lines.append(f"  {model:<6}{n:<16}{'absent':>9}   {why}")
                continue
            ratio = c["over_torch"]
            verdict = ""
            if ratio is not None:
                verdict = "  met" if ratio <= TARGET_RATIO else "  MISSED"
            loss = c["epoch_loss"][-1] if c["epoch_loss"] else None
            lines.append(f"  {model:<6}{n:<16}{_fmt(c['median_s'], '9.3f')}"
                         f"{_fmt(c['best_s'], '9.3f')}"
                         f"{(f'{ratio:.2f}x' if ratio is not None else ''):>9}"
                         f"{_fmt(loss, '9.4f')}{_fmt(c['val_accuracy'], '9.1%')}{verdict}")
        for kind in ("ember", "Learner"):
            q = r.get(f"{kind.lower()}_fusion_over_ndarray")
            if q is not None:
                ok = "met" if q <= TARGET_FUSION_RATIO else "MISSED"
                lines.append(f"  {'':<6}{kind} fusion / ndarray = {q:.3f}   target <= "
                             f"{TARGET_FUSION_RATIO:g}  {ok}")
        if "ember_model" in r:
            d = r.get("max_logit_diff_same_weights")
            extra = f", max |logit diff| with the same weights {d:.1e}" if d is not None \
                else ""
            lines.append(f"  {'':<6}({r['ember_model']}, {r['num_params']} params{extra})")
    lines.append("  (ember fusion / ndarray: Autodiff(Fusion(NdArray)) / Autodiff(NdArray) in a "
                 "plain loop, backward +")
    lines.append("   GradientsParams.from_grads + Adam.step; torch eager: zero_grad + backward "
                 "+ Adam.step; the loops")
    lines.append("   alternate epoch by epoch from the same weights on the same batches; "
                 "Learner: the same model")
    lines.append("   through ember.train.Learner, run afterwards; loss: mean training loss of "
                 "the last epoch;")
    lines.append("   val acc: on the validation split after training)")
    for name, why in res["absent"].items():
        lines.append(f"  absent: {name}: {why}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=5, help="timed epochs (default 5)")
    ap.add_argument("--batch-size", type=int, default=32, help="samples per step (default 32)")
    ap.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 1e-3)")
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated, from {', '.join(MODELS)} (default: both)")
    ap.add_argument("--no-learner", action="store_true",
                    help="skip the ember Learner row")
    ap.add_argument("--limit", type=int, default=None,
                    help="use only the first N training images (a smoke test)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--quiet", action="store_true", help="no per-epoch lines")
    ap.add_argument("--fusion", choices=sorted(FUSION_MODES), default="both",
                    help="ember on Fusion(NdArray) (on), on NdArray (off) or both, side by "
                    "side (default both)")
    args = ap.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in models if m not in MODELS]
    if bad or not models:
        ap.error(f"--models: unknown {bad}; choose from {', '.join(MODELS)}")
    if args.epochs < 1 or args.batch_size < 1:
        ap.error("--epochs and --batch-size must be >= 1")

    torch, torch_absent = _import_torch()
    limiter, pools = _thread_limits()
    absent = {"torch": torch_absent} if torch_absent else {}
    data = load_data(args.seed)
    if args.limit:
        data["x_train"], data["y_train"] = data["x_train"][:args.limit], \
            data["y_train"][:args.limit]
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    out = {}
    for model in models:
        out[model] = bench_model(torch, model, data, epochs=args.epochs,
                                 batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                                 learner=not args.no_learner, log=log,
                                 modes=FUSION_MODES[args.fusion])
    res = {"machine": _machine(torch, pools),
           "args": {"epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
                    "seed": args.seed, "limit": args.limit},
           "n_train": int(len(data["y_train"])), "n_test": int(len(data["y_test"])),
           "models": out, "absent": absent, "target_ember_over_torch": TARGET_RATIO,
           "target_fusion_over_ndarray": TARGET_FUSION_RATIO, "fusion": _fusion_state()}
    print(report(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
        print(f"\nresults written to {args.json}")
    if limiter is not None:
        limiter.restore_original_limits()
    return 0


if __name__ == "__main__":
    sys.exit(main())
