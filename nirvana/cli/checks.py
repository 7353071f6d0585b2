"""A command's checks that need no model, run before it waits for the device lock or loads anything.

A typo should cost a second, not a model load (or minutes behind another job's lock). Every rule
and its message stay with the library's own validators: the registry (`model_reference`), the
settings' dataclasses (`PruneSettings`, `Allocation`), the method table, the
dataset names. This module only decides which of them apply before the model is known.

What depends on the model's family (its allocations, the methods it takes) is read from the model
reference where it says (a registry row, a folder's config.json); for a hub id the settings are
refused only when every family would refuse them, and the rest is left to the checks after the load.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from nirvana.checkpoints.options import hub_reachable, resolve_device, resolve_dtype
from nirvana.data.calibration import check_calibration_source
from nirvana.errors import InvalidInput
from nirvana.guard.safety import check_model_name
from nirvana.methods import get_method
from nirvana.models.family import family_name
from nirvana.models.registry import ModelReference, check_hub_reference, model_reference
from nirvana.pipeline import PruneSettings
from nirvana.pruning.allocation import check_allocation_kind
from nirvana.search.calibration import check_selection
from nirvana.t5.steps import check_t5_settings


def check_model(name: str) -> ModelReference:
    """What a model argument names, refused before any load: not a registry name, an existing path or an
    owner/name hub id (with the closest registry names), a path outside NIRVANA_MODEL_ROOTS, or a hub id
    that can be served neither by the hub nor by the local Hugging Face cache."""
    ref = model_reference(name)
    check_model_name(ref.name)
    if ref.kind == "hub":
        check_hub_reference(ref, hub_reachable())  # one short probe, the one the load would make
    return ref


def check_model_args(args, *flags: str) -> ModelReference:
    """Check the model arguments `flags` (attribute names; default "model"), --device and --dtype;
    return the first flag's reference (what a command's settings checks read the family from)."""
    refs = [check_model(getattr(args, flag)) for flag in flags or ("model",)]
    check_device(args)
    return refs[0]


def check_device(args) -> None:
    """--device and --dtype (and --teacher-dtype where there is one) name what the loader accepts."""
    device = resolve_device(getattr(args, "device", "auto"))
    for flag in ("dtype", "teacher_dtype"):
        if getattr(args, flag, None) is not None:
            resolve_dtype(getattr(args, flag), device)


def family(ref: ModelReference) -> str | None:
    """The family, "decoder-only" or "t5" (as `nirvana.measure.family` names it), where the reference says it;
    None until the model is loaded."""
    if ref.model_type is None:
        return None
    return family_name(SimpleNamespace(model_type=ref.model_type))


def _decoder_only(settings: PruneSettings) -> None:
    check_allocation_kind("decoder-only", settings.allocation)
    get_method(settings.method).check_target(settings.sparsity, settings.config)  # before any model is loaded


def _t5(settings: PruneSettings) -> None:
    check_t5_settings(settings)  # method, criterion, allocation, no calibration search
    settings.allocation_settings  # noqa: B018 (the ranges: building the Allocation checks them)


# What each family's prune refuses of the settings before it loads anything (the checks `prune` runs first).
SETTINGS_CHECKS: dict[str, Callable[[PruneSettings], None]] = {"decoder-only": _decoder_only, "t5": _t5}


def check_settings(settings: PruneSettings, kind: str | None = None) -> None:
    """`score` / `prune` settings of a model of family `kind` (None: not known before loading, refused only
    when every family refuses them, with the first's message); then the calibration source and, for
    `select_calib`, the selection's own checks. `PruneSettings` itself has checked method and criterion."""
    errors = []
    for name in [kind] if kind else list(SETTINGS_CHECKS):
        try:
            SETTINGS_CHECKS[name](settings)
            break
        except InvalidInput as exc:
            errors.append(exc)
    else:
        raise errors[0]
    if settings.needs_data:
        check_calibration_source(settings.calib, settings.samples, settings.seq_len)
    if settings.select_calib:
        check_selection(settings.criterion, settings.calib, settings.select_calib)


def check_out_folder(path: str, holds: str, flag: str = "--out") -> None:
    """An output folder that can be made here: not an existing file, under a folder this user can write.
    Nothing is created (a refused command leaves no folder behind)."""
    out = Path(path).expanduser()
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"{flag} {path!r} is a file; pass a folder (it will hold {holds}).")
    check_parent(out, path, flag)


def check_out_file(path: str, what: str, flag: str = "--out") -> None:
    """An output file that can be written here: not an existing folder, under a folder this user can write."""
    out = Path(path).expanduser()
    if out.is_dir():
        raise InvalidInput(f"{flag} {path!r} is a folder; pass a file name (it will hold {what}).")
    check_parent(out.parent, path, flag)


def check_parent(folder: Path, path: str, flag: str = "--out") -> None:
    """The nearest existing folder at or above `folder` is a folder this user may write into (what an
    output `path` given as `flag` is written under)."""
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise InvalidInput(f"cannot create {flag} {path!r}: {str(existing)!r} is a file; pass a path under a folder.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InvalidInput(f"cannot create {flag} {path!r}: {str(existing)!r} is not writable; pass a writable path.")
