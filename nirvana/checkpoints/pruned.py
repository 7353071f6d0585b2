"""Save and reload pruned models (safetensors only; never pickle).

A stock `from_pretrained` cannot rebuild layers of different widths (and
`ignore_mismatched_sizes=True` would silently re-initialise them), so `load_pruned` builds the
model skeleton from the config without allocating weights, resizes every layer's projections
to the stored shapes (`modeling_nirvana.resize_to_config`, the code the folder ships for stock
transformers; SliceGPT's sliced residual stream included), and assigns the saved tensors.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
from accelerate import init_empty_weights
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.conversion_mapping import get_model_conversion_mapping
from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key

from nirvana.checkpoints.loaded import PLAN_FILE, LoadedModel, read_plan
from nirvana.errors import CorruptCheckpoint
from nirvana.export.card import write_model_card
from nirvana.export.modeling import add_stock_loading, add_t5_stock_loading, has_per_layer_widths
from nirvana.guard.safety import check_local_path
from nirvana.models.family import family_name
from nirvana.models.modeling_nirvana import layer_widths, resize_to_config
from nirvana.pruning.plan import PruningPlan
from nirvana.pruning.slicing import update_config
from nirvana.store.atomic import atomic_path, atomic_write_text
from nirvana.t5.checkpoint import load_t5_pruned
from nirvana.t5.modeling_t5_sliced import is_sliced_t5_config

REPORT_FILE = "report.json"


def save_pruned(
    model: nn.Module,
    tokenizer,
    plan: PruningPlan | None,
    directory: str | Path,
    *,
    base_model: str | None = None,
    report: dict | None = None,
) -> Path:
    """Write safetensors weights, tokenizer, config (with per-layer shapes) and the plan, atomically.

    A pruned folder also gets `modeling_nirvana.py` + `auto_map` (stock transformers loads it with
    `trust_remote_code=True`, no nirvana needed) and a model card `README.md`, written once, from
    `report`'s figures (a prune's report) where given, else the plan's; `base_model` (the name it
    was loaded by) fills the card's `base_model` and `license`.
    Example:
        >>> save_pruned(pruned, tok, plan, "out/model")
    """
    directory = Path(directory)
    with atomic_path(directory) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        if plan is not None:
            plan.save(tmp / PLAN_FILE)
        saved = SAVED[family_name(model)]
        if saved.is_pruned(model.config):  # a pruned folder: the modeling file, auto_map and the card
            saved.stock_loading(tmp)
            source = base_model or getattr(model.config, "_name_or_path", None)
            write_model_card(tmp, report, plan, base_model=source, location=directory)
    return directory


def save_prune_output(
    folder: str | Path,
    model: nn.Module,
    tokenizer,
    plan: PruningPlan,
    report: dict,
    *,
    base_model: str | None = None,
) -> dict:
    """The `prune --out` folder, every file written once: model/ (`save_pruned`, its card from
    `report`), plan.json and report.json. Returns the report as written: `report` with the save's
    seconds added to its `timings`.

    Example:
        >>> save_prune_output("out", result.model, tok, result.plan, result.report, base_model="smollm2-135m")
    """
    folder = Path(folder)
    t = time.perf_counter()
    save_pruned(model, tokenizer, plan, folder / "model", base_model=base_model, report=report)
    plan.save(folder / PLAN_FILE)
    timings = {**report.get("timings", {}), "save": round(time.perf_counter() - t, 3)}
    written = {**report, "timings": timings}
    atomic_write_text(folder / REPORT_FILE, json.dumps(written, indent=2))
    return written


def _layer_widths(config) -> list[tuple[int, int]]:
    """(num_key_value_heads, intermediate_size) per layer, from our keys or the reference's."""
    try:
        return layer_widths(config)
    except ValueError as exc:
        raise CorruptCheckpoint(str(exc)) from exc


def _read_state_dict(directory: Path) -> dict[str, torch.Tensor]:

    index = directory / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (directory / "model.safetensors").exists():
        files = ["model.safetensors"]
    else:
        pickles = [p.name for p in directory.glob("*.bin")] + [p.name for p in directory.glob("*.pt")]
        extra = (
            f" It holds {', '.join(pickles)}: pickled weights are never loaded; convert them to safetensors."
            if pickles
            else ""
        )
        raise CorruptCheckpoint(f"{str(directory)!r} has no model.safetensors.{extra}")
    state = {}
    for name in files:
        try:
            state.update(load_file(str(directory / name)))
        except Exception as exc:
            raise CorruptCheckpoint(
                f"{str(directory / name)!r} is unreadable or truncated ({exc}); re-save the model."
            ) from exc
    return state


