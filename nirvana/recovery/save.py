"""Save a recovered model as a pruned checkpoint folder, atomically, with what was done recorded.

Layout (the same as `prune --out`, so `load_model`, `eval` and `generate` take it as is):
    DIR/model/          safetensors, tokenizer, config with per-layer shapes (`save_pruned`)
    DIR/plan.json       the pruning plan of the base model (when it had one)
    DIR/recovery.json   settings, data used, losses, speed, status
    DIR/report.json     the base folder's report (if any) with a `recovery` summary added
    DIR/adapter/        optional: the LoRA adapter alone, in peft's format
Everything is written into a hidden sibling folder and renamed into place last, so a crash or a
stop never leaves a folder that looks like a finished recovery.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from safetensors.torch import save_file

from nirvana.errors import InvalidInput
from nirvana.pruning.plan import PruningPlan
from nirvana.store.atomic import atomic_path

if TYPE_CHECKING:  # the training and saving modules import transformers' modeling and peft (seconds)
    from nirvana.recovery.train import RecoveryResult

RECOVERY_FILE = "recovery.json"
ADAPTER_DIR = "adapter"


def save_recovered(
    result: RecoveryResult,
    tokenizer,
    plan: PruningPlan | dict | None,
    directory: str | Path,
    *,
    base_report: dict | None = None,
    base_model: str | None = None,
    adapter: bool = False,
    allow_partial: bool = False,
) -> Path:
    """Write `result.model` and its records to `directory` (replaced whole, never half-written).

    A stopped or diverged run is refused unless `allow_partial=True` (the app's explicit "save what
    I have"); its recovery.json then says `status: stopped` and how many steps were done.

    Example:
        >>> save_recovered(result, tok, plan, "/tmp/p50r", base_report=json.load(open("/tmp/p50/report.json")))
    """
    if not result.complete and not allow_partial:
        raise InvalidInput(
            f"the recovery did not finish ({result.message}); nothing was saved. Run it again to the end, "
            "or save explicitly as a partial recovery."
        )
    # here, not at the top: transformers' modeling (seconds), which `base_report`'s readers (the CLI) need not import
    from nirvana.checkpoints.pruned import save_pruned

    if adapter and result.adapter_state is None:
        raise InvalidInput("no adapter was kept: run recover(..., keep_adapter=True) to save the adapter alone.")
    directory = Path(directory).expanduser()
    if directory.exists() and not directory.is_dir():
        raise InvalidInput(f"--out {str(directory)!r} is a file; pass a folder.")
    if isinstance(plan, dict):
        plan = PruningPlan.from_dict(plan)
    with atomic_path(directory) as tmp:  # nothing at --out looks finished until everything is written
        tmp.mkdir()
        save_pruned(result.model, tokenizer, plan, tmp / "model")
        _write_records(tmp, result, plan, base_report, base_model)
        if adapter:
            _save_adapter(result, tmp / ADAPTER_DIR, base_model)
    return directory


def _write_records(tmp: Path, result: RecoveryResult, plan, base_report: dict | None, base_model: str | None) -> None:
    if plan is not None:
        plan.save(tmp / "plan.json")
    summary = {**result.summary(), "base_model": base_model}
    (tmp / RECOVERY_FILE).write_text(json.dumps(summary, indent=2))
    report = dict(base_report or {})
    report["recovery"] = {
        k: summary[k]
        for k in ("status", "steps_done", "tokens_trained", "tokens_per_second", "heldout_before", "heldout_after")
    } | {"data": summary["data"].get("source"), "base_model": base_model}
    (tmp / "report.json").write_text(json.dumps(report, indent=2, default=str))


def base_report(model: str | Path) -> dict | None:
    """report.json of a pruned folder that is being recovered (kept in the recovered folder's report),
    or None for a hub id, a dense folder or an unreadable report."""
    path = Path(model).expanduser() / "report.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, json.JSONDecodeError):
        return None


def load_recovery_record(directory: str | Path) -> dict | None:
    """recovery.json of a saved recovery (the folder or its model/ subfolder), or None."""
    directory = Path(directory)
    for candidate in (directory / RECOVERY_FILE, directory.parent / RECOVERY_FILE):
        if candidate.exists():
            return json.loads(candidate.read_text())
    return None


def _save_adapter(result: RecoveryResult, directory: Path, base_model: str | None) -> None:
    """peft's own adapter format: adapter_config.json + adapter_model.safetensors."""
    directory.mkdir(parents=True)
    lora_config = result.lora_config
    lora_config.base_model_name_or_path = base_model
    lora_config.save_pretrained(str(directory))
    save_file(
        {k: v.contiguous() for k, v in result.adapter_state.items()}, str(directory / "adapter_model.safetensors")
    )
