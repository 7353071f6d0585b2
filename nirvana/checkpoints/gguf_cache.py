"""GGUF files as models: de-quantized once by transformers' GGUF loader and cached as safetensors.

A model that transformers loaded from a GGUF refuses `save_pretrained` ("quantized with gguf and
is not serializable"), so a pruned copy of it could not be saved, and every load de-quantizes the
whole file again. Every GGUF, the embedded SmolLM2 and a user's file alike, is therefore
converted once into a plain safetensors folder (fp32 weights, tokenizer, config) under the cache
and loaded from there like any model folder: a reload takes well under a second.

A user's file is cached under `models/gguf/<stem>-<key>`, where the key hashes the file's size
and 64 evenly spaced 64 KiB slices of it (all of a file under 4 MiB): a changed file gets a new
folder, a renamed or moved one finds its old one, and a multi-GB file is keyed in milliseconds.

A file above `ISOLATE_ABOVE` is converted in a child process. De-quantizing frees gigabytes of small blocks
that stay in the converting process's C heap as free chunks; the next large tensors are carved from them
instead of being mapped and unmapped, so what they touch stays resident after they are freed. In the process
that converted SmolLM2-135M, FLAP's statistics pass then added 0.257 GiB of RSS where the next process, which
read the cached copy, added 0.127 (the plan: 0.129); on Qwen2.5-Coder-1.5B 0.80 GiB against 0.54 and 0.56
(`bench scale-up`, 2026-12-06). The child costs about 2.5 s of imports, once per file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import struct
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from nirvana.errors import CorruptCheckpoint, NirvanaError, OutOfMemory, UnsupportedArchitecture
from nirvana.store.atomic import atomic_path
from nirvana.store.paths import cache_dir

_SLICES, _SLICE = 64, 1 << 16
ISOLATE_ABOVE = 64 << 20  # bytes of GGUF above which the conversion runs in a child process (module doc)
_CHILD_ERRORS = {cls.__name__: cls for cls in (CorruptCheckpoint, UnsupportedArchitecture)}


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


def convert_gguf(path: Path, target: Path, progress=None, *, isolate: bool | None = None) -> Path:
    """De-quantize `path` to fp32 and write it (weights, tokenizer, config) to `target`, atomically; in a child
    process when `isolate` (by default: a file above `ISOLATE_ABOVE`, see the module's docstring)."""
    if progress:
        progress(0.0, f"Converting {path.name} to safetensors (once; later loads read the cached copy)")
    if isolate is None:
        isolate = path.stat().st_size > ISOLATE_ABOVE
    if isolate:
        _convert_in_child(path, target)
    else:
        _convert(path, target)
    return target


def _convert_in_child(path: Path, target: Path) -> None:
    """`_convert` in a fresh interpreter; its CorruptCheckpoint / UnsupportedArchitecture are raised here."""
    cmd = [sys.executable, "-m", "nirvana.checkpoints.gguf_cache", str(path), str(target)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode == 0:
        return
    error = _reported_error(done.stdout)
    if error is not None:
        raise error
    if done.returncode == -signal.SIGKILL:  # what the kernel's out-of-memory killer sends
        raise OutOfMemory(
            f"converting {str(path)!r} to safetensors was killed (SIGKILL), most likely by the out-of-memory "
            "killer: the fp32 model takes 4 bytes per weight beside the GGUF file. Nothing was cached; close "
            "other models or convert on a machine with more memory, then try again."
        )
    lines = [x for x in done.stderr.strip().splitlines() if x.strip() and "%|" not in x]  # no progress bars
    tail = " | ".join(lines[-3:]) or f"exit status {done.returncode}"
    raise NirvanaError(
        f"converting {str(path)!r} to safetensors failed in its child process ({tail}). Nothing was cached; "
        "check that the machine has memory for the fp32 model (4 bytes per weight) and try again."
    )


def _reported_error(stdout: str) -> NirvanaError | None:
    """The error the child printed as its last line (`_child`), if it printed one."""
    with contextlib.suppress(ValueError, IndexError, KeyError, TypeError):
        report = json.loads(stdout.strip().splitlines()[-1])
        return _CHILD_ERRORS[report["error"]](report["message"])
    return None


def _convert(path: Path, target: Path) -> None:
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


def _child(argv: list[str]) -> int:
    path, target = (Path(a) for a in argv)
    try:
        _convert(path, target)
    except tuple(_CHILD_ERRORS.values()) as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
