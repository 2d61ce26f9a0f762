"""Thread safety: per-thread streams on one Fusion device, and values pending in another
thread's stream."""
from __future__ import annotations

import queue
import threading

import numpy as np
import pytest

import ember as em
from ember.backend import Autodiff, NdArray
from tests.fusion._util import RUNTIMES, assert_close, fusion_device
from tests.fusion.test_autodiff import _train


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_two_threads_train_their_own_models_on_one_device(runtime):
    ad = Autodiff(fusion_device(runtime).backend).device(0)
    want = {s: _train(Autodiff(NdArray()).device(0), steps=5, seed=s)[0] for s in (1, 2)}
    got, errors = {}, []
    barrier = threading.Barrier(2)

    def work(seed):
        try:
            barrier.wait()
            got[seed] = _train(ad, steps=5, seed=seed)[0]
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for s in (1, 2):
        np.testing.assert_allclose(got[s], want[s], rtol=1e-5, atol=1e-5)


def test_a_value_pending_in_another_threads_stream():
    dev = fusion_device("interpret")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    q = queue.Queue()
    go = threading.Event()

    def producer():
        x = em.tensor(a, device=dev)
        q.put((x * 2.0 + 1.0).exp().sum(1))       # pending in this thread's stream
        go.wait(10)                                 # stay alive while the other reads

    t = threading.Thread(target=producer)
    t.start()
    y = q.get(timeout=10)
    assert y._prim.node.value is None and y._prim.node.stream is not dev.backend._stream()
    z = (y * 0.5).numpy()                            # recorded here, reads the other stream
    go.set()
    t.join()
    assert_close(z, np.exp(a.astype(np.float64) * 2 + 1).sum(1) * 0.5, rtol=1e-6)


def test_many_threads_hammering_shared_inputs():
    dev = fusion_device("interpret")
    rng = np.random.default_rng(0)
    base = em.tensor(rng.normal(size=(5, 6)).astype(np.float32), device=dev)
    shared = base * 3.0 - 1.0                        # pending in the main thread's stream
    results, errors = {}, []

    def work(k):
        try:
            acc = shared
            for i in range(30):
                acc = (acc * 0.5 + float(k)).tanh() + shared
            results[k] = acc.sum(0).numpy()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    s = base.numpy().astype(np.float64) * 3 - 1
    for k in range(4):
        acc = s
        for i in range(30):
            acc = np.tanh(acc * 0.5 + k) + s
        assert_close(results[k], acc.sum(0), rtol=1e-5, atol=1e-5)
