"""`@em.config`: dataclasses that save to and load from JSON, and build modules.

    @em.config
    class MlpConfig:
        d_in: int
        d_hidden: int = 64
        act: ActConfig = dataclasses.field(default_factory=ActConfig)   # nested config

        def init(self, device):          # the module this config describes
            return Mlp(self, device=device)

    cfg = MlpConfig(4)
    cfg.save("mlp.json"); MlpConfig.load("mlp.json") == cfg
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import tempfile
import types
import typing
from pathlib import Path

from ..errors import ConfigError

_MARK = "__ember_config__"


def is_config(obj) -> bool:
    """Whether ``obj`` is an ``@em.config`` class or instance."""
    return getattr(obj, _MARK, False) is True


def config(cls=None, /, **dataclass_kwargs):
    """Class decorator: make ``cls`` a dataclass with ``to_dict``/``from_dict``,
    ``save(path)``/``load(path)`` (JSON, written atomically) and ``to_json``/``from_json``.
    Fields whose type is another config class nest. ``@em.config(frozen=True)`` passes
    options on to ``dataclasses.dataclass``."""
    def wrap(c):
        if not (dataclasses.is_dataclass(c) and "__dataclass_fields__" in c.__dict__):
            _config_defaults_to_factories(c)
            c = dataclasses.dataclass(c, **dataclass_kwargs)
        setattr(c, _MARK, True)
        for name, fn in _METHODS.items():
            if name not in c.__dict__:
                setattr(c, name, fn)
        return c
    return wrap if cls is None else wrap(cls)


def _config_defaults_to_factories(c) -> None:
    """``act: ActConfig = ActConfig()`` is allowed: a config instance used as a default
    becomes a ``default_factory`` returning a copy (dataclasses refuse mutable defaults)."""
    for name in c.__dict__.get("__annotations__", {}):
        v = c.__dict__.get(name, dataclasses.MISSING)
        if is_config(v) and not isinstance(v, type):
            setattr(c, name, dataclasses.field(default_factory=lambda v=v: copy.deepcopy(v)))


# -- conversion ---------------------------------------------------------------------------
def _to_plain(v):
    if is_config(v) and not isinstance(v, type):
        return v.to_dict()
    if isinstance(v, dict):
        return {str(k): _to_plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_to_plain(x) for x in v]
    if isinstance(v, Path):
        return str(v)
    if callable(getattr(v, "to_dict", None)) and not isinstance(v, type):
        return v.to_dict()   # a value type with its own JSON form (e.g. nn.Initializer)
    if hasattr(v, "name") and hasattr(type(v), "__members__"):  # Enum
        return v.value
    return v


def _hints(cls) -> dict:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # unresolvable forward references: fall back to the raw annotations
        return {f.name: f.type for f in dataclasses.fields(cls)}


def _from_plain(tp, v, where: str):
    """Convert JSON value ``v`` to the declared field type ``tp`` where it matters: nested
    configs, tuples, and containers of configs."""
    if v is None:
        return None
    if isinstance(tp, type) and is_config(tp):
        if is_config(v) and not isinstance(v, type):
            return v
        if not isinstance(v, dict):
            raise ConfigError(f"{where}: expected an object for config {tp.__name__}, got "
                              f"{type(v).__name__} {v!r}")
        return _from_dict(tp, v, where)
    if isinstance(tp, type) and isinstance(v, dict) and callable(getattr(tp, "from_dict", None)):
        # a value type with its own JSON form (e.g. nn.Initializer)
        return v if isinstance(v, tp) else tp.from_dict(v)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        for a in args:
            if a is type(None):
                continue
            if isinstance(a, type) and is_config(a) and isinstance(v, dict):
                return _from_dict(a, v, where)
        non_none = [a for a in args if a is not type(None)]
        return _from_plain(non_none[0], v, where) if len(non_none) == 1 else v
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(v, (list, tuple)):
            return v
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                items = [_from_plain(args[0], x, f"{where}[{i}]") for i, x in enumerate(v)]
            elif args and len(args) == len(v):
                items = [_from_plain(a, x, f"{where}[{i}]") for i, (a, x) in
                         enumerate(zip(args, v))]
            else:
                items = list(v)
            return tuple(items)
        if tp is tuple:
            return tuple(v)
        if args:
            return [_from_plain(args[0], x, f"{where}[{i}]") for i, x in enumerate(v)]
        return list(v)
    if origin is dict and args and isinstance(v, dict):
        return {k: _from_plain(args[1], x, f"{where}.{k}") for k, x in v.items()}
    if isinstance(tp, type) and hasattr(tp, "__members__") and not isinstance(v, tp):  # Enum
        try:
            return tp(v)
        except ValueError:
            raise ConfigError(f"{where}: {v!r} is not a valid {tp.__name__}; valid: "
                              f"{[m.value for m in tp]}") from None
    if tp is float and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    return v


def _from_dict(cls, d: dict, where: str | None = None):
    where = where or cls.__name__
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: expected an object (dict), got {type(d).__name__}")
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = [f.name for f in fields]
    unknown = [k for k in d if k not in names]
    missing = [f.name for f in fields if f.name not in d
               and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if unknown or missing:
        parts = []
        if unknown:
            parts.append(f"unknown keys {unknown}")
        if missing:
            parts.append(f"missing keys {missing}")
        raise ConfigError(f"{where}: {' and '.join(parts)}; valid keys: {names}")
    hints = _hints(cls)
    kwargs = {k: _from_plain(hints.get(k), v, f"{where}.{k}") for k, v in d.items()}
    return cls(**kwargs)


# -- methods added to config classes ---------------------------------------------------------
def _to_dict(self) -> dict:
    """The config as plain JSON values (nested configs as dicts, tuples as lists)."""
    return {f.name: _to_plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


@classmethod
def _cls_from_dict(cls, d: dict):
    """The config from a dict; unknown or missing keys raise ConfigError naming them."""
    return _from_dict(cls, d)


def _to_json(self, indent: int | None = 2) -> str:
    return json.dumps(self.to_dict(), indent=indent)


@classmethod
def _cls_from_json(cls, text: str):
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{cls.__name__}: not valid JSON ({e})") from None
    return _from_dict(cls, d)


def _save(self, path) -> Path:
    """Write the config as JSON to ``path`` atomically (temp file, fsync, os.replace)."""
    path = Path(path)
    write_atomic(path, (self.to_json() + "\n").encode())
    return path


@classmethod
def _cls_load(cls, path):
    """Read a config saved with ``save``."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{cls.__name__}.load: no file at {str(path)!r}") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{cls.__name__}.load: {str(path)!r} is not valid JSON ({e})") from None
    return _from_dict(cls, d)


_METHODS = {"to_dict": _to_dict, "from_dict": _cls_from_dict, "to_json": _to_json,
            "from_json": _cls_from_json, "save": _save, "load": _cls_load}


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temp file in the same folder, fsync,
    os.replace (readers see the old file or the new one, never a partial one)."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
