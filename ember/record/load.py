"""Putting named arrays into a module: every key and shape is checked first, and all the
problems are reported together; nothing is loaded partially unless ``strict=False``."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import RecordError

__all__ = ["LoadReport", "apply_arrays", "param_owner"]

_MAX_LISTED = 50   # per category, in an error message


@dataclasses.dataclass
class LoadReport:
    """What a non-strict load did. ``loaded``: param paths that got a value from the record;
    ``missing``: params the record has no value for (they keep the module's values);
    ``unexpected``: record entries no param matches (ignored); ``mismatched``: (path, why)
    for entries whose shape or dtype kind does not fit the param (the param keeps its value);
    ``skipped``: (source key, why) for entries dropped before matching (non-tensor values,
    keys an adapter ignores)."""
    source: str
    loaded: list = dataclasses.field(default_factory=list)
    missing: list = dataclasses.field(default_factory=list)
    unexpected: list = dataclasses.field(default_factory=list)
    mismatched: list = dataclasses.field(default_factory=list)
    skipped: list = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every param was loaded and every record entry was used."""
        return not (self.missing or self.unexpected or self.mismatched)

    def problems(self) -> list[str]:
        out = []
        if self.missing:
            out.append(_listing(f"{len(self.missing)} missing (params the record has no "
                                f"value for)", self.missing))
        if self.unexpected:
            out.append(_listing(f"{len(self.unexpected)} unexpected (record entries no param "
                                f"matches)", self.unexpected))
        if self.mismatched:
            out.append(_listing(f"{len(self.mismatched)} mismatched",
                                [f"{k}: {why}" for k, why in self.mismatched]))
        return out

    def __str__(self):
        lines = [f"LoadReport({self.source}): {len(self.loaded)} loaded"]
        lines += self.problems()
        if self.skipped:
            lines.append(_listing(f"{len(self.skipped)} skipped",
                                  [f"{k}: {why}" for k, why in self.skipped]))
        return "\n".join(lines)


def _listing(title, items):
    shown = [f"  {x}" for x in items[:_MAX_LISTED]]
    if len(items) > _MAX_LISTED:
        shown.append(f"  ... and {len(items) - _MAX_LISTED} more")
    return title + ":\n" + "\n".join(shown)


def param_owner(module, path: str):
    """``(owner, attr)`` for a param path like ``layers.0.weight``: the module (or container)
    holding the param and the attribute (or key) it is stored under. Follows attributes,
    list/tuple indices and dict keys; returns ``(None, last)`` where the path cannot be
    followed."""
    parts = path.split(".")
    obj = module
    for part in parts[:-1]:
        nxt = None
        if isinstance(obj, (list, tuple)):
            if part.isdigit() and int(part) < len(obj):
                nxt = obj[int(part)]
        elif isinstance(obj, dict):
            nxt = obj.get(part, obj.get(int(part)) if part.isdigit() else None)
        else:
            nxt = getattr(obj, part, None)
        if nxt is None:
            return None, parts[-1]
        obj = nxt
    return obj, parts[-1]


def _convert(arr: np.ndarray, param):
    """``arr`` as the param's NumPy dtype, or a string saying why it cannot be."""
    want = param.dtype
    kind = arr.dtype.kind
    if kind == "f" or arr.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        have = "float"
    elif kind in "iu":
        have = "int"
    elif kind == "b":
        have = "bool"
    else:
        return f"dtype {arr.dtype} has no ember equivalent"
    if have != want.kind:
        return f"record holds {have} values ({arr.dtype}), the param is {want.short}"
    if have == "int" and arr.size:
        info = np.iinfo(want.np)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < info.min or hi > info.max:
            return f"int values in [{lo}, {hi}] do not fit the param's {want.short}"
    return np.asarray(arr).astype(want.np, copy=False)


def apply_arrays(module, arrays: dict, *, source: str, strict: bool = True, ids=None,
                 skipped=()):
    """A new module whose params take their values from ``arrays`` ({path: ndarray}), cast
    to each param's dtype and put on its device. ``ids`` ({path: id}) sets param ids too.
    strict: any missing key, unexpected key or shape/dtype mismatch raises one RecordError
    listing all of them, and nothing is loaded. Not strict: returns ``(module, LoadReport)``
    with whatever fitted loaded."""
    import ember as em

    report = LoadReport(source=source, skipped=list(skipped))
    values = {}
    params = module.named_parameters()
    seen = set()
    for path, p in params:
        seen.add(path)
        if path not in arrays:
            report.missing.append(path)
            continue
        arr = arrays[path]
        if tuple(arr.shape) != tuple(p.shape):
            report.mismatched.append(
                (path, f"shape {list(arr.shape)} in the record, {list(p.shape)} in the module"))
            continue
        conv = _convert(arr, p)
        if isinstance(conv, str):
            report.mismatched.append((path, conv))
            continue
        values[path] = conv
    report.unexpected = [k for k in arrays if k not in seen]
    if strict and not report.ok:
        raise RecordError(f"cannot load {source} into {type(module).__name__}:\n" +
                          "\n".join(report.problems()) +
                          "\n(pass strict=False to load what fits and get a LoadReport)")
    ids = ids or {}

    def put(path, p):
        arr = values.get(path)
        if arr is None:
            return p
        t = em.tensor(arr, dtype=p.dtype, device=p.device)
        new = p.with_tensor(t)
        pid = ids.get(path)
        if pid is not None and pid != new.id:
            new = em.Param(t, id=str(pid), require_grad=p.require_grad_flag)
        return new

    out = module.map(put)
    report.loaded = [path for path, _ in params if path in values]
    return out if strict else (out, report)
