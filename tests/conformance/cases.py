"""Collects ``CASES`` from every ``specs_*.py`` module in this folder."""
from __future__ import annotations

import importlib
import pathlib

_HERE = pathlib.Path(__file__).parent


def all_cases():
    cases = []
    for path in sorted(_HERE.glob("specs_*.py")):
        mod = importlib.import_module(f"tests.conformance.{path.stem}")
        cases.extend(mod.CASES)
    names = [c.name for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"duplicate case names: {dup}"
    return cases


CASES = all_cases()
