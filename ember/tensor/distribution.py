"""Distributions for `Tensor.random`: Default (uniform [0, 1)), Uniform, Normal, Bernoulli."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class Distribution:
    """A distribution to sample tensors from. Backends sample with their own streams;
    ``sample_numpy`` is the NumPy reference."""

    def sample_numpy(self, rng: np.random.Generator, shape, np_dtype):
        raise NotImplementedError

    @staticmethod
    def default():
        return Default()

    @staticmethod
    def uniform(low: float, high: float):
        return Uniform(low, high)

    @staticmethod
    def normal(mean: float = 0.0, std: float = 1.0):
        return Normal(mean, std)

    @staticmethod
    def bernoulli(prob: float):
        return Bernoulli(prob)


def _as(values, np_dtype):
    return np.asarray(values).astype(np_dtype, copy=False)


@dataclass(frozen=True)
class Default(Distribution):
    """Uniform on [0, 1)."""

    def sample_numpy(self, rng, shape, np_dtype):
        return _as(rng.random(shape), np_dtype)


@dataclass(frozen=True)
class Uniform(Distribution):
    low: float
    high: float

    def __post_init__(self):
        if not self.low <= self.high:
            from ..errors import ShapeError
            raise ShapeError(f"Uniform: low {self.low} must be <= high {self.high}")

    def sample_numpy(self, rng, shape, np_dtype):
        if np.dtype(np_dtype).kind in "iu":
            return _as(rng.integers(int(self.low), int(self.high), size=shape), np_dtype)
        return _as(rng.uniform(self.low, self.high, shape), np_dtype)


@dataclass(frozen=True)
class Normal(Distribution):
    mean: float = 0.0
    std: float = 1.0

    def __post_init__(self):
        if self.std < 0:
            from ..errors import ShapeError
            raise ShapeError(f"Normal: std {self.std} must be >= 0")

    def sample_numpy(self, rng, shape, np_dtype):
        return _as(rng.normal(self.mean, self.std, shape), np_dtype)


@dataclass(frozen=True)
class Bernoulli(Distribution):
    prob: float

    def __post_init__(self):
        if not 0.0 <= self.prob <= 1.0:
            from ..errors import ShapeError
            raise ShapeError(f"Bernoulli: prob {self.prob} must be in [0, 1]")

    def sample_numpy(self, rng, shape, np_dtype):
        return _as(rng.random(shape) < self.prob, np_dtype)
