"""The plan cache: plans (with their compiled kernels) keyed by a stream's structure.

A key holds, per node in recording order: its structure id (kind, op, static args, shape,
dtype; interned when the node is recorded), its inputs as relative ids (earlier nodes by
position, external buffers by first appearance, scalars as placeholders) and whether its
value is needed afterwards; and per external buffer its shape, dtype and strides. Values
never enter a key: a training step that repeats replays its plans without planning or
compiling.

A hit is one dict lookup, without a lock; when the cache is full the oldest plan goes.
"""
from __future__ import annotations

import threading

MAX_PLANS = 1024


class PlanCache:
    def __init__(self, size: int = MAX_PLANS):
        self._d = {}
        self._lock = threading.Lock()
        self._size = size
        self.get = self._d.get

    def put(self, key, plan):
        with self._lock:
            d = self._d
            d[key] = plan
            while len(d) > self._size:
                del d[next(iter(d))]

    def clear(self):
        with self._lock:
            self._d.clear()

    def __len__(self):
        return len(self._d)
