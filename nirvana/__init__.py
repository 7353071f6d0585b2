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

This package never imports streamlit. Its top-level names are imported on first use (PEP 562), so
`import nirvana.cli` or `import nirvana.errors` does not pay for torch and transformers up front.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# Each public name -> the module that defines it (imported when the name is first read).
_EXPORTS = {
    "LoadedModel": "nirvana.checkpoints.loaded",
    "DEFAULT_MODEL": "nirvana.checkpoints.loading",
    "load_model": "nirvana.checkpoints.loading",
    "load_pruned": "nirvana.checkpoints.pruned",
    "save_pruned": "nirvana.checkpoints.pruned",
    "CalibrationBatch": "nirvana.data.calibration",
    "calibration_batch": "nirvana.data.calibration",
    **dict.fromkeys(
        (
            "CorruptCheckpoint",
            "DatasetNotFound",
            "InvalidInput",
            "ModelNotFound",
            "NirvanaError",
            "OutOfMemory",
            "PlanMismatch",
            "UnsupportedArchitecture",
        ),
        "nirvana.errors",
    ),
    **dict.fromkeys(
        ("ModelShape", "count_block_parameters", "count_parameters", "model_shape"), "nirvana.models.shapes"
    ),
    **dict.fromkeys(("Allocation", "allocate", "default_gamma"), "nirvana.pruning.allocation"),
    "PruningPlan": "nirvana.pruning.plan",
    "apply_plan": "nirvana.pruning.slicing",
    "CRITERIA": "nirvana.scoring.criteria",
    "compute_scores": "nirvana.scoring.criteria",
    "Scores": "nirvana.scoring.scores",
}

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
assert sorted(__all__) == sorted(_EXPORTS), "every public name has its module in _EXPORTS"


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # read once; later reads skip this function
        return value
    raise AttributeError(f"module 'nirvana' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # what type checkers and IDEs see
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
