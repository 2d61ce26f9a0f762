"""`Module`: parameters and sub-modules discovered from attributes, transformed as values.

A module's attributes, in definition order, are sorted into
- params: `Param` values,
- children: `Module` values,
- containers: lists, tuples and dicts (nested freely) holding params or modules,
- constants: everything else (ints, floats, strings, configs, None, plain Tensors).
Every transformation (`map`, `to_device`, `freeze`, `train`, ...) returns a NEW module built
from shallow copies of the module objects with replaced attributes; the original is never
changed, so modules can be copied, pickled and sent to other threads as plain values."""
from __future__ import annotations

import copy
import fnmatch
import re
from typing import Any, Callable

from ..errors import ConfigError, RecordError
from ..tensor import Tensor
from .param import Param

_CONTAINERS = (list, tuple, dict)
#: attribute values that never hold state: walks skip them without building their path
_PLAIN = frozenset({int, float, str, bool, type(None), bytes})


def _holds_state(v) -> bool:
    """Whether ``v`` is (or is a container holding) a Param or a Module."""
    if type(v) in _PLAIN:
        return False
    if isinstance(v, (Param, Module)):
        return True
    if isinstance(v, dict):
        v = v.values()
    elif not isinstance(v, (list, tuple)):
        return False
    for x in v:                 # (a loop, not any(genexpr): tuples of ints are common)
        if type(x) not in _PLAIN and _holds_state(x):
            return True
    return False


_NO_NAME = object()   # `_Transform._value` given a whole path (a dict key may be None)


def _join(prefix: str, name) -> str:
    return f"{prefix}.{name}" if prefix else str(name)


def _rebuild_container(v, items):
    """A container like ``v`` holding ``items`` (a list, or (key, value) pairs for dicts)."""
    if isinstance(v, dict):
        new = dict(items)
        if type(v) is dict:
            return new
        try:
            return type(v)(new)
        except TypeError:
            return new
    if type(v) is list or type(v) is tuple:
        return type(v)(items)
    if isinstance(v, tuple) and hasattr(v, "_fields"):  # namedtuple
        return type(v)(*items)
    try:
        return type(v)(items)
    except TypeError:
        return list(items) if isinstance(v, list) else tuple(items)


class _Transform:
    """One pass over a module tree rebuilding it: ``param_fn(path, param) -> Param|Tensor``,
    ``module_fn(module) -> None`` (mutates the fresh shallow copy), ``const_fn(value)`` for
    constant attributes (plain Tensors, e.g. for device moves). Shared params and modules
    stay shared (each is transformed once)."""

    __slots__ = ("param_fn", "module_fn", "const_fn", "memo")

    def __init__(self, param_fn=None, module_fn=None, const_fn=None):
        self.param_fn, self.module_fn, self.const_fn = param_fn, module_fn, const_fn
        self.memo: dict[int, Any] = {}

    def module(self, m: "Module", prefix: str) -> "Module":
        key = id(m)
        if key in self.memo:
            return self.memo[key]
        new = object.__new__(type(m))
        self.memo[key] = new
        d = new.__dict__
        value = self._value
        for name, v in m.__dict__.items():
            if type(v) in _PLAIN or (type(v) is tuple and not _holds_state(v)):
                d[name] = v          # (a layer's tuples of ints: kept as they are)
            else:
                d[name] = value(v, prefix, name)
        if self.module_fn is not None:
            self.module_fn(new)
        return new

    def value(self, v, path: str):
        return v if type(v) in _PLAIN else self._value(v, path, _NO_NAME)

    def _value(self, v, prefix: str, name):
        """``v`` (not a plain value) transformed; its path is ``_join(prefix, name)`` (just
        ``prefix`` when ``name`` is _NO_NAME), built only for what needs it (params, modules,
        containers holding them), not for the tuples of ints layers keep."""
        if isinstance(v, Param):
            return self.param(v, prefix if name is _NO_NAME else _join(prefix, name))
        if isinstance(v, Module):
            return self.module(v, prefix if name is _NO_NAME else _join(prefix, name))
        if isinstance(v, _CONTAINERS) and _holds_state(v):
            path = prefix if name is _NO_NAME else _join(prefix, name)
            value = self._value
            if isinstance(v, dict):
                return _rebuild_container(v, [(k, x if type(x) in _PLAIN else value(x, path, k))
                                              for k, x in v.items()])
            return _rebuild_container(v, [x if type(x) in _PLAIN else value(x, path, i)
                                          for i, x in enumerate(v)])
        if self.const_fn is not None and isinstance(v, Tensor):
            return self.const_fn(v)
        return v

    def param(self, p: Param, path: str) -> Param:
        key = id(p)
        if key in self.memo:
            return self.memo[key]
        if self.param_fn is None:
            out = copy.copy(p)
        else:
            out = self.param_fn(path, p)
            if out is p:
                # a distinct object (same storage), so `new.w[0] = v` leaves the original be
                out = copy.copy(p)
            elif isinstance(out, Param):
                pass
            elif isinstance(out, Tensor):
                out = p.with_tensor(out)
            else:
                raise TypeError(f"Module.map: the function returned {type(out).__name__} for "
                                f"{path!r}; expected a Param or a Tensor")
        self.memo[key] = out
        return out


