"""GGUF files as models: de-quantized once by transformers' GGUF loader and cached as safetensors.

A model that transformers loaded from a GGUF refuses `save_pretrained` ("quantized with gguf and
is not serializable"), so a pruned copy of it could not be saved, and every load de-quantizes the
whole file again. Every GGUF, the embedded SmolLM2 and a user's file alike, is therefore
converted once into a plain safetensors folder (fp32 weights, tokenizer, config) under the cache
and loaded from there like any model folder: a reload takes well under a second.

A user's file is cached under `models/gguf/<stem>-<key>`, where the key hashes the file's size
and 64 evenly spaced 64 KiB slices of it (all of a file under 4 MiB): a changed file gets a new
folder, a renamed or moved one finds its old one, and a multi-GB file is keyed in milliseconds.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from nirvana.errors import CorruptCheckpoint, UnsupportedArchitecture
from nirvana.store.atomic import atomic_path
from nirvana.store.paths import cache_dir

_SLICES, _SLICE = 64, 1 << 16


def file_key(path: Path) -> str:
    """A content key of a (possibly huge) file: its size and 64 evenly spaced slices of it."""
    size = path.stat().st_size
    digest = hashlib.sha256(f"gguf:{size}".encode())
    step = max(_SLICE, -(-size // _SLICES))
    with path.open("rb") as f:
        for offset in range(0, size, step):
            f.seek(offset)
            digest.update(f.read(_SLICE))
    return digest.hexdigest()[:16]


def converted_dir(path: Path) -> Path:
    """Where the safetensors copy of a user's GGUF file lives (whether or not it exists yet)."""
    return cache_dir() / "models" / "gguf" / f"{path.stem}-{file_key(path)}"


def is_converted(folder: Path) -> bool:
    return (folder / "model.safetensors").exists() and (folder / "config.json").exists()


def gguf_model_dir(path: str | Path, progress=None) -> Path:
    """The safetensors folder of a GGUF file, converting it on first use."""
    path = Path(path)
    target = converted_dir(path)
    if not is_converted(target):
        convert_gguf(path, target, progress)
    return target


def convert_gguf(path: Path, target: Path, progress=None) -> Path:
    """De-quantize `path` to fp32 and write it (weights, tokenizer, config) to `target`, atomically."""
    if progress:
        progress(0.0, f"Converting {path.name} to safetensors (once; later loads read the cached copy)")
    try:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except (struct.error, EOFError, IndexError) as exc:
        raise CorruptCheckpoint(f"{str(path)!r} is truncated or damaged ({exc}); download or export it again.") from exc
    except (ValueError, KeyError, NotImplementedError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "magic" in text:
            raise CorruptCheckpoint(f"{str(path)!r} is not a GGUF file ({text}).") from exc
        raise UnsupportedArchitecture(
            f"{str(path)!r} could not be converted by transformers' GGUF loader ({text}); it reads the decoder "
            "families transformers lists for GGUF (Llama, Mistral, Qwen2, Qwen3, Gemma, ...)."
        ) from exc
    if getattr(model, "hf_quantizer", None) is not None:
        # GGUF-loaded models refuse save_pretrained until the (already de-quantized) config is dropped.
        model.hf_quantizer.remove_quantization_config(model)
    with atomic_path(target) as tmp:  # a killed conversion leaves no folder that looks converted
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return target
