"""Creation and random ops: tensors made from static arguments on a device."""
from __future__ import annotations

import numpy as np

from .registry import declare


FULL = declare(
    "full", "creation", nin=0, attrs=("shape", "value", "dtype"),
    infer=lambda shape, value, dtype: (shape, dtype),
    numpy=lambda shape, value, dtype: np.full(shape, value, dtype=dtype.np))


def _random_numpy(rng, shape, distribution, dtype):
    return distribution.sample_numpy(rng, shape, dtype.np)


RANDOM = declare(
    "random", "random", nin=0, attrs=("shape", "distribution", "dtype"),
    infer=lambda shape, distribution, dtype: (shape, dtype),
    numpy=_random_numpy,
    doc="samples of a Distribution from the device's seeded stream")
