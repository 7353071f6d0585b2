"""Pruning methods as a table, `METHODS[name]`: NIRVANA and the baselines the paper compares with.

A method is how units are scored, how the budget is allocated and what is done after slicing
(`nirvana.methods.base.Method`). One folder per method holds its typed config and its steps.
Adding a method touches: its folder (config, steps, the `METHOD` row), one line in `METHODS` below,
its colour (`nirvana.charts.METHOD_COLORS`) and its "how to read it" text (`ui.methods.EXPLAIN`); tests
fail until the last two exist. To put it in the baselines grid, its name in `nirvana.bench.baselines.METHODS`.
Its kind decides the steps: `ScoredMethod` (unit scores, its allocation, an optional compensation),
`RotatingMethod` (SliceGPT) or `OnDataMethod` (no unit scores: `plan_on_data` and `apply` on the calibration
batch, as Tyr-the-Pruner's search does). The CLI (`--method`), the app, the benchmarks and docs/BASELINES.md
read this table.

    >>> from nirvana.methods import METHODS, get_method
    >>> sorted(METHODS)
    ['flap', 'llm-pruner', 'nirvana', 'slicegpt', 'tyr']
"""

from __future__ import annotations

from nirvana.errors import InvalidInput
from nirvana.methods import flap, llm_pruner, slicegpt, tyr
from nirvana.methods import nirvana as nirvana_method
from nirvana.methods.base import Method, MethodConfig, OnDataMethod, RotatingMethod, ScoredMethod, method_config_of

DEFAULT_METHOD = nirvana_method.METHOD.name  # the paper's method: every default, and what reports compare with

METHODS: dict[str, Method] = {
    m.name: m for m in (nirvana_method.METHOD, llm_pruner.METHOD, flap.METHOD, slicegpt.METHOD, tyr.METHOD)
}


def is_baseline(name: str) -> bool:
    """A method the paper compares with: every row but its own (`DEFAULT_METHOD`)."""
    return name != DEFAULT_METHOD


def get_method(name: str) -> Method:
    """The table row for `name`; `InvalidInput` listing the methods otherwise."""
    if name not in METHODS:
        raise InvalidInput(f"unknown method {name!r}; accepted: {', '.join(METHODS)}.")
    return METHODS[name]


def method_config(name: str, settings: dict | None = None) -> MethodConfig:
    """The validated config of method `name` from its JSON settings (None: the defaults)."""
    return method_config_of(get_method(name), settings)


def methods_help() -> str:
    """`name (label): description; ...` for help texts."""
    return "; ".join(f"{m.name} ({m.label}): {m.description}" for m in METHODS.values())


__all__ = [
    "DEFAULT_METHOD",
    "METHODS",
    "Method",
    "MethodConfig",
    "OnDataMethod",
    "RotatingMethod",
    "ScoredMethod",
    "get_method",
    "is_baseline",
    "method_config",
    "methods_help",
]
