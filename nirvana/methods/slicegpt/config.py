"""SliceGPT's settings (microsoft/TransformerCompression `run_slicegpt.py` arguments), typed and validated."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from nirvana.errors import InvalidInput, UnsupportedArchitecture
from nirvana.methods.base import MethodConfig
from nirvana.models.shapes import ModelShape

# Families whose decoder layer is `x + attn(norm(x))`, `x + mlp(norm(x))` with RMSNorm(weight): the
# norm's scale folds into the projections that read it, and the rest commutes with a rotation.
ROTATABLE = ("llama", "mistral", "qwen2", "qwen3")
# What is missing for the others, said to the user.
NOT_ROTATABLE = {
    "gemma": "Gemma's norms scale by (1 + weight) and its embeddings by sqrt(hidden_size); the fold for them "
    "is not written",
    "gemma2": "Gemma-2 normalizes each attention and MLP output (post_attention / post_feedforward norms) before "
    "the residual add, with a learned scale that does not commute with a rotation of the residual stream",
    "gemma3_text": "Gemma-3 normalizes each attention and MLP output (post_attention / post_feedforward norms) "
    "before the residual add, with a (1 + weight) scale that does not commute with a rotation of the residual "
    "stream",
}
NOT_ROTATABLE["gemma3"] = NOT_ROTATABLE["gemma3_text"]
ORIENTATIONS = ("pca",)


@dataclass(frozen=True)
class SliceGPTConfig(MethodConfig):
    """`slicing`: fraction of the hidden dimension removed (the reference's `--sparsity`); None (the
    default) chooses the width whose block-parameter sparsity, shortcuts counted, is nearest the
    target. `round_interval`: the kept width is a multiple of it (reference default 8).
    `slice_head`: also slice the last layer's output and the LM head (reference default False).
    `damp`: added to the covariance diagonal before the eigen-decomposition, as a fraction of its
    mean (the reference's 0.01). `final_orientation`: "pca" (the reference's default; "random" is
    not implemented)."""

    slicing: float | None = None
    round_interval: int = 8
    slice_head: bool = False
    damp: float = 0.01
    final_orientation: str = "pca"

    def __post_init__(self) -> None:
        s = self.slicing
        if s is not None and (isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 < s < 1):
            raise InvalidInput(
                f"slicegpt slicing must be a fraction of the hidden dimension in (0, 1), or null to match the target "
                f"sparsity; got {s!r}."
            )
        r = self.round_interval
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise InvalidInput(f"slicegpt round_interval must be a positive integer (8 by default), got {r!r}.")
        if not isinstance(self.slice_head, bool):
            raise InvalidInput(f"slicegpt slice_head must be true or false, got {self.slice_head!r}.")
        d = self.damp
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d < 1:
            raise InvalidInput(f"slicegpt damp must be a number in [0, 1) (0.01 by default), got {d!r}.")
        if self.final_orientation not in ORIENTATIONS:
            raise InvalidInput(
                f"slicegpt final_orientation must be {', '.join(ORIENTATIONS)} (the reference's 'random' is not "
                f"implemented), got {self.final_orientation!r}."
            )

    def check(self, model: nn.Module, shape: ModelShape, sparsity: float) -> None:
        """The family must be rotatable, its norms RMSNorms with a weight, and o_proj / down_proj bias-free."""
        check_rotatable(model, shape)


def check_rotatable(model: nn.Module, shape: ModelShape) -> None:
    model_type = shape.model_type
    if model_type in NOT_ROTATABLE:
        raise UnsupportedArchitecture(
            f"slicegpt cannot rotate {model_type}: {NOT_ROTATABLE[model_type]}. It runs on {', '.join(ROTATABLE)}; "
            "prune this model with --method nirvana, llm-pruner or flap."
        )
    if model_type not in ROTATABLE:
        raise UnsupportedArchitecture(f"slicegpt runs on {', '.join(ROTATABLE)}, not on {model_type!r}.")
    if getattr(model.config, "nirvana_sliced_hidden", None) or getattr(model.config, "pruned", False):
        raise InvalidInput("this model is already pruned; SliceGPT rotates a dense model: load the dense one.")
