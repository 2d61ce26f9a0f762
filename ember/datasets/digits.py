"""The 8x8 handwritten digits (UCI, CC BY 4.0; see data/DIGITS_LICENSE.md), bundled so that
`ember demo` and tests run offline."""
from __future__ import annotations

import csv
import gzip
import io
from importlib import resources

import numpy as np

N_SAMPLES = 1797
N_CLASSES = 10


def load_digits(*, flatten: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(images, labels)``: images float32 of shape [1797, 8, 8] (or [1797, 64] with
    ``flatten=True``), pixel counts 0..16 unscaled; labels int64 in 0..9."""
    raw = resources.files(__package__).joinpath("data").joinpath("digits.csv.gz").read_bytes()
    with gzip.open(io.BytesIO(raw), "rt", newline="") as f:
        rows = [row for row in csv.reader(f) if row]
    table = np.asarray(rows, dtype=np.float64)
    if table.shape != (N_SAMPLES, 65):
        raise ValueError(f"load_digits: expected a {N_SAMPLES}x65 table in digits.csv.gz, "
                         f"got {table.shape}; the bundled file is damaged")
    images = table[:, :64].astype(np.float32)
    labels = table[:, 64].astype(np.int64)
    return (images if flatten else images.reshape(-1, 8, 8)), labels
