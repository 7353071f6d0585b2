"""Tyr-the-Pruner (Li et al., NeurIPS 2025; AMD-AGI/Tyr-the-Pruner): a supernet of locally pruned and
reconstructed sparsity levels per module, and an evolutionary search of the per-module distribution by sparse KL
to the dense model (docs/BASELINES.md; what the reference computes: docs/notes/tyr-reference.md)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn

from nirvana.errors import InvalidInput
from nirvana.guard.memory import (
    ArchSizes,
    MemoryEstimate,
    check_scoring_memory,
    dtype_bytes,
    estimate_forward_by_layer,
    oom_guard,
)
from nirvana.methods.base import OnDataMethod, method_config_of
from nirvana.methods.tyr.config import REFERENCE, TyrConfig
from nirvana.methods.tyr.run import tyr_plan
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.shapes import model_shape
from nirvana.pruning.plan import PruningPlan
from nirvana.pruning.reconstruct import reconstruct
from nirvana.pruning.slicing import apply_plan
from nirvana.store.keys import content_key
from nirvana.store.paths import cache_dir


def tyr_memory(model_config, settings: TyrConfig, **sizes) -> MemoryEstimate:
    """Planned peak (bytes above the weights) of the supernet and the search: a working copy of the model, every
    calibration sequence's hidden states at one layer, one micro-batch's logits, the dense top-k, one module's H
    and its inverse (fp64). The levels are on disk, one module's at a time in memory."""
    est = estimate_forward_by_layer(model_config, **sizes)
    a = ArchSizes.from_config(model_config)
    act = dtype_bytes(sizes.get("dtype") or torch.float32)
    samples, seq_len = sizes["samples"], sizes["seq_len"]
    micro = sizes.get("micro_batch") or min(samples, 8)
    width = max(a.intermediate_size, a.num_heads * a.head_dim)
    est.components["working copy of the model"] = a.total_params * act
    est.components["layer inputs, all sequences"] = 2 * samples * seq_len * a.hidden_size * act
    est.components["logits of one micro-batch (fp32)"] = 2 * micro * seq_len * a.vocab_size * 4
    est.components["dense top-k logits and ids"] = samples * seq_len * settings.kl_topk * 8
    est.components["H, its inverse and the solve (fp64)"] = 4 * width * width * 8
    return est


@dataclass(frozen=True, kw_only=True)
class TyrMethod(OnDataMethod):
    """Plans by the supernet and the search (`tyr_plan`); applies by slicing to the searched units and re-solving the
    kept o_proj / down_proj columns by the reference's least squares on the same calibration batch."""

    verb: ClassVar[str] = "pruned and reconstructed"
    without_scores: ClassVar[str] = "it searches per-layer sparsities over a supernet of reconstructed levels"

    no_reconstruct: ClassVar[str] = "re-solves the kept weights by the same least squares itself"

    def plan_on_data(self, model: nn.Module, sparsity: float, config: TyrConfig, batch, *, micro_batch=0,
                     use_cache=True, progress=None) -> PruningPlan:  # fmt: skip
        """The searched plan at `sparsity` on `batch` (checked first: the target, a dense model, the memory)."""
        self.check_config(model, model_shape(model), sparsity, config)
        if batch is None:
            raise InvalidInput("method 'tyr' prunes on calibration activations: it needs a calibration batch.")
        n, t = batch.input_ids.shape
        check_scoring_memory(
            model, n, t, micro_batch=micro_batch, estimate=functools.partial(self.memory, settings=config)
        )
        fingerprint = model_fingerprint(model)
        path = cache_dir() / "tyr-plans" / f"{content_key(fingerprint, sparsity, config.to_dict(), batch.hash)}.json"
        if use_cache and path.exists():
            if progress:
                progress(1.0, "tyr: the searched plan loaded from the cache")
            return PruningPlan.load(path)
        with oom_guard("searching (tyr)"):
            plan = tyr_plan(
                model, sparsity, config, batch, micro_batch=micro_batch, progress=progress, fingerprint=fingerprint
            )
        if use_cache:
            path.parent.mkdir(parents=True, exist_ok=True)
            plan.save(path)
        return plan

    def apply(self, model, plan: PruningPlan, *, scores=None, batch=None, inplace=False, micro_batch=0, progress=None):
        """The searched units sliced out of a copy (the dense weights are the least squares' targets), then the kept
        o_proj / down_proj columns re-solved on `batch` (`nirvana.pruning.reconstruct`, the reference's solve)."""
        if batch is None:
            raise InvalidInput("method 'tyr' re-solves the kept weights on calibration activations: it needs a batch.")
        config = method_config_of(self, plan.settings.method_settings)
        pruned = apply_plan(model, plan)
        return reconstruct(model, pruned, plan, batch, micro_batch=micro_batch or 8, damp=config.damp,
                           progress=progress)  # fmt: skip


METHOD = TyrMethod(
    name="tyr",
    label="Tyr-the-Pruner",
    config=TyrConfig,
    needs_data=True,
    uses_gradients=False,
    memory=tyr_memory,
    description="forward only: every module pruned locally at several sparsities (OBS rounds, kept weights "
    "re-solved by least squares), then an evolutionary search of the per-layer distribution by sparse KL to dense",
    reference="AMD-AGI/Tyr-the-Pruner: prune_to_supernet.py, src/pruner.py, src/local_pruner.py, "
    "search_sparsity_dist.py, src/metric_utils.py, script/example.sh",
)

__all__ = ["METHOD", "REFERENCE", "TyrConfig"]