def _matcher(pattern) -> Callable[[str], bool]:
    if isinstance(pattern, re.Pattern):
        return lambda path: pattern.search(path) is not None
    if isinstance(pattern, str):
        return lambda path: fnmatch.fnmatchcase(path, pattern)
    if callable(pattern):
        return lambda path: bool(pattern(path))
    raise TypeError(f"expected a glob string, a compiled regex or a predicate, got "
                    f"{type(pattern).__name__}")


class Module:
    """Base class of every model and layer. Subclass it, assign Params, sub-modules,
    lists/tuples/dicts of them and plain values in ``__init__`` (calling
    ``super().__init__()`` is optional) and define ``forward``; ``module(x)`` calls it."""

    training: bool = True  # Dropout, BatchNorm... read it; set by train()/eval()

    def __init__(self):
        pass

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} defines no forward(); define "
                                  f"`def forward(self, x): ...` in the class")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # -- discovery ------------------------------------------------------------------------
    def _walk(self, prefix: str, seen: set, out_params: list | None,
              out_modules: list | None):
        if out_modules is not None:
            out_modules.append((prefix, self))
        for name, v in self.__dict__.items():
            if type(v) not in _PLAIN:
                self._walk_value(v, _join(prefix, name), seen, out_params, out_modules)

    @staticmethod
    def _walk_value(v, path, seen, out_params, out_modules):
        if type(v) in _PLAIN:
            return
        if isinstance(v, Param):
            if id(v) not in seen:
                seen.add(id(v))
                if out_params is not None:
                    out_params.append((path, v))
        elif isinstance(v, Module):
            if id(v) not in seen:
                seen.add(id(v))
                v._walk(path, seen, out_params, out_modules)
        elif isinstance(v, dict):
            for k, x in v.items():
                if type(x) not in _PLAIN:
                    Module._walk_value(x, _join(path, k), seen, out_params, out_modules)
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                if type(x) not in _PLAIN:   # (layers keep tuples of ints: no paths for them)
                    Module._walk_value(x, _join(path, i), seen, out_params, out_modules)

    def _collect_params(self, seen: set, out: list) -> None:
        """`named_parameters` without the paths (what `parameters` needs): the same params
        in the same order, found by the same rules."""
        for v in self.__dict__.values():
            if type(v) in _PLAIN:
                continue
            if type(v) is tuple:          # (a layer's tuples of ints, mostly)
                for x in v:
                    if type(x) not in _PLAIN:
                        _collect_value(x, seen, out)
            else:
                _collect_value(v, seen, out)

    def named_parameters(self) -> list[tuple[str, Param]]:
        """``[(path, param)]`` in definition order, paths like ``"layers.0.weight"`` (dict
        keys are path parts). A param shared by several attributes is listed once."""
        out: list = []
        self._walk("", {id(self)}, out, None)
        return out

    def parameters(self) -> list[Param]:
        if type(self).named_parameters is not Module.named_parameters:
            return [p for _, p in self.named_parameters()]   # a subclass's own listing
        out: list = []
        self._collect_params({id(self)}, out)
        return out

    def named_modules(self) -> list[tuple[str, "Module"]]:
        """``[(path, module)]`` of this module ("") and every sub-module, depth first."""
        out: list = []
        self._walk("", {id(self)}, None, out)
        return out

    def modules(self) -> list["Module"]:
        return [m for _, m in self.named_modules()]

    def named_children(self) -> list[tuple[str, "Module"]]:
        """Direct sub-modules (including those in containers) with their paths."""
        out = []
        for path, m in self.named_modules()[1:]:
            out.append((path, m))
        prefixes = set()
        direct = []
        for path, m in out:
            if not any(path.startswith(p + ".") for p in prefixes):
                direct.append((path, m))
            prefixes.add(path)
        return direct

    def num_params(self, trainable_only: bool = False) -> int:
        """Number of scalar values in the params (buffers included unless
        ``trainable_only``); shared params count once."""
        return sum(p.numel() for p in self.parameters()
                   if not trainable_only or p.require_grad_flag)

    def devices(self) -> list:
        """The devices the params live on, each once, in order of first use."""
        out = []
        for p in self.parameters():
            if not any(p.device is d for d in out):
                out.append(p.device)
        return out

    def visit(self, fn: Callable[[str, Param], Any]) -> None:
        """Call ``fn(path, param)`` for every param, in definition order."""
        for path, p in self.named_parameters():
            fn(path, p)

    # -- transformations (each returns a new module) --------------------------------------
    def map(self, fn: Callable[[str, Param], "Param | Tensor"]) -> "Module":
        """A NEW module whose params are ``fn(path, param)``; a Tensor result becomes a
        Param with the same id and flag. The original module is unchanged."""
        return _Transform(param_fn=fn).module(self, "")

    def _with_modules(self, module_fn) -> "Module":
        return _Transform(module_fn=module_fn).module(self, "")

    def to_device(self, device) -> "Module":
        """This module with every param (and plain Tensor attribute) on ``device``; on an
        autodiff device params whose flag is set are leaves requiring grad."""
        from ..tensor.device import as_device
        device = as_device(device)
        return _Transform(param_fn=lambda _, p: p.with_tensor(p.tensor.to_device(device)),
                          const_fn=lambda t: t.to_device(device)).module(self, "")

    def fork(self, device) -> "Module":
        """Burn's name for `to_device`."""
        return self.to_device(device)

    def no_grad(self) -> "Module":
        """This module with no param requiring grad (all flags unset)."""
        return self.map(lambda _, p: p.with_require_grad(False))

    def valid(self) -> "Module":
        """The module for validation: params on their device without autodiff, and in eval
        mode (``training=False``). Flags are kept, so ``to_device(ad)`` restores training."""
        def move(_, p):
            return p.with_tensor(p.tensor.to_device(p.device.without_autodiff()))

        def const(t):
            return t.to_device(t.device.without_autodiff())

        return _Transform(param_fn=move, const_fn=const,
                          module_fn=_set_training(False)).module(self, "")

    def train(self, mode: bool = True) -> "Module":
        """This module (and every sub-module) with ``training = mode``."""
        return self._with_modules(_set_training(bool(mode)))

    def eval(self) -> "Module":
        """This module (and every sub-module) with ``training = False``."""
        return self.train(False)

    def _set_flags(self, pattern, flag: bool, op: str) -> "Module":
        match = _matcher(pattern)
        paths = [path for path, _ in self.named_parameters()]
        hits = [path for path in paths if match(path)]
        if not hits:
            shown = ", ".join(paths[:12]) + (", ..." if len(paths) > 12 else "")
            raise ConfigError(f"{op}: the pattern {_pattern_str(pattern)} matches no param of "
                              f"{type(self).__name__}; param paths: {shown or '(none)'}")
        hit = set(hits)
        return self.map(lambda path, p: p.with_require_grad(flag) if path in hit else p)

    def freeze(self, pattern="*") -> "Module":
        """A module whose params matching ``pattern`` (a glob on paths such as
        ``"encoder.*"``, a compiled regex searched in the path, or a predicate) do not
        require grad: they get no gradient and optimizers leave them unchanged."""
        return self._set_flags(pattern, False, "freeze")

    def unfreeze(self, pattern="*") -> "Module":
        """The inverse of `freeze`: matching params require grad again."""
        return self._set_flags(pattern, True, "unfreeze")

    # -- state dicts and records ----------------------------------------------------------
    def state_dict(self) -> dict[str, Tensor]:
        """``{path: Tensor}`` for every param (buffers included), in definition order."""
        return {path: p.tensor for path, p in self.named_parameters()}

    def load_state_dict(self, state: dict, strict: bool = True) -> "Module":
        """A NEW module with values from ``state`` ({path: Tensor | array}), cast to each
        param's dtype and moved to its device; ids and flags are kept. Missing and
        unexpected keys (``strict``) and shape mismatches are reported together in one
        RecordError."""
        named = self.named_parameters()
        paths = {path for path, _ in named}
        missing = [path for path, _ in named if path not in state]
        unexpected = [k for k in state if k not in paths]
        bad = []
        for path, p in named:
            if path in state:
                shape = tuple(_shape_of(state[path]))
                if shape != tuple(p.shape):
                    bad.append(f"{path}: record {list(shape)} vs module {list(p.shape)}")
        problems = []
        if strict and missing:
            problems.append(f"missing keys: {', '.join(missing)}")
        if strict and unexpected:
            problems.append(f"unexpected keys: {', '.join(unexpected)}")
        if bad:
            problems.append(f"shape mismatches: {'; '.join(bad)}")
        if problems:
            raise RecordError(f"load_state_dict into {type(self).__name__}: "
                              + " | ".join(problems)
                              + " (pass strict=False to skip missing/unexpected keys)")

        def load(path, p):
            if path not in state:
                return p
            v = state[path]
            if not isinstance(v, Tensor):
                from ..tensor.creation import tensor as _tensor
                v = _tensor(v.to_numpy() if hasattr(v, "to_numpy") else v,
                            dtype=p.dtype, device=p.device.without_autodiff())
            if v.dtype is not p.dtype:
                v = v.cast(p.dtype)
            return p.with_tensor(v.detach().to_device(p.device))

        return self.map(load)

    def save(self, path, format: str = "safetensors", precision: str = "full", **kwargs):
        """Write this module's record (see ember.record)."""
        from ..record import save_module
        return save_module(self, path, format=format, precision=precision, **kwargs)

    def load_record(self, path, strict: bool = True, **kwargs) -> "Module":
        """A NEW module with the values of the record at ``path`` (see ember.record)."""
        from ..record import load_module_record
        return load_module_record(self, path, strict=strict, **kwargs)

    # -- display --------------------------------------------------------------------------
    def extra_repr(self) -> str:
        """One line of details shown in the repr, e.g. ``in=4, out=8``. The default lists
        simple constant attributes and, for modules without children, param shapes."""
        parts = []
        has_children = any(isinstance(v, Module) or
                           (isinstance(v, _CONTAINERS) and _holds_state(v))
                           for v in self.__dict__.values())
        for name, v in self.__dict__.items():
            if name.startswith("_") or name == "training":
                continue
            if isinstance(v, Param):
                if not has_children:
                    parts.append(f"{name}={list(v.shape)}")
            elif isinstance(v, (bool, int, float, str)) or v is None:
                parts.append(f"{name}={v!r}")
        return ", ".join(parts)

    def __repr__(self) -> str:
        return _module_repr(self, set())


