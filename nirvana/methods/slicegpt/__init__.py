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
    color="#17becf",
    description="forward only: rotates the residual stream by the PCA of each layer's inputs and deletes its "
    "trailing hidden dimensions in every layer; heads and neurons are all kept",
    reference="microsoft/TransformerCompression: src/slicegpt/rotate.py (rotate_and_slice_sequential), "
    "layernorm_fusion.py, slicing_scheduler.py (ConstSlicingScheduler), adapters/llama_adapter.py, modules.py (RMSN)",
    explain="It prunes the other axis: every weight matrix loses columns or rows along the hidden dimension, after "
    "the residual stream is rotated into the basis of its principal components, while NIRVANA removes whole KV "
    "groups and neurons. The rotation comes first because the hidden dimensions of a trained model all carry signal "
    "(slicing them unrotated destroys it); after the PCA rotation the trailing dimensions carry the least variance.",
)

__all__ = ["METHOD", "SliceGPTConfig"]
