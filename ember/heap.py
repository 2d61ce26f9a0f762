"""Python's cyclic garbage collector during training: the heap of the setup is frozen.

Every op of ember's host path makes a few Python objects (tensors, graph nodes, handles);
they die by reference counting, but each allocation counts toward the collector's
thresholds, and about every sixty GPT steps a full (generation 2) collection walks the
whole heap: every module, array and function of NumPy, CuPy and PyTorch imported, ember's
own. Measured on the H200 machine's host: 2 full collections per 120 steps of 90-110 ms
each, 1.5-1.8 ms a step on average, and nothing found (a training step makes no cyclic
garbage). ``gc.freeze()`` moves every object alive to a permanent generation that
collections skip (the same pass then costs under a millisecond), as serving engines do after
their warm-up (vLLM, SGLang).

ember does it once per process, at the end of the first optimizer step -- in a hand-written
loop and in the Learner alike that is where the setup (imports, data, the model, its
optimizer state) has been made and the repeated work begins -- after a full collection, so
that no garbage of the setup is kept. Objects frozen are still freed by reference counting;
only a reference cycle among them, made garbage later, would stay (none of ember's values
form cycles). ``em.freeze_heap()`` does it at once; ``em.set_auto_freeze_heap(False)`` or
``EMBER_AUTO_FREEZE_HEAP=0`` leaves the collector as Python configured it.
"""
from __future__ import annotations

import gc
import os

_auto = os.environ.get("EMBER_AUTO_FREEZE_HEAP", "1") != "0"
_done = False


def freeze_heap() -> int:
    """Collect garbage, then freeze every object alive (``gc.freeze``): later collections
    skip them. Returns the number of objects frozen in all (``gc.get_freeze_count``)."""
    global _done
    _done = True
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def set_auto_freeze_heap(enabled: bool) -> None:
    """Whether the first optimizer step of this process freezes the heap (default: yes,
    unless ``EMBER_AUTO_FREEZE_HEAP=0``)."""
    global _auto
    _auto = bool(enabled)


def after_optimizer_step() -> None:
    """Called at the end of every optimizer step: the first one freezes the heap (when
    enabled); the others return at once."""
    if not _done and _auto:
        freeze_heap()
