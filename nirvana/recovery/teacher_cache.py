"""The teacher's logits on disk, one file per micro-batch, keyed by content.

Distillation runs the dense teacher forward on every micro-batch of every step. Recovering
several students from one teacher on the same windows (other pruned models, recipes, learning
rates: the distillation benchmark's grid) repeats exactly those forwards, so `--teacher-cache DIR`
keeps them: a file holds the logits of one micro-batch, named by a hash of the teacher's
fingerprint (weights, config, dtype), the device type it ran on, the stored dtype and the token
ids, so a later run with the same teacher and the same windows reads them instead of running the
teacher, and anything else misses. The size is stated before any training and checked against
the folder's free space: full-vocabulary logits are large (SmolLM2: 49,152 x 4 bytes = 192 KiB
per token in fp32, 6 GiB for the default 32,768-token budget). `float32` is exact (a cached run
equals one that computes the logits on the fly); `float16` / `bfloat16` halve the size, rounded.

    cache = TeacherCache("~/.cache/nirvana-explorer/teacher-logits", teacher)
    plan = cache.plan(micro_batches)      # bytes, present, to write; raises if the disk cannot hold it
    print(cache.describe(plan))
    logits = cache.get(ids, lambda: teacher(input_ids=ids).logits)
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
from safetensors.torch import load_file, save_file

from nirvana.errors import InvalidInput
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.weights import input_device
from nirvana.store.paths import cache_dir

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
FREE_MARGIN = 1 << 30  # leave a GiB of the disk free beyond what the cache plans to write


def default_directory() -> Path:
    """Where the app keeps teacher logits: beside the other caches (`NIRVANA_CACHE_DIR` moves them all)."""
    return cache_dir() / "teacher-logits"


@dataclass(frozen=True)
class CachePlan:
    """What a run will ask of the cache: distinct micro-batches, how many are already on disk, bytes."""

    batches: int
    present: int
    bytes_total: int
    bytes_to_write: int
    free_bytes: int


class TeacherCache:
    """Teacher logits per micro-batch in `directory`, for `teacher` (its fingerprint keys every file)."""

    def __init__(self, directory: str | Path, teacher: nn.Module, dtype: str = "float32"):
        if dtype not in DTYPES:
            raise InvalidInput(
                f"unknown teacher-cache dtype {dtype!r}; accepted: {', '.join(DTYPES)} (float32 is exact, the others "
                "halve the size)."
            )
        self.directory = Path(directory).expanduser()
        if self.directory.exists() and not self.directory.is_dir():
            raise InvalidInput(f"--teacher-cache {str(directory)!r} is a file; pass a folder for the teacher's logits.")
        self.dtype = dtype
        self.vocab = teacher.get_output_embeddings().out_features
        device = input_device(teacher).type
        self._teacher_key = f"{model_fingerprint(teacher)}|{device}|{dtype}"
        self.hits = self.misses = self.bytes_written = 0

    def key(self, ids: torch.Tensor) -> str:
        """The file name of micro-batch `ids` [b, T]: the teacher, the stored dtype and the token ids."""
        h = hashlib.sha256(self._teacher_key.encode())
        h.update(str(tuple(ids.shape)).encode())
        h.update(ids.detach().to("cpu", torch.int64).contiguous().numpy().tobytes())
        return h.hexdigest()[:32]

    def path(self, ids: torch.Tensor) -> Path:
        return self.directory / f"{self.key(ids)}.safetensors"

    def batch_bytes(self, ids: torch.Tensor) -> int:
        return ids.numel() * self.vocab * DTYPES[self.dtype].itemsize

    def plan(self, micro_batches: Iterable[torch.Tensor]) -> CachePlan:
        """Sizes for these micro-batches (repeats counted once); raises InvalidInput, writing nothing,
        when the folder's disk cannot hold what is still to write."""
        sizes: dict[str, int] = {}
        for ids in micro_batches:
            sizes.setdefault(self.key(ids), self.batch_bytes(ids))
        present = {k for k in sizes if (self.directory / f"{k}.safetensors").is_file()}
        total = sum(sizes.values())
        to_write = sum(v for k, v in sizes.items() if k not in present)
        free = shutil.disk_usage(_existing_parent(self.directory)).free
        plan = CachePlan(len(sizes), len(present), total, to_write, free)
        if to_write and to_write + FREE_MARGIN > free:
            raise InvalidInput(
                f"the teacher-logit cache needs {_gib(to_write)} more in {self.directory}, and its disk has "
                f"{_gib(free)} free (keeping {_gib(FREE_MARGIN)} spare). Pick a folder on a larger disk, "
                "--teacher-cache-dtype float16 (half the size), a smaller budget, or no --teacher-cache (the teacher "
                "then runs on every step, as without a cache)."
            )
        return plan

    def describe(self, plan: CachePlan) -> str:
        """One line for the run's log: where, which dtype, and `plan`'s sizes."""
        return (
            f"teacher-logit cache {self.directory} ({self.dtype}): {plan.batches} micro-batches, "
            f"{_gib(plan.bytes_total)} in all, {plan.present} already there, "
            f"{_gib(plan.bytes_to_write)} to write ({_gib(plan.free_bytes)} free)"
        )

    def get(self, ids: torch.Tensor, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The logits of micro-batch `ids`, read from disk, or `compute()`d and written. Both paths return the
        stored dtype's values (as fp32 for a half cache), so a first run and a cached one see the same numbers."""
        path = self.path(ids)
        if path.is_file():
            try:
                logits = load_file(str(path))["logits"]
            except Exception:  # a file cut short (a killed run): compute it again below
                logits = None
            if logits is not None and tuple(logits.shape) == (*ids.shape, self.vocab):
                self.hits += 1
                return logits.float()
        logits = compute().detach().to("cpu", DTYPES[self.dtype]).contiguous()
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
        try:
            save_file({"logits": logits}, str(tmp))
            os.replace(tmp, path)  # atomic: a concurrent reader sees the whole file or none
        finally:
            tmp.unlink(missing_ok=True)
        self.misses += 1
        self.bytes_written += logits.numel() * logits.element_size()
        return logits.float()

    def start_run(self) -> None:
        """Count hits, misses and bytes from here (`recover` calls it: one cache can serve many runs)."""
        self.hits = self.misses = self.bytes_written = 0

    def summary(self) -> dict:
        """What the run asked of the cache since `start_run` (recovery.json's `teacher_cache`)."""
        return {
            "directory": str(self.directory),
            "dtype": self.dtype,
            "hits": self.hits,
            "misses": self.misses,
            "bytes_written": self.bytes_written,
        }


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
