"""SliceGPT (Ashkboos, Croci, Nascimento, Hoefler, Hensman; ICLR 2024), faithful to
microsoft/TransformerCompression: see docs/BASELINES.md."""

from __future__ import annotations

from nirvana.methods.base import RotatingMethod
from nirvana.methods.slicegpt.config import SliceGPTConfig
from nirvana.methods.slicegpt.memory import slicegpt_memory
from nirvana.methods.slicegpt.steps import apply_slicegpt, plan_slicegpt


def check(model, shape, sparsity: float, config: SliceGPTConfig) -> None:
    config.check(model, shape, sparsity)


METHOD = RotatingMethod(
    name="slicegpt",
    label="SliceGPT",
    config=SliceGPTConfig,
    planner=plan_slicegpt,
    rotator=apply_slicegpt,
    checker=check,
    needs_data=True,
    uses_gradients=False,
    memory=slicegpt_memory,
    description="forward only: rotates the residual stream by the PCA of each layer's inputs and deletes its "
    "trailing hidden dimensions in every layer; heads and neurons are all kept",
    reference="microsoft/TransformerCompression: src/slicegpt/rotate.py (rotate_and_slice_sequential), "
    "layernorm_fusion.py, slicing_scheduler.py (ConstSlicingScheduler), adapters/llama_adapter.py, modules.py (RMSN)",
)

__all__ = ["METHOD", "SliceGPTConfig"]
