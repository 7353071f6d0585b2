"""SliceGPT's PCA spectra of a dense model: what fraction of each stream's variance a hidden width keeps.

`rotate_and_slice` at the full width (slicing 0: the rotation only, exact) on a copy of the model
records every PCA's eigenvalues: the embedding output, and per layer the input of the MLP norm
(`attention`) and the layer output (`mlp`), the streams SliceGPT slices. From them the fraction of
variance a width D' keeps is `sum(top D' eigenvalues) / sum(all)`, per stream and instantly, so a
slider can move the width without another forward pass.

These are the dense model's spectra. An actual SliceGPT prune computes each PCA on the signals of
the layers already sliced, so its own figures (`config.nirvana_sliced_hidden["variance_kept"]`)
are a little lower from the second layer on; the app says which one it shows. Cached on disk by
model fingerprint, calibration batch hash and the damping.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch.nn as nn

from nirvana.data.calibration import CalibrationBatch
from nirvana.methods.slicegpt.budget import HiddenDims
from nirvana.methods.slicegpt.config import SliceGPTConfig, check_rotatable
from nirvana.methods.slicegpt.rotation import rotate_and_slice
from nirvana.models.architectures import text_config
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.shapes import model_shape
from nirvana.progress import Progress
from nirvana.pruning.slicing import copy_without_block_weights
from nirvana.store.keys import content_key
from nirvana.store.paths import cache_dir


@dataclass(frozen=True)
class Spectra:
    """Eigenvalues (descending) of each sliced stream's covariance in the dense model."""

    hidden_size: int
    embedding: tuple[float, ...]
    attention: tuple[tuple[float, ...], ...]  # per layer: the MLP norm's input (after the attention's residual add)
    mlp: tuple[tuple[float, ...], ...]  # per layer: the layer output
    calibration_hash: str

    def kept(self, width: int) -> dict:
        """Fraction of variance kept at hidden width `width`: {"embedding": f, "attention": [..], "mlp": [..]}."""
        if not 0 < width <= self.hidden_size:
            raise ValueError(f"width must lie in (0, {self.hidden_size}], got {width}")
        return {
            "embedding": _kept(self.embedding, width),
            "attention": [_kept(v, width) for v in self.attention],
            "mlp": [_kept(v, width) for v in self.mlp],
        }

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Spectra:
        return cls(
            int(data["hidden_size"]),
            tuple(data["embedding"]),
            tuple(tuple(v) for v in data["attention"]),
            tuple(tuple(v) for v in data["mlp"]),
            str(data["calibration_hash"]),
        )


def _kept(values, width: int) -> float:
    values = [max(0.0, v) for v in values]
    total = sum(values)
    return sum(values[:width]) / total if total > 0 else 1.0


def spectra_cache_path(fingerprint: str, calibration_hash: str, damp: float) -> Path:
    return cache_dir() / "spectra" / f"slicegpt-{fingerprint}-{content_key(calibration_hash, damp)}.json"


def dense_spectra(
    model: nn.Module,
    batch: CalibrationBatch,
    config: SliceGPTConfig | None = None,
    *,
    micro_batch: int = 0,
    use_cache: bool = True,
    progress: Progress = None,
) -> Spectra:
    """The PCA spectra of `model`'s streams on `batch` (forward only, layer by layer; `model` is not changed)."""
    config = config or SliceGPTConfig()
    check_rotatable(model, model_shape(model))
    path = spectra_cache_path(model_fingerprint(model), batch.hash, config.damp)
    if use_cache and path.exists():
        if progress:
            progress(1.0, "PCA spectra loaded from cache")
        return Spectra.from_dict(json.loads(path.read_text()))
    batch.check_vocab(model.get_input_embeddings().num_embeddings)
    hidden = text_config(model.config).hidden_size
    dims = HiddenDims.constant(hidden, len(model_shape(model).num_kv_heads), hidden, slice_head=True)
    values: dict = {}
    rotate_and_slice(
        copy_without_block_weights(model),
        batch.input_ids,
        dims,
        config,
        micro_batch=micro_batch,
        progress=progress,
        eigenvalues=values,
    )
    spectra = Spectra(
        hidden,
        tuple(values["embedding"]),
        tuple(tuple(v) for v in values["attention"]),
        tuple(tuple(v) for v in values["mlp"]),
        batch.hash,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(spectra.to_dict()))
    tmp.replace(path)
    return spectra
