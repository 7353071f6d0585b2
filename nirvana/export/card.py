"""The Hub model card (`README.md`) of a pruned model folder, written from the run's own figures.

Every number in the card is read from the prune report (`report.json`) or the plan: nothing is
estimated here. Measured results (perplexity, accuracy, recovery) appear only when the run
measured them, passed as a plain dict; otherwise the card says how to measure them.
The YAML front matter follows the Hub's model-card format (huggingface_hub's `ModelCardData`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

from nirvana.errors import InvalidInput
from nirvana.methods import DEFAULT_METHOD, is_baseline
from nirvana.models.registry import REGISTRY
from nirvana.pruning.plan import PruningPlan, load_plan
from nirvana.store.paths import cache_dir
from nirvana.t5.anatomy import KINDS as T5_KINDS

CARD_FILE = "README.md"
TAGS = ["nirvana", "pruned", "structured-pruning", "custom_code", "text-generation"]
PAPER = "https://arxiv.org/abs/2509.14230"


@dataclass(frozen=True)
class BaseModel:
    repo_id: str | None
    license: str | None = None


# Registry names whose Hub source and license are known (read from the registry's rows).
KNOWN_BASES = {name: BaseModel(e.base_model, e.license) for name, e in REGISTRY.items() if e.base_model}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_CACHE_SNAPSHOT = re.compile(r"models--([^/]+)--([^/]+)/snapshots/")


def resolve_base_model(name: str | None) -> BaseModel:
    """The Hub id and license of the model that was pruned, where they can be known offline.

    A registry name -> its known source; a local folder -> its own card's `base_model`/`license`
    (or the repo id of a hub-cache snapshot); a hub id -> itself, license from a cached card.
    """
    if not name:
        return BaseModel(None)
    name = str(name)
    if name in KNOWN_BASES:
        return KNOWN_BASES[name]
    path = Path(name).expanduser()
    embedded = _embedded_name(path)
    if embedded:
        return KNOWN_BASES[embedded]
    if path.is_dir():
        data = _card_data(path / "model" / CARD_FILE) or _card_data(path / CARD_FILE)
        if data.get("base_model"):
            base = data["base_model"]
            return BaseModel(base[0] if isinstance(base, list) else base, data.get("license"))
        match = _CACHE_SNAPSHOT.search(str(path.resolve()) + "/")
        if match:
            return BaseModel(f"{match[1]}/{match[2]}", data.get("license"))
        return BaseModel(None, data.get("license"))
    if _HUB_ID.match(name):
        return BaseModel(name, _cached_hub_license(name))
    return BaseModel(None)


def _embedded_name(path: Path) -> str | None:
    """A registry model's converted folder (CACHE/models/<name>) stands for the registry name."""
    try:
        if path.resolve().parent == (cache_dir() / "models").resolve() and path.name in KNOWN_BASES:
            return path.name
    except OSError:
        return None
    return None