def _model_keys(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under the model's own key names. `save_pretrained` writes some
    families under their legacy names (Gemma-3 with vision: `language_model.model.layers...` for
    `model.language_model.layers...`) and `from_pretrained` renames them back with transformers'
    conversion mapping; a plain `load_state_dict` must do the same."""
    expected = model.state_dict()
    if all(k in expected for k in state):
        return state
    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    prefix = getattr(model, "base_model_prefix", None)
    return {rename_source_key(k, renamings, converters, prefix, expected)[0]: v for k, v in state.items()}


def load_pruned(directory: str | Path, *, dtype: torch.dtype | None = None, device: str = "cpu"):
    """Rebuild a pruned model saved by `save_pruned` (or the reference format) with identical weights.

    Returns a `LoadedModel`. Accepts the model folder itself or a `prune --out` folder holding `model/`.
    """

    start = time.perf_counter()
    directory = check_local_path(directory)  # under NIRVANA_MODEL_ROOTS when it is set
    if (directory / "model").is_dir() and not (directory / "config.json").exists():
        directory = directory / "model"
    if not (directory / "config.json").exists():
        raise CorruptCheckpoint(
            f"{str(directory)!r} has no config.json; pass the folder written by `nirvana prune --out`."
        )
    try:
        config = AutoConfig.from_pretrained(directory)
    except (OSError, ValueError) as exc:
        raise CorruptCheckpoint(f"config.json in {str(directory)!r} is unreadable ({exc}).") from exc
    return SAVED[family_name(config)].load(directory, config, dtype=dtype, device=device, start=start)


def _load_t5(directory: Path, config, *, dtype, device: str, start: float):
    if not is_sliced_t5_config(config):
        raise CorruptCheckpoint(f"{str(directory)!r} is a T5 without per-layer widths: not a pruned checkpoint.")
    return load_t5_pruned(directory, config, _read_state_dict(directory), dtype=dtype, device=device)


def _load_decoder(directory: Path, config, *, dtype, device: str, start: float):
    _layer_widths(config)  # not a pruned checkpoint: CorruptCheckpoint before any weight is read
    state = _read_state_dict(directory)
    with init_empty_weights(include_buffers=False):  # parameters on meta, buffers (rotary) real
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(config, "dtype", None) or torch.float32)
    try:  # the same code stock transformers runs from the folder's modeling_nirvana.py
        resize_to_config(model)
    except ValueError as exc:
        raise CorruptCheckpoint(f"config.json in {str(directory)!r} does not describe its layers: {exc}") from exc
    state = _model_keys(model, state)
    try:
        result = model.load_state_dict(state, strict=False, assign=True)
    except RuntimeError as exc:
        mismatches = [line.strip() for line in str(exc).splitlines() if "size mismatch" in line]
        detail = (mismatches[0] if mismatches else str(exc)[:300]).rstrip(".")
        more = f" (and {len(mismatches) - 1} more)" if len(mismatches) > 1 else ""
        raise CorruptCheckpoint(
            f"weights in {str(directory)!r} do not match the shapes in its config.json: {detail}{more}; "
            "the config or the weights were edited or mixed up: re-save the pruned model."
        ) from exc
    if result.unexpected_keys:
        raise CorruptCheckpoint(f"unexpected tensors in {str(directory)!r}: {result.unexpected_keys[:5]}")
    model.tie_weights()
    missing = [n for n, p in model.named_parameters() if p.device.type == "meta"]
    if missing:
        raise CorruptCheckpoint(
            f"{str(directory)!r} is missing tensors: {missing[:5]}{' ...' if len(missing) > 5 else ''}"
        )
    if dtype is not None:
        model.to(dtype)
    model.to(device)
    model.eval()

    update_config(model)
    plan = read_plan(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(model, tokenizer, str(directory), "pruned", time.perf_counter() - start, [], plan)


@dataclass(frozen=True)
class Saved:
    """How a family's pruned folder is written and read back (`nirvana.models.family.FAMILIES` names it)."""

    is_pruned: Callable  # (config) -> its layers differ in width: the folder gets the modeling file and a card
    stock_loading: Callable  # (folder) -> writes the modeling file and auto_map stock transformers loads it by
    load: Callable  # (directory, config, *, dtype, device, start) -> LoadedModel


SAVED = {
    "decoder-only": Saved(lambda config: has_per_layer_widths(config.to_dict()), add_stock_loading, _load_decoder),
    "t5": Saved(is_sliced_t5_config, add_t5_stock_loading, _load_t5),  # its own per-layer keys and modeling file
}