def _collect_value(v, seen: set, out: list) -> None:
    """`Module._walk_value` collecting params only, with no paths (``v`` is not plain)."""
    if isinstance(v, Param):
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    elif isinstance(v, Module):
        if id(v) not in seen:
            seen.add(id(v))
            v._collect_params(seen, out)
    elif isinstance(v, (dict, list, tuple)):
        for x in (v.values() if isinstance(v, dict) else v):
            if type(x) not in _PLAIN:
                _collect_value(x, seen, out)


def _pattern_str(pattern) -> str:
    if isinstance(pattern, re.Pattern):
        return f"re.compile({pattern.pattern!r})"
    return repr(pattern)


def _shape_of(v):
    shape = getattr(v, "shape", None)
    if shape is None:
        import numpy as np
        shape = np.shape(v)
    return shape


def _set_training(flag: bool):
    def fn(m):
        m.__dict__["training"] = flag
    return fn


def _indent(text: str) -> str:
    return text.replace("\n", "\n  ")


def _value_lines(v, seen) -> str | None:
    if isinstance(v, Module):
        return _module_repr(v, seen)
    if isinstance(v, Param):
        return v.describe()
    if isinstance(v, _CONTAINERS) and _holds_state(v):
        items = v.items() if isinstance(v, dict) else enumerate(v)
        open_, close = ("{", "}") if isinstance(v, dict) else ("[", "]")
        lines = []
        for k, x in items:
            r = _value_lines(x, seen)
            if r is not None:
                lines.append(f"  ({k}): {_indent(r)}")
        return open_ + "\n" + "\n".join(lines) + "\n" + close
    return None


def _module_repr(m: Module, seen: set) -> str:
    name = type(m).__name__
    try:
        extra = m.extra_repr()
    except Exception as e:  # a repr must not raise
        extra = f"<extra_repr failed: {type(e).__name__}>"
    if id(m) in seen:
        return f"{name}(...)  # cycle"
    seen = seen | {id(m)}
    lines = []
    has_children = False
    for attr, v in m.__dict__.items():
        r = _value_lines(v, seen)
        if r is not None:
            has_children = has_children or not isinstance(v, Param)
            lines.append(f"  ({attr}): {_indent(r)}")
    if has_children:
        head = [f"  {extra}"] if extra else []
        return f"{name}(\n" + "\n".join(head + lines) + "\n)"
    return f"{name}({extra})"
