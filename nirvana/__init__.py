"""NIRVANA Explorer: structured pruning of decoder-only LLMs (arXiv 2509.14230), as a library.

The pipeline is four separate steps, each a plain function:

    lm = load_model("smollm2-135m")                              # registry name, hub id or folder
    batch = calibration_batch(lm.tokenizer, "wikitext2-valid")   # [N, T] token ids
    scores = compute_scores(lm.model, "nirvana", batch)          # attn [L, Hkv], mlp [L, I]
    plan = allocate(scores, model_shape(lm.model), Allocation(0.5))  # JSON-able PruningPlan
    pruned = apply_plan(lm.model, plan)                          # physically smaller copy
    save_pruned(pruned, lm.tokenizer, plan, "out/model")

`CRITERIA` is the table of importance criteria (`nirvana.scoring.criteria.CRITERIA`): name -> one
`Criterion` row (scorer, needs_data, uses_gradients, seeded, label, colour, description).

This package never imports streamlit.
"""

from nirvana.checkpoints.loaded import LoadedModel
from nirvana.checkpoints.loading import DEFAULT_MODEL, load_model
from nirvana.checkpoints.pruned import load_pruned, save_pruned
from nirvana.data.calibration import CalibrationBatch, calibration_batch
from nirvana.errors import (
    CorruptCheckpoint,
    DatasetNotFound,
    InvalidInput,
    ModelNotFound,
    NirvanaError,
    OutOfMemory,
    PlanMismatch,
    UnsupportedArchitecture,
)
from nirvana.models.shapes import ModelShape, count_block_parameters, count_parameters, model_shape
from nirvana.pruning.allocation import Allocation, allocate, default_gamma
from nirvana.pruning.plan import PruningPlan
from nirvana.pruning.slicing import apply_plan
from nirvana.scoring.criteria import CRITERIA, compute_scores
from nirvana.scoring.scores import Scores

__version__ = "0.1.0"

__all__ = [
    "CRITERIA",
    "DEFAULT_MODEL",
    "Allocation",
    "CalibrationBatch",
    "CorruptCheckpoint",
    "DatasetNotFound",
    "InvalidInput",
    "LoadedModel",
    "ModelNotFound",
    "ModelShape",
    "NirvanaError",
    "OutOfMemory",
    "PlanMismatch",
    "PruningPlan",
    "Scores",
    "UnsupportedArchitecture",
    "allocate",
    "apply_plan",
    "calibration_batch",
    "compute_scores",
    "count_block_parameters",
    "count_parameters",
    "default_gamma",
    "load_model",
    "load_pruned",
    "model_shape",
    "save_pruned",
]