def _card_data(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return ModelCard.load(path).data.to_dict()
    except Exception:  # a malformed third-party card only costs us its metadata
        return {}


def _cached_hub_license(repo_id: str) -> str | None:
    # here, not at the top: huggingface_hub is needed only to publish or look up a licence
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(repo_id, CARD_FILE)
    except Exception:  # an id the hub cache cannot hold: no license to inherit
        return None
    return _card_data(Path(cached)).get("license") if isinstance(cached, str) else None


def _figures(report: dict | None, plan: PruningPlan | None) -> dict:
    """The card's figures: the report's where it has them, else the plan's own statistics (`PLAN_FIGURES`)."""
    report = dict(report or {})
    if plan is None:
        return report
    defaults = PLAN_FIGURES[plan.family](plan)
    return {**{k: v for k, v in defaults.items() if v is not None}, **report}


def _t5_plan_figures(plan: PruningPlan) -> dict:
    """A T5's: one gamma per ranking, kept units per kind."""
    s = plan.settings
    return {"target_sparsity": s.sparsity, "achieved_block_sparsity": plan.stats.get("achieved_block_sparsity"),
            "gamma": s.gamma, "gamma_default": s.gamma_default, "align": s.align, "allocation": s.allocation,
            "criterion": s.criterion, "method": s.method, "calibration": s.calibration,
            "kept_units": plan.kept_counts, "architecture": "t5"}  # fmt: skip


def _decoder_plan_figures(plan: PruningPlan) -> dict:
    stats, settings = plan.stats, plan.settings
    return {
        "target_sparsity": settings.sparsity,
        "achieved_block_sparsity": stats.get("achieved_block_sparsity"),
        "params_before": stats.get("params_before"),
        "params_after": stats.get("params_after"),
        "total_param_reduction": stats.get("total_param_reduction"),
        "gamma": settings.gamma,
        "gamma_default": settings.gamma_default,
        "align": settings.align,
        "allocation": settings.allocation,
        "criterion": settings.criterion,
        "method": settings.method,
        "calibration": settings.calibration,
        "kept_kv_groups": plan.kept_kv_groups,
        "kept_neurons": plan.kept_neurons,
    }


PLAN_FIGURES = {"decoder-only": _decoder_plan_figures, "t5": _t5_plan_figures}  # by the plan's family


def _num(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):  # a T5's gamma: one per ranking
        return ", ".join(f"{k}: {_num(v, digits)}" for k, v in value.items())
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _result(value) -> str:
    """Measured figures keep their significant digits (229.7, 0.4312), not a fixed width."""
    return f"{value:.6g}" if isinstance(value, float) else _num(value)


def _calibration_text(cal) -> str:
    if not cal:
        return "none (data-free criterion)"
    if isinstance(cal, dict):
        parts = [str(cal.get("source", "?"))]
        if cal.get("samples") and cal.get("seq_len"):
            parts.append(f"N = {cal['samples']} x T = {cal['seq_len']} tokens")
        if cal.get("seed") is not None:
            parts.append(f"seed {cal['seed']}")
        if cal.get("hash"):
            parts.append(f"content hash {cal['hash']}")
        return ", ".join(parts)
    return str(cal)


def _selection_text(selection: dict | None) -> str:
    if not selection:
        return "not used: one calibration batch"
    candidates = selection.get("candidates") or {}
    kls = ", ".join(f"seed {seed}: {float(kl):.6f}" for seed, kl in candidates.items())
    return (
        f"seed {selection.get('chosen_seed')} chosen among {len(candidates)} candidate batches by the "
        f"smallest KL divergence of the pruned from the dense model on a disjoint anchor set ({kls})"
    )


def _flatten(results: dict, prefix: str = "") -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = []
    for key, value in results.items():
        name = f"{prefix} / {key}" if prefix else str(key)
        if isinstance(value, dict):
            rows.extend(_flatten(value, name))
        else:
            rows.append((name, value))
    return rows


@dataclass(frozen=True)
class CardFamily:
    """What differs in the card of a decoder-only model and of a T5: the Hub task, what was removed, the
    per-layer table and how to load it."""

    pipeline_tag: str
    removed: str
    layer_table: Callable[[dict, object], list[str]]  # (figures, plan) -> markdown lines
    how_to_load: Callable[[str, bool], list[str]]  # (repo, uniform) -> markdown lines


def render_model_card(
    report: dict | None,
    plan: PruningPlan | None = None,
    *,
    base_model: BaseModel | None = None,
    results: dict | None = None,
    model_name: str | None = None,
    repo_hint: str = "PATH_OR_REPO_ID",
    uniform: bool = False,
) -> str:
    """The card's text (front matter + markdown). `results`: measured figures, nested dicts allowed. A T5's
    card (its report says `"architecture": "t5"`, or its plan is a T5's) is `CARD_FAMILIES["t5"]`'s."""
    fig = _figures(report, plan)
    family = CARD_FAMILIES["t5" if fig.get("architecture") == "t5" else "decoder-only"]
    base = base_model or BaseModel(None)
    results = results if results is not None else fig.get("results")
    data = ModelCardData(
        base_model=base.repo_id,
        library_name="transformers",
        license=base.license,
        pipeline_tag=family.pipeline_tag,
        tags=[t if t != "text-generation" else family.pipeline_tag for t in TAGS],
    )
    title = model_name or (base.repo_id or fig.get("model") or "model").split("/")[-1]
    target, achieved = fig.get("target_sparsity"), fig.get("achieved_block_sparsity")
    gamma, gamma_default = fig.get("gamma"), fig.get("gamma_default")
    gamma_text = _num(gamma, 3) + (f" (analytic default {_num(gamma_default, 3)})" if gamma_default is not None else "")
    method = fig.get("method") or DEFAULT_METHOD
    if is_baseline(method):  # a baseline (nirvana.methods): gamma does not apply
        gamma_text = None
    setting_rows = [
        (
            "method",
            f"{method} (a baseline reproduced in NIRVANA Explorer, docs/BASELINES.md)"
            if is_baseline(method)
            else f"NIRVANA structured pruning ([paper]({PAPER})), NIRVANA Explorer",
        ),
        ("method settings", json.dumps(fig["method_settings"]) if fig.get("method_settings") else None),
        ("pruned from", fig.get("model")),
        ("criterion", fig.get("criterion")),
        ("allocation", fig.get("allocation")),
        ("target block sparsity", _num(target)),
        ("achieved block sparsity", _num(achieved)),
        ("parameters before", _num(fig.get("params_before"))),
        ("parameters after", _num(fig.get("params_after"))),
        ("total parameter reduction", _num(fig.get("total_param_reduction"))),
        ("block parameters before", _num(fig.get("block_params_before"))),
        ("block parameters after", _num(fig.get("block_params_after"))),
        ("gamma", gamma_text),
        ("align", _num(fig.get("align"))),
        ("calibration data", _calibration_text(fig.get("calibration"))),
        ("calibration choice", _selection_text(fig.get("calibration_selection"))),
    ]
    lines = [
        f"# {title}, pruned with {'NIRVANA' if method == 'nirvana' else method} ({achieved:.1%} block sparsity)"
        if achieved is not None
        else f"# {title}",
        "",
        f"A structurally pruned copy of {_base_link(base)}: {family.removed} "
        "Nothing is masked: the weights are physically smaller.",
        "",
        "## Pruning",
        "",
        "| setting | value |",
        "|---|---|",
        *[f"| {name} | {value} |" for name, value in setting_rows if value not in (None, "-")],
        "",
        "## Measured results",
        "",
    ]
    if results:
        lines += ["| figure | value |", "|---|---|", *[f"| {k} | {_result(v)} |" for k, v in _flatten(results)], ""]
    else:
        lines += [
            "No quality measurement ran with this prune. Measure it with "
            "`python -m nirvana eval --model FOLDER --ppl wikitext2` (perplexity) or `--tasks arc_easy` (accuracy).",
            "",
        ]
    lines += family.layer_table(fig, plan)
    lines += family.how_to_load(repo_hint, uniform)
    return f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines)


