"""Parameter groups: parts of a module trained with their own settings (an lr multiplier, a
weight decay, any of the optimizer's hyperparameters), chosen by path pattern or by an
explicit list of parameters."""
from __future__ import annotations

import fnmatch
import re

from ember.errors import ConfigError

__all__ = ["ParamGroup"]


class ParamGroup:
    """Settings for the parameters it selects.

    ``pattern``: a glob on parameter paths (``"encoder.*"``, ``"*.bias"``; ``*`` also crosses
    dots), a list of globs, or a compiled ``re.Pattern`` (matched with ``search``), or a predicate on paths; ``params``:
    Params (or their ids) selected explicitly. A parameter is selected if either matches.
    ``lr_mult`` scales the step's learning rate; every other keyword overrides the optimizer's
    hyperparameter of that name (``weight_decay=0.0``, ``betas=(0.9, 0.95)``, ...).

    The first group (in the order given to the optimizer) that selects a parameter wins; the
    others get the optimizer's own settings.
    """

    __slots__ = ("patterns", "matchers", "ids", "lr_mult", "overrides", "name")

    def __init__(self, pattern=None, *, params=None, lr_mult: float = 1.0, name=None,
                 **overrides):
        self.patterns, self.matchers = [], []
        pats = [] if pattern is None else (
            list(pattern) if isinstance(pattern, (list, tuple)) else [pattern])
        for p in pats:
            if isinstance(p, re.Pattern):
                self.matchers.append(p)
            elif isinstance(p, str):
                self.patterns.append(p)
            elif callable(p):
                self.matchers.append(p)
            else:
                raise ConfigError(f"ParamGroup: a pattern must be a glob string, a compiled "
                                  f"re.Pattern or a predicate, got {type(p).__name__} {p!r}")
        self.ids = set()
        for p in params or ():
            pid = p if isinstance(p, str) else getattr(p, "id", None)
            if not isinstance(pid, str):
                raise ConfigError(f"ParamGroup: params must be Params or param ids (str), got "
                                  f"{type(p).__name__}")
            self.ids.add(pid)
        if not self.patterns and not self.matchers and not self.ids:
            raise ConfigError("ParamGroup: give a pattern (glob, re.Pattern or predicate) or "
                              "params=[...]")
        try:
            lr_mult = float(lr_mult)
        except (TypeError, ValueError):
            raise ConfigError(f"ParamGroup: lr_mult must be a number, got "
                              f"{type(lr_mult).__name__}") from None
        if not (lr_mult >= 0.0 and lr_mult != float("inf")):
            raise ConfigError(f"ParamGroup: lr_mult must be >= 0, got {lr_mult}")
        self.lr_mult = lr_mult
        self.overrides = dict(overrides)
        self.name = name if name is not None else (
            ",".join(self.patterns + [getattr(r, "pattern", getattr(r, "__name__", "fn"))
                                      for r in self.matchers])
            or f"{len(self.ids)} params")

    def matches(self, path: str, param_id) -> bool:
        if param_id in self.ids:
            return True
        for p in self.patterns:
            if fnmatch.fnmatchcase(path, p):
                return True
        for r in self.matchers:
            if (r.search(path) is not None) if isinstance(r, re.Pattern) else r(path):
                return True
        return False

    def __repr__(self):
        extra = "".join(f", {k}={v!r}" for k, v in self.overrides.items())
        return f"ParamGroup({self.name!r}, lr_mult={self.lr_mult}{extra})"
