"""Files of optimizer and scheduler state, through ember.record: optimizer state is a record
(named tensors + JSON metadata; safetensors by default, or msgpack), scheduler state a JSON
file; both written atomically (temp file, fsync, os.replace)."""
from __future__ import annotations

import json
import os

import ember as em
from ember.errors import RecordError


def save_file(path, tensors: dict, meta: dict, format: str = "safetensors") -> None:
    from ember.record import save_record
    save_record(tensors, path, format=format, metadata=meta)


def load_file(path, device=None) -> tuple[dict, dict]:
    """-> ({name: Tensor on ``device``}, metadata)."""
    from ember.record import load_record
    rec = load_record(path)
    return ({k: em.from_numpy(v, device=device) for k, v in rec.tensors.items()},
            rec.metadata)


def save_json(path, obj: dict) -> None:
    from ember.record import write_text_atomic
    write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def load_json(path, kind: str) -> dict:
    p = os.fspath(path)
    try:
        with open(p, "rb") as f:
            return json.loads(f.read())
    except OSError as e:
        raise RecordError(f"load {kind}: cannot read {p!r}: {e.strerror or e}") from None
    except ValueError:
        raise RecordError(f"load {kind}: {p!r} is not a JSON {kind} file") from None
