"""One CUDA stream per thread and device, made current around each op.

Each thread queues its ops on its own stream, so threads never wait for each other's
kernels. The streams are *blocking* streams: CUDA orders them with the legacy default
stream (handle 0, CuPy's and PyTorch's default), whose work waits for everything queued on
them before it and which they wait for in turn. A caller reading a tensor's primitive on
that stream is therefore ordered without the event record and wait a non-blocking stream
needs (about 2.7 µs of a 10 µs eager op on an H200 host); other threads' ember streams still
run concurrently, since blocking streams only order with the legacy one.

A tensor made on one thread's stream and used on another's needs an order between the two
streams; `StreamOrder` provides it without any host synchronization:

* while a device has one stream (one thread uses it: the common case) nothing is tracked;
* when a second stream appears, the device is synchronized once (everything queued before
  is finished), and from then on each allocation remembers the last stream that used it;
* an op whose input was last used on another stream makes its own stream wait for an event
  recorded on that one, and keeps the input alive until the op has run (otherwise the
  memory could be freed to the other stream's pool and rewritten while still being read).
"""
from __future__ import annotations

import collections
import threading

from .memory import Outputs, outputs_enabled

#: the handle of CUDA's legacy default stream, which every blocking stream is ordered with
LEGACY_DEFAULT_STREAM = 0


class Scope:
    """``with scope:`` makes ``stream`` (and its device) current for the calling thread."""

    __slots__ = ("stream", "index", "_saved", "_set_device", "_get_device", "order",
                 "keep", "_handoff", "_record", "_wait", "stream_ptr", "outputs", "_empty")

    def __init__(self, stream, index, runtime, order, empty=None):
        self.stream = stream
        self.stream_ptr = stream.ptr
        self.index = index
        #: small output arrays reused by this stream's direct launches (`memory.Outputs`),
        #: or None
        self._empty = empty
        self.outputs = Outputs(self._new_output) if empty is not None else None
        self._saved = []
        self._get_device = runtime.getDevice
        self._set_device = runtime.setDevice
        self._record = runtime.eventRecord
        self._wait = runtime.streamWaitEvent
        self.order = order
        self.keep = collections.deque()      # (event, arrays) pending cross-stream reads
        self._handoff = None                 # the event `order_stream` records, reused

    def _new_output(self, shape, dtype):
        with self:                   # from the pool's free list of this stream
            return self._empty(shape, dtype)

    def order_stream(self, cp, other) -> None:
        """Make stream ``other`` (a stream, or its handle) wait for the work queued so far on
        this scope's stream (no host synchronization). One untimed event is recorded again on
        each call (creating a timed event per call, ``stream.record()``, cost about 9 µs of
        every ``tensor.primitive``), through the runtime's calls on raw handles. Nothing is
        recorded for the legacy default stream (handle 0): it waits for this blocking
        stream's queued work by itself."""
        optr = other if type(other) is int else other.ptr
        sptr = self.stream_ptr
        if optr == sptr or optr == LEGACY_DEFAULT_STREAM:
            return
        ev = self._handoff
        if ev is None:
            ev = self._handoff = cp.cuda.Event(disable_timing=True)
        self._record(ev.ptr, sptr)
        self._wait(optr, ev.ptr, 0)

    def __enter__(self):
        prev = self._get_device()
        if prev != self.index:
            self._set_device(self.index)
        self._saved.append(prev)
        self.stream.__enter__()
        return self

    def __exit__(self, *exc):
        self.stream.__exit__(*exc)
        prev = self._saved.pop()
        if prev != self.index:
            self._set_device(prev)
        return False


class StreamOrder:
    """The streams of one device, and the cross-stream order described in the module doc."""

    def __init__(self, cupy, index):
        self.cp = cupy
        self.index = index
        self.streams = 0
        self.tracking = False
        self._lock = threading.Lock()

    def new_scope(self):
        cp = self.cp
        with self._lock:
            with cp.cuda.Device(self.index):
                if self.streams >= 1 and not self.tracking:
                    cp.cuda.Device(self.index).synchronize()
                    self.tracking = True
                stream = cp.cuda.Stream(non_blocking=False)    # blocking: see the module doc
            self.streams += 1
        return Scope(stream, self.index, cp.cuda.runtime, self,
                     cp.ndarray if outputs_enabled() else None)

    # -- cross-stream tracking (only while ``tracking``) ----------------------------------
    def before(self, scope, prims):
        """Order ``scope``'s stream after the last use of each input on another stream;
        returns the inputs that crossed streams (kept alive by `after`)."""
        mine = scope.stream
        crossed = None
        for p in prims:
            mem = _mem(p)
            if mem is None:
                continue
            other = getattr(mem, "_ember_stream", None)
            if other is not None and other is not mine:
                mine.wait_event(other.record())
                if crossed is None:
                    crossed = []
                crossed.append(p)
            _mark(mem, mine)
        _prune(scope.keep)
        return crossed

    def after(self, scope, out, crossed):
        mine = scope.stream
        for o in (out if isinstance(out, tuple) else (out,)):
            mem = _mem(o)
            if mem is not None:
                _mark(mem, mine)
        if crossed:
            scope.keep.append((mine.record(), crossed))


def _mem(x):
    data = getattr(x, "data", None)
    return getattr(data, "mem", None) if data is not None else None


def _mark(mem, stream):
    try:
        mem._ember_stream = stream
    except AttributeError:      # memory CuPy did not allocate (DLPack imports): untracked
        pass


def _prune(keep):
    while keep and keep[0][0].done:
        keep.popleft()
