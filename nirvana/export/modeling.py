"""Make a pruned model folder loadable by stock `transformers`: the modeling file and `auto_map`.

`nirvana/models/modeling_nirvana.py` (standalone: nirvana builds its models with the same classes)
is copied verbatim into the folder and `config.json` gains
`"auto_map": {"AutoModelForCausalLM": "modeling_nirvana.<Class>"}`, so
`AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)` works where only torch and
transformers are installed. Nothing else in the config changes: the global head counts stay
dense (a stock config must stay valid) and the per-layer widths stay in `nirvana_layer_shapes`
and the reference's `modified_head_num` / `modified_intermediate_dimension`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from nirvana.errors import CorruptCheckpoint, UnsupportedArchitecture
from nirvana.models.modeling_nirvana import CLASS_FOR_MODEL_TYPE

MODELING_FILE = "modeling_nirvana.py"
MODELING_SOURCE = Path(__file__).parents[1] / "models" / MODELING_FILE  # standalone: torch + transformers only

# CLASS_FOR_MODEL_TYPE: model_type -> the class in modeling_nirvana.py that `auto_map` names.


def auto_map_entry(model_type: str) -> str:
    """`modeling_nirvana.<Class>` for a family, or `UnsupportedArchitecture`."""
    if model_type not in CLASS_FOR_MODEL_TYPE:
        raise UnsupportedArchitecture(
            f"no stock-loadable class for model_type {model_type!r}; "
            f"supported: {', '.join(sorted(CLASS_FOR_MODEL_TYPE))}."
        )
    return f"{MODELING_FILE[:-3]}.{CLASS_FOR_MODEL_TYPE[model_type]}"


def model_folder(path: str | Path) -> Path:
    """The model folder of `path`: a `prune --out` folder holding `model/` is accepted for its `model/`."""
    folder = Path(path).expanduser()
    if (folder / "model" / "config.json").exists() and not (folder / "config.json").exists():
        return folder / "model"
    return folder


def read_config(folder: str | Path, missing: type[Exception] = CorruptCheckpoint, hint: str = "") -> dict:
    """config.json of a model folder; a missing one raises `missing` (with `hint`), an unreadable one
    CorruptCheckpoint."""
    folder = Path(folder)
    try:
        return json.loads((folder / "config.json").read_text())
    except FileNotFoundError as exc:
        raise missing(
            f"{str(folder)!r} has no config.json; {hint or 'pass a folder written by `nirvana prune`.'}"
        ) from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise CorruptCheckpoint(f"config.json in {str(folder)!r} is unreadable ({exc}).") from exc


def has_per_layer_widths(config: dict) -> bool:
    """True for our per-layer keys or the reference implementation's."""
    return bool(
        config.get("nirvana_layer_shapes")
        or (config.get("modified_head_num") and config.get("modified_intermediate_dimension"))
    )


def add_stock_loading(folder: str | Path) -> Path:
    """Copy `modeling_nirvana.py` into a pruned model folder and point `auto_map` at its class.

    Idempotent; other `auto_map` entries are kept. Example:
        >>> add_stock_loading("out/model")
    """
    folder = Path(folder)
    config = read_config(folder)
    if not has_per_layer_widths(config):
        raise CorruptCheckpoint(
            f"config.json in {str(folder)!r} has no per-layer widths (nirvana_layer_shapes, or modified_head_num "
            "and modified_intermediate_dimension): it is not a pruned checkpoint."
        )
    entry = auto_map_entry(config.get("model_type"))
    shutil.copyfile(MODELING_SOURCE, folder / MODELING_FILE)
    uniform_globals(config)
    config["auto_map"] = {**(config.get("auto_map") or {}), "AutoModelForCausalLM": entry}
    # transformers writes config.json sorted with indent 2; keep that so diffs stay small.
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return folder / MODELING_FILE


def uniform_globals(config: dict) -> bool:
    """When every layer kept the same widths, write them as the config's global widths.

    Such a folder is then an ordinary checkpoint of its family: stock transformers (and any engine
    that runs the family) builds it without `trust_remote_code`. `head_dim` is written explicitly,
    since D / Hq no longer holds once heads are gone. Returns whether the globals were rewritten.
    """
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    widths = _widths(config, text)
    # Added o_proj / down_proj biases (FLAP) and a sliced residual stream with shortcut matrices (SliceGPT)
    # have no stock config flag: such a folder needs the modeling file.
    special = config.get("nirvana_output_biases") or config.get("nirvana_sliced_hidden")
    if not widths or len(set(widths)) != 1 or special:
        return False
    kv_heads, neurons = widths[0]
    group = text["num_attention_heads"] // text["num_key_value_heads"]
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    text.update(
        head_dim=head_dim, num_key_value_heads=kv_heads, num_attention_heads=kv_heads * group, intermediate_size=neurons
    )
    return True


def _widths(config: dict, text: dict) -> list[tuple[int, int]]:
    """(KV heads, neurons) per layer from our keys or the reference's (query heads -> KV heads)."""
    if config.get("nirvana_layer_shapes"):
        return [(int(s["num_key_value_heads"]), int(s["intermediate_size"])) for s in config["nirvana_layer_shapes"]]
    heads, inter = config.get("modified_head_num"), config.get("modified_intermediate_dimension")
    if heads and inter:
        group = text["num_attention_heads"] // text["num_key_value_heads"]
        return [(int(h) // group, int(i)) for h, i in zip(heads, inter)]
    return []


def is_stock_loadable(folder: str | Path) -> bool:
    """The folder holds the current modeling file and an `auto_map` that names its family's class."""
    folder = Path(folder)
    try:
        config = json.loads((folder / "config.json").read_text())
        current = (folder / MODELING_FILE).read_bytes() == MODELING_SOURCE.read_bytes()
    except (OSError, json.JSONDecodeError):
        return False
    entry = (config.get("auto_map") or {}).get("AutoModelForCausalLM")
    model_type = config.get("model_type")
    return current and model_type in CLASS_FOR_MODEL_TYPE and entry == auto_map_entry(model_type)


T5_MODELING_FILE = "modeling_t5_sliced.py"
T5_MODELING_SOURCE = Path(__file__).parents[1] / "t5" / T5_MODELING_FILE  # standalone: torch + transformers
T5_AUTO_MAP = {"AutoModelForSeq2SeqLM": f"{T5_MODELING_FILE[:-3]}.SlicedT5ForConditionalGeneration"}


def add_t5_stock_loading(folder: str | Path) -> Path:
    """Copy `modeling_t5_sliced.py` into a pruned T5 folder and point `auto_map` at its class, so
    `AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)` rebuilds it. Idempotent."""
    folder = Path(folder)
    config = read_config(folder)
    if not (config.get("nirvana_t5_kept_heads") and config.get("nirvana_t5_ffn_widths")):
        raise CorruptCheckpoint(
            f"config.json in {str(folder)!r} has no per-layer T5 widths (nirvana_t5_kept_heads, "
            "nirvana_t5_ffn_widths): it is not a pruned T5."
        )
    shutil.copyfile(T5_MODELING_SOURCE, folder / T5_MODELING_FILE)
    config["auto_map"] = {**(config.get("auto_map") or {}), **T5_AUTO_MAP}
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return folder / T5_MODELING_FILE
