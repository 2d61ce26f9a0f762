"""`repr` of tensors: values (summarized when large), shape, dtype and device."""
from __future__ import annotations

import numpy as np


def tensor_repr(t) -> str:
    try:
        arr = t.numpy()
        if arr.dtype.kind == "V" or t.dtype.name == "bfloat16":
            arr = arr.astype(np.float32)
        with np.printoptions(threshold=200, edgeitems=3, precision=4, linewidth=88):
            body = np.array2string(arr, separator=", ", prefix="Tensor(")
    except Exception as e:  # repr must never raise
        body = f"<values unavailable: {type(e).__name__}: {e}>"
    grad = ", require_grad" if t.is_require_grad() else ""
    return (f"Tensor({body}, shape={tuple(t._shape)}, dtype={t._dtype.short}, "
            f"device={t._device}{grad})")
