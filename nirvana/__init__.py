"""NIRVANA Explorer: structured pruning of decoder-only LLMs (arXiv 2509.14230), as a library.

The pipeline is four separate steps, each a plain function:

    lm = load_model("smollm2-135m")                              # registry name, hub id or folder
    batch = calibration_batch(lm.tokenizer, "wikitext2-valid")   # [N, T] token ids
    scores = compute_scores(lm.model, "nirvana", batch)          # attn [L, Hkv], mlp [L, I]
    plan = allocate(scores, model_shape(lm.model), sparsity=0.5) # JSON-able PruningPlan
    pruned = apply_plan(lm.model, plan)                          # physically smaller copy
    save_pruned(pruned, lm.tokenizer, plan, "out/model")

This package never imports streamlit.
"""

from nirvana.allocation import allocate, default_gamma
from nirvana.calibration import CalibrationBatch, calibration_batch
from nirvana.checkpoint import load_pruned, save_pruned
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
from nirvana.models import DEFAULT_MODEL, LoadedModel, load_model
from nirvana.plan import PruningPlan
from nirvana.scorers import SCORERS, compute_scores
from nirvana.scores import Scores
from nirvana.shapes import ModelShape, count_block_parameters, count_parameters, model_shape
from nirvana.slicing import apply_plan

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MODEL",
    "SCORERS",
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
