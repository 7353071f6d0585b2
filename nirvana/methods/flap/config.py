"""FLAP's settings (CASIA-IVA-Lab/FLAP `main.py` arguments), typed and validated."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from nirvana.errors import InvalidInput
from nirvana.methods.base import MethodConfig
from nirvana.models.architectures import layer_projections
from nirvana.models.shapes import ModelShape

# `--metrics`: IFV (input feature variance), WIFV (weighted by the squared column norm, the
# default), WIFN (weighted input feature norm). `--structure`: only AL-AM (adaptive across layers
# and modules, the reference default and the paper's FLAP) is implemented here.
METRICS = ("WIFV", "IFV", "WIFN")
STRUCTURES = ("AL-AM",)


@dataclass(frozen=True)
class FLAPConfig(MethodConfig):
    """`metric`: fluctuation metric (reference default WIFV). `structure`: AL-AM. `bias`: add the
    compensation bias to o_proj / down_proj after slicing (the reference always does for FLAP)."""

    metric: str = "WIFV"
    structure: str = "AL-AM"
    bias: bool = True

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise InvalidInput(f"flap metric must be one of {', '.join(METRICS)}, got {self.metric!r}.")
        if self.structure not in STRUCTURES:
            raise InvalidInput(
                f"flap structure must be {', '.join(STRUCTURES)} (UL-UM, UL-MM and AL-MM of the reference are "
                f"not implemented), got {self.structure!r}."
            )
        if not isinstance(self.bias, bool):
            raise InvalidInput(f"flap bias must be true or false, got {self.bias!r}.")

    def score_key(self) -> dict:
        return {"metric": self.metric}

    def check(self, model: nn.Module, shape: ModelShape, sparsity: float) -> None:
        """The compensation becomes o_proj / down_proj's bias: refuse a model that already has one there."""
        if not self.bias:
            return
        for layer_idx, proj in enumerate(layer_projections(model)):
            for name in ("o_proj", "down_proj"):
                if getattr(proj, name).bias is not None:
                    raise InvalidInput(
                        f"flap adds its bias compensation as the bias of o_proj and down_proj, but layer {layer_idx}'s "
                        f"{name} already has a bias ({shape.model_type} with attention_bias / mlp_bias?). Use "
                        'method_settings {"bias": false} to prune without compensation, or another method.'
                    )
