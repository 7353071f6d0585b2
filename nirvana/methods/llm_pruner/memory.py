"""LLM-Pruner's scoring memory: NIRVANA's backward pass, plus the squared-gradient buffers of its
second-order variants.

`taylor_scores` (importance.py) runs one full-batch forward + backward with a `.grad` per block
weight, as the autograd path of NIRVANA's saliency does. `param_second` and `param_mix` first
accumulate the per-example squared gradients into one fp32 buffer per block weight (the
reference's `acc_grad`), which is alive during that full-batch pass: it is the extra item here.
The per-example passes before it hold one sequence's activations, far below the full batch's.
"""

from __future__ import annotations

from nirvana.guard.memory import ArchSizes, MemoryEstimate, estimate_scoring
from nirvana.methods.llm_pruner.config import SECOND_ORDER, LLMPrunerConfig


def llm_pruner_memory(model_config, settings: LLMPrunerConfig, **sizes) -> MemoryEstimate:
    """Planned peak (bytes above the weights) of `taylor_scores` on `sizes` (samples, seq_len, micro_batch, ...)."""
    est = estimate_scoring(model_config, method="autograd", backward=True, **sizes)
    if settings.taylor in SECOND_ORDER:
        world = sizes.get("world_size", 1)  # sharded (FSDP2): each rank squares the rows it owns
        est.components["squared gradients (fp32)"] = ArchSizes.from_config(model_config).block_weights * 4 // world
        est.notes.append(f"taylor={settings.taylor} keeps acc_grad, one fp32 buffer per block weight")
    return est
