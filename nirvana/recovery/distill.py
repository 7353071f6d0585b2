"""Distillation from the dense model: the recovery objective, and the teacher it needs.

The loss of a recovery step is one of (`RecoveryConfig.loss`):
    lm:   next-token cross-entropy on the training windows (the reference LoRA recipe);
    kd:   tau^2 * mean over every position of KL(p_teacher || p_student), p = softmax(logits / tau),
          on the full vocabulary (forward KL to the teacher's distribution, as Minitron recovers
          width-pruned Llama-3.1-8B; the tau^2 keeps gradient sizes comparable across temperatures,
          Hinton et al. 2015);
    mix:  w * kd + (1 - w) * lm, w = `kd_weight`.
The teacher is the dense model the student was pruned from: the pruned folder's report names it
and its plan holds the dense model's fingerprint (weights, config and dtype), so a teacher loaded
from another reference, in another dtype, or itself pruned is refused before any training. Its
logits are computed on the fly under `no_grad`, one micro-batch at a time: it costs its weights
and one [b, T, V] batch of logits (fp32 here: 4 b T V bytes). With a `TeacherCache`
(`nirvana.recovery.teacher_cache`) they are read from disk where an earlier run with the same
teacher and windows wrote them, and written there otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from nirvana.errors import InvalidInput
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.weights import input_device
from nirvana.recovery.config import LOSSES
from nirvana.recovery.teacher_cache import TeacherCache


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """tau^2 * mean over positions of KL(softmax(t / tau) || softmax(s / tau)); logits [..., V], in fp32."""
    log_s = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    kl = (log_t.exp() * (log_t - log_s)).sum(-1)  # [...]: one KL per position
    return kl.mean() * temperature**2


def check_teacher(teacher: nn.Module, student: nn.Module, plan=None, *, verify: bool = True) -> None:
    """The teacher must be a dense model with the student's vocabulary, and the one its plan was pruned from
    (`verify`: by the plan's fingerprint, which includes the dtype; off for a teacher in another dtype)."""
    if getattr(teacher.config, "pruned", False):
        raise InvalidInput(
            "the teacher is itself a pruned model (its config says pruned); distill from the dense model the student "
            "was pruned from (--teacher <its model id or folder>)."
        )
    vocab_t = teacher.get_output_embeddings().out_features
    vocab_s = student.get_output_embeddings().out_features
    if vocab_t != vocab_s:
        raise InvalidInput(
            f"the teacher's vocabulary has {vocab_t} tokens and the student's {vocab_s}: KL to the teacher compares "
            "distributions over the same tokens. Use the dense model the student was pruned from."
        )
    if verify and plan is not None and model_fingerprint(teacher) != plan.fingerprint:
        raise InvalidInput(
            f"the teacher (fingerprint {model_fingerprint(teacher)}) is not the model this student was pruned from "
            f"(the plan's {plan.fingerprint}): pass the same model reference with the same --dtype as the prune."
        )


class Objective:
    """The training loss of one micro-batch, and its parts (`lm`, `kd`) as floats for the record."""

    def __init__(
        self,
        loss: str,
        teacher: nn.Module | None,
        temperature: float = 1.0,
        kd_weight: float = 0.5,
        cache: TeacherCache | None = None,
    ):
        if loss not in LOSSES:
            raise InvalidInput(f"unknown recovery loss {loss!r}; accepted: {', '.join(LOSSES)}.")
        if loss != "lm" and teacher is None:
            raise InvalidInput(f"loss {loss!r} distills from a teacher: pass the dense model (--teacher).")
        self.loss, self.teacher, self.temperature, self.kd_weight = loss, teacher, temperature, kd_weight
        self.cache = cache if teacher is not None else None
        if teacher is not None:
            teacher.eval()

    @property
    def uses_teacher(self) -> bool:
        return self.loss != "lm"

    def teacher_logits(self, ids: torch.Tensor) -> torch.Tensor:
        """The teacher's logits on `ids` [b, T] (no gradients): from the cache when it holds them."""

        def compute() -> torch.Tensor:
            with torch.no_grad():
                return self.teacher(input_ids=ids.to(input_device(self.teacher))).logits

        return compute() if self.cache is None else self.cache.get(ids, compute)

    def __call__(self, model: nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        with_lm = self.loss in ("lm", "mix")
        out = model(input_ids=ids, labels=ids if with_lm else None)
        parts: dict[str, torch.Tensor] = {}
        if with_lm:
            parts["lm"] = out.loss.float()
        if self.uses_teacher:
            teacher = self.teacher_logits(ids).to(out.logits.device)
            parts["kd"] = kd_loss(out.logits, teacher, self.temperature)
        if self.loss == "mix":
            total = self.kd_weight * parts["kd"] + (1 - self.kd_weight) * parts["lm"]
        else:
            total = parts[self.loss if self.loss == "kd" else "lm"]
        return total, {k: float(v.detach()) for k, v in parts.items()}


@torch.no_grad()
def heldout_kl(
    model: nn.Module, teacher_logits: Callable[[torch.Tensor], torch.Tensor], ids: torch.Tensor, micro_batch: int
) -> float:
    """Mean KL(teacher || model) per position over held-out windows `ids` [N, T] (temperature 1, eval mode);
    `teacher_logits(chunk)` gives the teacher's (`Objective.teacher_logits`: computed, or from its cache)."""
    was = model.training
    model.eval()
    total, count = 0.0, 0
    for chunk in ids.split(micro_batch):  # [b, T]
        logits = model(input_ids=chunk.to(input_device(model))).logits
        t = teacher_logits(chunk).to(logits.device)
        total += kd_loss(logits, t).item() * chunk.shape[0]
        count += chunk.shape[0]
    model.train(was)
    return total / count
