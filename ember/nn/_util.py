"""Small helpers shared by the layers (argument checks, devices)."""
from __future__ import annotations

import ember as em
from ember.errors import ConfigError


def as_device(device):
    """``device`` as a Device: None is the default device, a string is parsed."""
    if device is None:
        return em.default_device()
    if isinstance(device, str):
        return em.device(device)
    return device


def positive_int(owner: str, name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{owner}: {name} must be a positive int, got {v!r}")
    return v


def nonneg_int(owner: str, name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError(f"{owner}: {name} must be a non-negative int, got {v!r}")
    return v


def probability(owner: str, name: str, v) -> float:
    try:
        p = float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{owner}: {name} must be a float in [0, 1), got {v!r}") from None
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"{owner}: {name} must be in [0, 1), got {p}")
    return p


def ints(owner: str, name: str, v, nd: int, minimum: int):
    """An int or ``nd`` ints (a list from JSON is accepted) as a tuple."""
    if isinstance(v, int) and not isinstance(v, bool):
        t = (v,) * nd
    elif isinstance(v, (list, tuple)) and len(v) in (1, nd) and \
            all(isinstance(i, int) and not isinstance(i, bool) for i in v):
        t = tuple(v) * (nd if len(v) == 1 else 1)
    else:
        raise ConfigError(f"{owner}: {name} must be an int or {nd} ints, got {v!r}")
    if any(i < minimum for i in t):
        raise ConfigError(f"{owner}: {name} {t} must be >= {minimum} in every dim")
    return t


def padding_arg(owner: str, v, nd: int):
    if isinstance(v, str):
        if v not in ("same", "valid"):
            raise ConfigError(f"{owner}: padding must be an int, {nd} ints, 'same' or 'valid', "
                              f"got {v!r}")
        return v
    return ints(owner, "padding", v, nd, 0)


def initializer_arg(owner: str, v, default):
    from .initializer import Initializer
    if v is None:
        return default
    if isinstance(v, dict):
        return Initializer.from_dict(v)
    if not isinstance(v, Initializer):
        raise ConfigError(f"{owner}: initializer must be an nn.Initializer (e.g. "
                          f"nn.init.XavierUniform()), got {type(v).__name__}")
    return v


def _tuplify(v):
    if isinstance(v, list):
        return tuple(_tuplify(x) for x in v)
    return v


def make_config(module_cls, name: str | None = None):
    """An ``@em.config`` class whose fields are ``module_cls``'s constructor arguments (all
    but ``device``, with the same defaults) and whose ``init(device)`` builds the module.

    Loaded from JSON, lists become tuples again and initializer dicts become `Initializer`
    values, so ``Cfg.load(path) == cfg``."""
    import inspect
    from typing import Any

    from .initializer import Initializer

    name = name or module_cls.__name__ + "Config"
    sig = inspect.signature(module_cls.__init__)
    annotations, ns, names = {}, {}, []
    takes_device = "device" in sig.parameters
    for p in list(sig.parameters.values())[1:]:
        if p.name == "device" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in ("init", "save", "load", "to_dict", "from_dict", "to_json", "from_json"):
            raise TypeError(f"make_config: {module_cls.__name__}'s argument {p.name!r} would "
                            f"shadow a config method; rename it")
        ann = p.annotation
        if ann is p.empty or "Initializer" in str(ann) or "Module" in str(ann):
            ann = Any
        annotations[p.name] = ann
        if p.default is not p.empty:
            ns[p.name] = p.default
        names.append(p.name)

    def __post_init__(self):
        for n in names:
            v = getattr(self, n)
            if isinstance(v, dict) and "type" in v:
                object.__setattr__(self, n, Initializer.from_dict(v))
            elif isinstance(v, list):
                object.__setattr__(self, n, _tuplify(v))

    def init(self, device=None):
        kwargs = {n: getattr(self, n) for n in names}
        if takes_device:
            kwargs["device"] = device
        return module_cls(**kwargs)

    init.__doc__ = f"Build the `{module_cls.__name__}` this config describes on ``device``."
    ns.update({"__annotations__": annotations, "__post_init__": __post_init__, "init": init,
               "__module__": module_cls.__module__, "__qualname__": name,
               "__doc__": f"Config of `{module_cls.__name__}`: its constructor's arguments "
                          f"({', '.join(names)}) as fields; ``.init(device)`` builds one."})
    cls = type(name, (), ns)
    return em.config(cls)