def _base_link(base: BaseModel) -> str:
    return f"[{base.repo_id}](https://huggingface.co/{base.repo_id})" if base.repo_id else "its base model"


def _layer_table(fig: dict, plan: PruningPlan | None) -> list[str]:
    kv, neurons = fig.get("kept_kv_groups"), fig.get("kept_neurons")
    if not kv or not neurons:
        return []
    dense = plan.model if plan is not None else {}
    group = dense.get("group_size")
    dense_kv, dense_inter = dense.get("num_kv_heads"), dense.get("intermediate")
    rows = ["## Kept units per layer", ""]
    head = "| layer | KV groups kept | query heads kept | MLP neurons kept |"
    rows += [head, "|---:|---:|---:|---:|"]
    for i, (k, n) in enumerate(zip(kv, neurons)):
        k_text = f"{k} / {dense_kv[i]}" if dense_kv else str(k)
        q_text = f"{k * group}" if group else "-"
        n_text = f"{n} / {dense_inter[i]}" if dense_inter else str(n)
        rows.append(f"| {i} | {k_text} | {q_text} | {n_text} |")
    return [*rows, ""]


def _explorer_loading(repo: str, prompt: str) -> list[str]:
    return [
        "**NIRVANA Explorer**:",
        "",
        "```python",
        "import nirvana",
        "",
        f'lm = nirvana.load_model("{repo}")  # a local folder',
        "```",
        "",
        f'or `python -m nirvana generate --model {repo} --prompt "{prompt}"`.',
        "",
    ]


