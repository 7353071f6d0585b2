"""Save and reload pruned models (safetensors only; never pickle).

A stock `from_pretrained` cannot rebuild layers of different widths (and
`ignore_mismatched_sizes=True` would silently re-initialise them), so `load_pruned` builds the
model skeleton from the config without allocating weights, resizes every layer's projections
to the stored shapes, and assigns the saved tensors.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.nn as nn
from accelerate import init_empty_weights
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.conversion_mapping import get_model_conversion_mapping
from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key

from nirvana.checkpoints.loaded import LoadedModel
from nirvana.errors import CorruptCheckpoint, PlanMismatch
from nirvana.export.card import write_model_card
from nirvana.export.modeling import add_stock_loading, has_per_layer_widths
from nirvana.guard.safety import check_local_path
from nirvana.models.architectures import get_architecture, layer_projections, text_config
from nirvana.models.shapes import head_dim_of
from nirvana.pruning.plan import PruningPlan
from nirvana.pruning.slicing import update_config
from nirvana.store.atomic import atomic_path, atomic_write_text

PLAN_FILE = "plan.json"
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
        if has_per_layer_widths(model.config.to_dict()):
            add_stock_loading(tmp)
            source = base_model or getattr(model.config, "_name_or_path", None)
            write_model_card(tmp, report, plan, base_model=source, location=directory)
    return directory


def save_prune_output(
    folder: str | Path, model: nn.Module, tokenizer, plan: PruningPlan, report: dict, *, base_model: str | None = None
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
    cfg = text_config(config)
    if getattr(config, "nirvana_layer_shapes", None):
        return [(int(s["num_key_value_heads"]), int(s["intermediate_size"])) for s in config.nirvana_layer_shapes]
    heads, inter = getattr(config, "modified_head_num", None), getattr(config, "modified_intermediate_dimension", None)
    if heads and inter:
        g = cfg.num_attention_heads // cfg.num_key_value_heads
        return [(int(h) // g, int(i)) for h, i in zip(heads, inter)]
    raise CorruptCheckpoint(
        "config.json has no per-layer shapes (nirvana_layer_shapes or modified_head_num + "
        "modified_intermediate_dimension); it is not a pruned checkpoint."
    )


def _resize_layers(model: nn.Module, widths: list[tuple[int, int]]) -> None:
    """Replace each layer's projections with empty (meta) Linear modules of the stored widths."""
    cfg = text_config(model.config)
    d = head_dim_of(cfg)
    g = cfg.num_attention_heads // cfg.num_key_value_heads
    D = cfg.hidden_size
    arch = get_architecture(model)
    projections = layer_projections(model)
    biased = set(getattr(model.config, "nirvana_output_biases", None) or ())  # FLAP's added o/down biases
    if len(widths) != len(projections):
        raise CorruptCheckpoint(f"config lists {len(widths)} layer shapes for {len(projections)} layers.")
    for proj, (kv, inter) in zip(projections, widths):
        q_out, kv_out = kv * g * d, kv * d

        def new(old, in_f, out_f, bias=False):
            return nn.Linear(in_f, out_f, bias=bias or old.bias is not None, device="meta", dtype=old.weight.dtype)

        setattr(proj.attn, arch.q_proj, new(proj.q_proj, D, q_out))
        setattr(proj.attn, arch.k_proj, new(proj.k_proj, D, kv_out))
        setattr(proj.attn, arch.v_proj, new(proj.v_proj, D, kv_out))
        setattr(proj.attn, arch.o_proj, new(proj.o_proj, q_out, D, "o_proj" in biased))
        setattr(proj.mlp, arch.gate_proj, new(proj.gate_proj, D, inter))
        setattr(proj.mlp, arch.up_proj, new(proj.up_proj, D, inter))
        setattr(proj.mlp, arch.down_proj, new(proj.down_proj, inter, D, "down_proj" in biased))


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
    widths = _layer_widths(config)
    state = _read_state_dict(directory)
    with init_empty_weights(include_buffers=False):  # parameters on meta, buffers (rotary) real
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(config, "dtype", None) or torch.float32)
    _resize_layers(model, widths)
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
    plan = None
    if (directory / PLAN_FILE).exists():
        try:
            plan = PruningPlan.load(directory / PLAN_FILE)
        except PlanMismatch as exc:
            raise CorruptCheckpoint(f"{str(directory / PLAN_FILE)!r} is damaged: {exc}") from exc
    tokenizer = AutoTokenizer.from_pretrained(directory)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(model, tokenizer, str(directory), "pruned", time.perf_counter() - start, [], plan)
