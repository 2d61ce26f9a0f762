"""Metrics against independent references: per-batch values, epoch aggregates over several
batches (equal to the metric of all items at once), state round trips."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from ember.train import (Accuracy, ClassificationOutput, CpuMemory, CpuUse, F1Score,
                         IterationSpeed, LearningRate, Loss, MetricContext, Precision, Recall,
                         RegressionOutput, TopKAccuracy, metric_from_name)
from ember.train.metrics import ItemView


def _item(logits, targets, loss=0.0):
    return ItemView(ClassificationOutput(em.tensor(float(loss)), em.tensor(logits),
                                         em.tensor(targets)))


def _macro_reference(y_true, y_pred):
    """Macro precision / recall / F1 in percent by explicit per-class counting, over the
    classes present in the targets or the predictions (scikit-learn's default)."""
    classes = sorted(set(y_true.tolist()) | set(y_pred.tolist()))
    ps, rs, fs = [], [], []
    for c in classes:
        tp = sum(1 for t, p in zip(y_true, y_pred) if t == c and p == c)
        fp = sum(1 for t, p in zip(y_true, y_pred) if t != c and p == c)
        fn = sum(1 for t, p in zip(y_true, y_pred) if t == c and p != c)
        p = tp / (tp + fp) if tp + fp else 0.0
        r = tp / (tp + fn) if tp + fn else 0.0
        f = 2 * p * r / (p + r) if p + r else 0.0
        ps.append(p)
        rs.append(r)
        fs.append(f)
    return 100 * np.mean(ps), 100 * np.mean(rs), 100 * np.mean(fs)


def _batches(seed=0, n_batches=4, classes=5):
    rng = np.random.default_rng(seed)
    out = []
    for b in range(n_batches):
        n = int(rng.integers(3, 12))
        logits = rng.normal(size=(n, classes)).astype(np.float32)
        targets = rng.integers(0, classes, size=n)
        # make the predictions right about half of the time
        hit = rng.random(n) < 0.5
        logits[hit, targets[hit]] += 5.0
        out.append((logits, targets, float(rng.random() * 2)))
    return out


def test_loss_is_the_item_weighted_mean():
    m = Loss()
    ctx = MetricContext()
    total, count = 0.0, 0
    for logits, targets, loss in _batches():
        v = m.update(_item(logits, targets, loss), ctx)
        assert v == pytest.approx(loss)
        total += loss * len(targets)
        count += len(targets)
    assert m.value() == pytest.approx(total / count)
    m.reset()
    assert math.isnan(m.value())


def test_accuracy_and_topk_match_numpy():
    batches = _batches(1)
    acc, top2, top5 = Accuracy(), TopKAccuracy(2), TopKAccuracy(5)
    ctx = MetricContext()
    all_logits = np.concatenate([b[0] for b in batches])
    all_t = np.concatenate([b[1] for b in batches])
    for logits, targets, _ in batches:
        item = _item(logits, targets)
        assert acc.update(item, ctx) == pytest.approx(
            100 * np.mean(logits.argmax(1) == targets))
        ranks = (-logits).argsort(1)
        assert top2.update(item, ctx) == pytest.approx(
            100 * np.mean([t in r[:2] for t, r in zip(targets, ranks)]))
        assert top5.update(item, ctx) == 100.0          # 5 classes: always a hit
    assert acc.value() == pytest.approx(100 * np.mean(all_logits.argmax(1) == all_t))
    ranks = (-all_logits).argsort(1)
    assert top2.value() == pytest.approx(
        100 * np.mean([t in r[:2] for t, r in zip(all_t, ranks)]))
    assert top2.name == "top-2 accuracy" and metric_from_name("top-3 accuracy").k == 3


def test_accuracy_pad_token_and_one_hot_targets():
    logits = np.array([[3.0, 0, 0], [0, 3.0, 0], [0, 0, 3.0], [3.0, 0, 0]], np.float32)
    m = Accuracy(pad_token=2)
    # targets 2 are ignored: the rest are [0, 1, 1] with predictions [0, 1, 0]
    assert m.update(_item(logits, np.array([0, 1, 2, 1])), MetricContext()) == \
        pytest.approx(100 * 2 / 3)
    one_hot = np.eye(3, dtype=np.float32)[[0, 1, 2, 2]]
    assert Accuracy().update(_item(logits, one_hot), MetricContext()) == pytest.approx(75.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_macro_precision_recall_f1_match_a_per_class_reference(seed):
    batches = _batches(seed, classes=6)
    ms = [Precision(), Recall(), F1Score()]
    ctx = MetricContext()
    for logits, targets, _ in batches:
        item = _item(logits, targets)
        ref = _macro_reference(targets, logits.argmax(1))
        for m, r in zip(ms, ref):
            assert m.update(item, ctx) == pytest.approx(r), m.name
    all_t = np.concatenate([b[1] for b in batches])
    all_p = np.concatenate([b[0].argmax(1) for b in batches])
    for m, r in zip(ms, _macro_reference(all_t, all_p)):
        assert m.value() == pytest.approx(r), m.name
    # the running state survives a round trip (a checkpoint taken mid-epoch)
    for m in ms:
        m2 = type(m)()
        m2.load_state_dict(m.state_dict())
        assert m2.value() == pytest.approx(m.value())


def test_f1_against_torch_when_classes_are_all_present():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(200, 4)).astype(np.float32)
    targets = rng.integers(0, 4, 200)
    m = F1Score()
    m.update(_item(logits, targets), MetricContext())
    pred = torch.tensor(logits).argmax(1)
    t = torch.tensor(targets)
    f1s = []
    for c in range(4):
        tp = ((pred == c) & (t == c)).sum().item()
        p = tp / max((pred == c).sum().item(), 1)
        r = tp / max((t == c).sum().item(), 1)
        f1s.append(0 if p + r == 0 else 2 * p * r / (p + r))
    assert m.value() == pytest.approx(100 * np.mean(f1s))


def test_learning_rate_iteration_speed_and_system_metrics():
    lr = LearningRate()
    item = _item(np.zeros((4, 2), np.float32), np.zeros(4, np.int64))
    for v in (1e-3, 2e-3, 3e-3):
        assert lr.update(item, MetricContext(lr=v)) == v
    assert lr.value() == pytest.approx(2e-3)
    assert lr.splits == ("train",)

    speed = IterationSpeed()
    speed.start(10.0)
    assert speed.update(item, MetricContext(batch_size=4, now=10.5)) == pytest.approx(8.0)
    assert speed.update(item, MetricContext(batch_size=4, now=11.0)) == pytest.approx(8.0)
    assert speed.value() == pytest.approx(8 / 1.0)

    pytest.importorskip("psutil")
    cpu, mem = CpuUse(period=0.0), CpuMemory(period=0.0)
    for _ in range(2):
        c = cpu.update(item, MetricContext())
        m = mem.update(item, MetricContext())
    assert 0.0 <= c <= 100.0 and 0.0 <= cpu.value() <= 100.0
    assert m > 1.0 and mem.value() > 1.0                 # MiB of this process
    assert "MiB" in mem.format(m)
    import copy
    copy.deepcopy([cpu, mem])                            # the Learner copies metrics per split


def test_metric_errors_name_the_problem():
    with pytest.raises(ValueError, match="logits of shape"):
        Accuracy().update(_item(np.zeros(3, np.float32), np.zeros(3, np.int64)),
                          MetricContext())
    reg = ItemView(RegressionOutput(em.tensor(1.0), em.zeros(3), em.zeros(3)))
    with pytest.raises(ValueError, match="logits"):
        F1Score().update(reg, MetricContext())

    class NoLoss:
        output = em.zeros(2, 2)
        targets = em.zeros(2)
    with pytest.raises(TypeError, match="has no 'loss'"):
        Loss().update(ItemView(NoLoss()), MetricContext())
    with pytest.raises(ValueError, match="unknown metric"):
        metric_from_name("bogus")