def _how_to_load(repo: str, uniform: bool = False) -> list[str]:
    same_widths = [
        "Every layer kept the same widths, so `config.json`'s global widths describe this model and "
        "`from_pretrained` works without `trust_remote_code` too (as does any engine that runs the family).",
        "",
    ]
    return [
        "## How to load",
        "",
        "**Stock transformers** (torch and transformers only; NIRVANA need not be installed):",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f'model = AutoModelForCausalLM.from_pretrained("{repo}", trust_remote_code=True)',
        f'tokenizer = AutoTokenizer.from_pretrained("{repo}")',
        "```",
        "",
        "`trust_remote_code=True` runs `modeling_nirvana.py` from this folder: it subclasses the family's own "
        "`*ForCausalLM` and resizes each layer's projections to the widths in `config.json` "
        "(`nirvana_layer_shapes`). Without it, transformers builds dense layers and fails on the shape mismatch.",
        "",
        *(same_widths if uniform else []),
        *_explorer_loading(repo, "..."),
        "**Serving with vLLM**: vLLM's stock classes build every layer from one global width; NIRVANA Explorer's "
        "vLLM plugin builds each layer at its own widths. With its serving environment (`make serve-env`), "
        "`python -m nirvana serve --model FOLDER` starts vLLM's OpenAI-compatible server on this folder (not a "
        "SliceGPT folder, whose rotated stream no vLLM layer has; it passes "
        '`--hf-overrides \'{"architectures": ["Nirvana<Family>ForCausalLM"]}\'`).',
        "",
        "**Other engines**: SGLang, TGI and TensorRT-LLM build every layer from one global width, so they cannot "
        "serve this folder as it is. llama.cpp can, for a Llama: `python -m nirvana export-gguf --model FOLDER "
        "--out model.gguf` writes its `deci` architecture with per-layer widths. NIRVANA Explorer's "
        "`docs/EXPORT.md` says what was verified and what to do instead.",
        "",
    ]


def _t5_layer_table(fig: dict, plan) -> list[str]:
    kept = fig.get("kept_units") or {**(fig.get("kept_kv_groups") or {}), **(fig.get("kept_neurons") or {})}
    if set(kept) != set(T5_KINDS):
        return []
    width = plan.dense_widths if plan is not None and plan.family == "t5" else dict.fromkeys(T5_KINDS)
    rows = ["## Kept units per layer", "", "| layer | " + " | ".join(v.label for v in T5_KINDS.values()) + " |"]
    rows.append("|---:|" + "---:|" * len(T5_KINDS))
    for i in range(max(len(v) for v in kept.values())):
        cells = [
            "-" if i >= len(kept[k]) else f"{kept[k][i]}" + (f" / {width[k]}" if width[k] else "") for k in T5_KINDS
        ]
        rows.append(f"| {i} | " + " | ".join(cells) + " |")
    return [*rows, ""]


def _t5_how_to_load(repo: str, uniform: bool = False) -> list[str]:
    return [
        "## How to load",
        "",
        "**Stock transformers** (torch and transformers only; NIRVANA need not be installed):",
        "",
        "```python",
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer",
        "",
        f'model = AutoModelForSeq2SeqLM.from_pretrained("{repo}", trust_remote_code=True)',
        f'tokenizer = AutoTokenizer.from_pretrained("{repo}")',
        "```",
        "",
        "`trust_remote_code=True` runs `modeling_t5_sliced.py` from this folder: it builds a T5 whose attentions "
        "keep the heads listed in `config.json` (`nirvana_t5_kept_heads`) and whose FFNs have the widths in "
        "`nirvana_t5_ffn_widths`. Without it, transformers builds dense layers and fails on the shape mismatch.",
        "",
        *_explorer_loading(repo, "summarize: ..."),
    ]


