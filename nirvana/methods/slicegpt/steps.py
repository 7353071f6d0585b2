"""SliceGPT as plan -> apply: the plan records the kept hidden width, the apply step rotates on data.

Unlike the unit-pruning methods, SliceGPT has no scores a plan could be cut from: each layer's
rotation is the PCA of signals that pass through the layers already sliced, so the plan holds the
widths (all heads and neurons kept, the hidden width in `stats["slicegpt"]`) and `apply_slicegpt`
runs the rotation on the calibration batch. A new width is a new forward pass (no gradients).
"""

from __future__ import annotations

import torch.nn as nn

from nirvana.data.calibration import CalibrationBatch
from nirvana.errors import InvalidInput, PlanMismatch
from nirvana.methods.slicegpt.budget import dims_for
from nirvana.methods.slicegpt.config import SliceGPTConfig, check_rotatable
from nirvana.methods.slicegpt.rotation import check_pca_tokens, rotate_and_slice
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.shapes import model_shape
from nirvana.progress import Progress
from nirvana.pruning.allocation import default_gamma, plan_stats
from nirvana.pruning.plan import PlanSettings, PruningPlan
from nirvana.pruning.slicing import copy_without_block_weights, update_config


def plan_slicegpt(model: nn.Module, sparsity: float, config: SliceGPTConfig, calibration: dict | None = None):
    """The plan for a target block sparsity (or `config.slicing`): every unit kept, the width in its stats."""
    shape = model_shape(model)
    check_rotatable(model, shape)
    if calibration is not None:
        check_pca_tokens(calibration["samples"], calibration["seq_len"], shape.hidden_size)
    _, stats = dims_for(model, sparsity, config)
    gamma = default_gamma(shape)
    settings = PlanSettings(
        sparsity,
        gamma,
        gamma,
        align=1,
        allocation="uniform",
        criterion="slicegpt",
        calibration=calibration,
        method="slicegpt",
        method_settings=config.to_dict(),
    )
    kept = {"attn": [list(range(kv)) for kv in shape.num_kv_heads], "mlp": [list(range(i)) for i in shape.intermediate]}
    all_stats = plan_stats(shape, kept)
    all_stats.update(
        achieved_block_sparsity=stats["achieved_block_param_sparsity"],
        block_weights_after=None,
        params_after=stats["params_after"],
        total_param_reduction=1 - stats["params_after"] / stats["params_before"],
        slicegpt=stats,
        notes=[
            f"hidden width {stats['hidden_kept']} of {stats['hidden_size']} ({stats['chosen_by']}); heads and neurons "
            "all kept; shortcuts counted as block parameters",
            "gamma does not apply to method 'slicegpt' (not used)",
        ]
        + (["embedding and LM head untied (rotated by different bases)"] if shape.tied_embeddings else []),
    )
    plan = PruningPlan(model_fingerprint(model), shape.to_dict(), settings, kept, all_stats)
    plan.validate()
    return plan


def apply_slicegpt(
    model: nn.Module,
    plan: PruningPlan,
    batch: CalibrationBatch | None,
    *,
    inplace: bool = False,
    micro_batch: int = 0,
    progress: Progress = None,
) -> nn.Module:
    """The rotated and sliced model: the plan's width, the rotations from `batch`. Its config's
    `nirvana_sliced_hidden` holds the widths and the fraction of variance each slice kept."""
    if batch is None:
        raise InvalidInput("slicegpt rotates by the PCA of calibration activations: it needs a calibration batch.")
    plan.check_model(model_fingerprint(model))
    config = SliceGPTConfig.from_dict(plan.settings.method_settings, "slicegpt")
    dims, stats = dims_for(model, plan.settings.sparsity, config)
    recorded = plan.stats.get("slicegpt", {}).get("hidden_kept")
    if recorded is not None and recorded != stats["hidden_kept"]:
        raise PlanMismatch(f"the plan keeps {recorded} hidden dimensions but its settings give {stats['hidden_kept']}.")
    batch.check_vocab(model.get_input_embeddings().num_embeddings)
    if not inplace:
        model = copy_without_block_weights(model)
    spectra = rotate_and_slice(model, batch.input_ids, dims, config, micro_batch=micro_batch, progress=progress)
    model.config.nirvana_sliced_hidden["variance_kept"] = spectra
    update_config(model)
    return model
