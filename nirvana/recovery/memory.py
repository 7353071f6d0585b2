"""What recovery training adds to memory, checked before any training (and before a teacher loads).

    check_fits(recovery_memory(pruned, RecoveryConfig(loss="kd"), teacher_config=pruned.config))

The trainable parameters are counted from the model itself: LoRA's r x (in + out) per target
projection (fp32 adapters), or every decoder-layer parameter with `train="full"` (in the model's
dtype). The teacher of distillation is the dense model the student was pruned from, so its
config is the student's (a pruned model keeps its dense widths in `config`).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from nirvana.guard.memory import MemoryEstimate, estimate_training, model_devices
from nirvana.models.architectures import decoder_layers, layer_projections
from nirvana.recovery.config import RecoveryConfig


def trainable_parameters(model: nn.Module, config: RecoveryConfig) -> int:
    """How many parameters the recovery trains: LoRA adapters on the target projections, or the decoder layers."""
    if config.train == "full":
        return sum(p.numel() for layer in decoder_layers(model) for p in layer.parameters())
    return sum(
        config.r * (lin.in_features + lin.out_features)
        for proj in layer_projections(model)
        for role, lin in proj.named_linears().items()
        if role in config.target_modules
    )


def recovery_memory(
    model: nn.Module,
    config: RecoveryConfig,
    *,
    inplace: bool = False,
    teacher: nn.Module | None = None,
    teacher_config=None,
    teacher_dtype: torch.dtype | None = None,
) -> MemoryEstimate:
    """The planned peak of `recover(model, ..., config)` above the loaded student. With distillation
    pass the loaded `teacher`, or, before loading it, its `teacher_config` (and dtype): then its
    weights are counted too."""
    weight = next(p for p in model.parameters() if p.is_floating_point())
    dtype = weight.dtype
    distills = config.loss != "lm"
    return estimate_training(
        model.config,
        micro_batch=config.micro_batch_size,
        seq_len=config.seq_len,
        trainable_params=trainable_parameters(model, config),
        dtype=dtype,
        trainable_dtype=dtype if config.train == "full" else torch.float32,
        copy_bytes=0 if inplace else sum(p.numel() * p.element_size() for p in model.parameters()),
        gradient_checkpointing=config.gradient_checkpointing,
        teacher_config=(teacher.config if teacher is not None else teacher_config) if distills else None,
        teacher_dtype=next(teacher.parameters()).dtype if teacher is not None else teacher_dtype,
        teacher_loaded=teacher is not None,
        device=",".join(model_devices(model)),
    )
