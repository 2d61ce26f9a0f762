"""The plan cache: plans (with their compiled kernels) keyed by a stream's structure.

A key holds, per node in recording order: its kind, op, static args, shape, dtype, inputs as
relative ids (earlier nodes by position, external buffers by first appearance, scalars as
placeholders) and whether its value is needed afterwards; and per external buffer its shape,
dtype and strides. Values never enter a key: a training step that repeats replays its plans
without planning or compiling.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

MAX_PLANS = 1024


class PlanCache:
    def __init__(self, size: int = MAX_PLANS):
        self._d = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    def get(self, key):
        d = self._d
        plan = d.get(key)
        if plan is not None:
            with self._lock:
                try:
                    d.move_to_end(key)
                except KeyError:
                    pass
        return plan

    def put(self, key, plan):
        with self._lock:
            self._d[key] = plan
            if len(self._d) > self._size:
                self._d.popitem(last=False)

    def clear(self):
        with self._lock:
            self._d.clear()

    def __len__(self):
        return len(self._d)
