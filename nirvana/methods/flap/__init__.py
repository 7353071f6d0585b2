"""FLAP (An, Zhao, Yu, Tang, Wang; AAAI 2024), faithful to CASIA-IVA-Lab/FLAP: see docs/BASELINES.md."""

from __future__ import annotations

from nirvana.methods.base import ScoredMethod
from nirvana.methods.flap.allocation import allocate_flap
from nirvana.methods.flap.compensation import flap_biases
from nirvana.methods.flap.config import FLAPConfig
from nirvana.methods.flap.memory import flap_memory
from nirvana.methods.flap.scoring import flap_scores


def check(model, shape, sparsity: float, config: FLAPConfig) -> None:
    config.check(model, shape, sparsity)


METHOD = ScoredMethod(
    name="flap",
    label="FLAP",
    config=FLAPConfig,
    scorer=flap_scores,
    allocator=allocate_flap,
    compensator=flap_biases,
    checker=check,
    needs_data=True,
    uses_gradients=False,
    memory=flap_memory,
    description="forward only: variance of each o_proj / down_proj input channel x its squared column norm, "
    "standardized per layer, one ranking of heads and neurons; removed channels' mean output becomes a bias",
    reference="CASIA-IVA-Lab/FLAP: lib/prune.py (prune_flap, compress), lib/layerwrapper.py (BiasGPT), main.py",
)

__all__ = ["METHOD", "FLAPConfig"]