CARD_FAMILIES = {
    "decoder-only": CardFamily(
        "text-generation",
        "whole KV groups (a K/V head with the query heads that read it) and whole MLP neurons were removed, "
        "so **each decoder layer has its own width**.",
        _layer_table,
        _how_to_load,
    ),
    "t5": CardFamily(
        "text2text-generation",
        "whole attention heads (of encoder self-, decoder self- and cross-attention, each with its column of the "
        "relative position bias) and whole FFN neurons of both stacks were removed, so **each layer of the encoder "
        "and of the decoder has its own widths**.",
        _t5_layer_table,
        _t5_how_to_load,
    ),
}


def write_model_card(
    folder: str | Path,
    report: dict | None = None,
    plan: PruningPlan | None = None,
    *,
    base_model: str | BaseModel | None = None,
    results: dict | None = None,
    location: str | Path | None = None,
) -> Path:
    """Write `README.md` into a pruned model folder from the run's report (and/or plan).

    `base_model`: the name the model was loaded by (registry name, hub id, folder) or a
    `BaseModel`; `results`: measured figures (e.g. {"perplexity": {"wikitext2": 229.7}});
    `location`: the path shown in the loading examples (default: `folder`).
    Example:
        >>> write_model_card("out/model", report, plan, base_model="smollm2-135m")
    """
    folder = Path(folder)
    if plan is None and (folder / "plan.json").exists():
        plan = load_plan(folder / "plan.json")
    if base_model is None and report:
        base_model = report.get("model")
    base = base_model if isinstance(base_model, BaseModel) else resolve_base_model(base_model)
    text = render_model_card(
        report, plan, base_model=base, results=results, repo_hint=str(location or folder), uniform=_uniform(folder)
    )
    path = folder / CARD_FILE
    path.write_text(text)
    return path


def measured_results(evaluation: dict, folder: str | Path | None = None) -> dict:
    """The quality figures of an `eval --json` result (perplexity per dataset, task accuracies).

    With `folder`, refuses results measured on another model: a card must describe its own weights.
    """
    if folder is not None and evaluation.get("model"):
        measured, here = Path(str(evaluation["model"])).expanduser().resolve(), Path(folder).resolve()
        if measured not in (here, here.parent):
            raise InvalidInput(
                f"the evaluation was measured on {evaluation['model']!r}, not on {str(folder)!r}; "
                f"run `python -m nirvana eval --model {folder} --ppl wikitext2 --json` on this folder."
            )
    out: dict = {}
    for name, r in (evaluation.get("ppl") or {}).items():
        out.setdefault("perplexity", {})[name] = {"ppl": r["ppl"], "tokens": r["tokens"]}
    for name, r in ((evaluation.get("tasks") or {}).get("tasks") or {}).items():
        numbers = {k: v for k, v in r.items() if "acc" in k and isinstance(v, float)}
        if numbers:
            out.setdefault("accuracy", {})[name] = numbers
    return out


def _uniform(folder: Path) -> bool:
    """config.json's global widths were rewritten to the (uniform) pruned ones."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    shapes = config.get("nirvana_layer_shapes") or []
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    return bool(shapes) and all(
        s["num_key_value_heads"] == text.get("num_key_value_heads")
        and s["intermediate_size"] == text.get("intermediate_size")
        for s in shapes
    )


def read_report(folder: str | Path) -> dict | None:
    """The `report.json` beside a `prune --out` model folder, when there is one."""
    folder = Path(folder)
    for candidate in (folder / "report.json", folder.parent / "report.json"):
        if candidate.is_file():
            try:
                return json.loads(candidate.read_text())
            except (OSError, json.JSONDecodeError):
                return None
    return None
