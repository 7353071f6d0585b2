"""`recover`: LoRA fine-tuning of a (pruned) model with peft, merged back into its sliced weights.

LoRA goes on the chosen projections of every decoder layer, whatever their pruned widths. The
adapters and the optimizer state are fp32 even on a bf16/fp16 base (peft's
`autocast_adapter_dtype`), which is what keeps half-precision LoRA from turning to NaN. After
the budget (or a stop, or a NaN) the adapters of the last good step are merged into the base
weights: the result is again a plain model of the same per-layer widths.

`config.train = "full"` trains every parameter of the decoder layers instead (the sliced
projections, norms, SliceGPT's shortcuts; embeddings and LM head stay as they are, so a tied
head stays tied), in the model's dtype. `config.loss` chooses the objective
(`nirvana.recovery.distill`): next-token loss, distillation from the dense `teacher`, or a mix;
with a teacher the held-out KL to it is recorded beside the held-out loss.
"""

from __future__ import annotations

import copy
import resource
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version

import torch
import torch.nn as nn

from nirvana.errors import InvalidInput
from nirvana.guard.memory import check_fits
from nirvana.models.architectures import decoder_layers, layer_projections
from nirvana.models.weights import input_device
from nirvana.pruning.slicing import update_config
from nirvana.recovery.config import RecoveryConfig
from nirvana.recovery.data import RecoveryData
from nirvana.recovery.distill import Objective, heldout_kl
from nirvana.recovery.memory import recovery_memory
from nirvana.recovery.teacher_cache import CachePlan, TeacherCache


@dataclass(frozen=True)
class RecoveryStep:
    """What the progress callback gets after every optimizer step and every held-out evaluation."""

    step: int
    total_steps: int
    loss: float | None  # training loss of this step (None for the step-0 evaluation)
    heldout_loss: float | None  # set on evaluation steps
    tokens: int  # training tokens so far
    tokens_per_second: float
    seconds: float
    seconds_left: float
    parts: dict | None = None  # the loss's parts this step ({"lm": .., "kd": ..})
    heldout_kl: float | None = None  # held-out KL to the teacher, on evaluation steps with one

    @property
    def fraction(self) -> float:
        return self.step / self.total_steps if self.total_steps else 1.0

    @property
    def message(self) -> str:
        parts = [f"step {self.step}/{self.total_steps}"]
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4f}")
        if self.parts and len(self.parts) > 1:
            parts.append(" ".join(f"{k} {v:.4f}" for k, v in self.parts.items()))
        if self.heldout_loss is not None:
            parts.append(f"held-out {self.heldout_loss:.4f}")
        if self.heldout_kl is not None:
            parts.append(f"KL to teacher {self.heldout_kl:.4f}")
        parts.append(f"{self.tokens_per_second:.0f} tok/s, {self.seconds_left:.0f} s left")
        return ", ".join(parts)


@dataclass
class RecoveryResult:
    """The merged model and the record of its training."""

    model: nn.Module  # merged: plain nn.Linear projections, same per-layer widths as the input
    config: RecoveryConfig
    data: dict
    status: str  # "complete", "stopped" (asked to) or "nan" (loss diverged; last good state kept)
    message: str
    steps_done: int
    tokens_trained: int
    train_seconds: float
    seconds: float  # wall time including held-out evaluation and merge
    train_loss: list[tuple[int, float]] = field(default_factory=list)  # (step, loss)
    heldout_loss: list[tuple[int, float]] = field(default_factory=list)  # (step, loss); step 0 = before
    peak_rss_mb: float = 0.0
    adapter_state: dict | None = None  # fp32 LoRA tensors in peft's naming, for an adapter-only save
    lora_config: object | None = None  # the peft LoraConfig
    train_parts: list[tuple[int, dict]] = field(default_factory=list)  # (step, {"lm": .., "kd": ..})
    heldout_kl: list[tuple[int, float]] = field(default_factory=list)  # (step, KL to the teacher)
    teacher: str | None = None  # what the teacher was (its reference), when distilling
    teacher_cache: dict | None = None  # TeacherCache.summary() and its plan's sizes, when one was used

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_trained / self.train_seconds if self.train_seconds > 0 else 0.0

    def summary(self) -> dict:
        """JSON-able record: settings, data, losses, speed, status (what recovery.json holds)."""
        return {
            "status": self.status,
            "message": self.message,
            "config": self.config.to_dict(),
            "data": self.data,
            "steps_done": self.steps_done,
            "total_steps": self.config.total_steps,
            "tokens_trained": self.tokens_trained,
            "train_seconds": round(self.train_seconds, 3),
            "seconds": round(self.seconds, 3),
            "tokens_per_second": round(self.tokens_per_second, 2),
            "heldout_before": self.heldout_loss[0][1] if self.heldout_loss else None,
            "heldout_after": self.heldout_loss[-1][1] if self.heldout_loss else None,
            "train_loss": [[s, round(v, 5)] for s, v in self.train_loss],
            "heldout_loss": [[s, round(v, 5)] for s, v in self.heldout_loss],
            "heldout_kl_before": self.heldout_kl[0][1] if self.heldout_kl else None,
            "heldout_kl_after": self.heldout_kl[-1][1] if self.heldout_kl else None,
            "heldout_kl": [[s, round(v, 6)] for s, v in self.heldout_kl],
            "train_parts": [[s, {k: round(v, 5) for k, v in p.items()}] for s, p in self.train_parts],
            "teacher": self.teacher,
            "teacher_cache": self.teacher_cache,
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            "torch": torch.__version__,
            "peft": _peft_version(),
            "threads": torch.get_num_threads(),
        }


StopFlag = Callable[[], bool] | None


def target_module_names(model: nn.Module, config: RecoveryConfig) -> list[str]:
    """Full module names of the LoRA targets: the chosen projections of every decoder layer only.

    Full names (not suffixes) so a multimodal model's vision tower, which has its own `q_proj`,
    is never adapted. Raises `InvalidInput` when `r` exceeds a target's smaller side.
    """
    names = {id(m): n for n, m in model.named_modules()}
    out = []
    for layer_idx, proj in enumerate(layer_projections(model)):
        for role, lin in proj.named_linears().items():
            if role not in config.target_modules:
                continue
            if type(lin) is not nn.Linear:
                raise InvalidInput(
                    f"layer {layer_idx} {role} is a {type(lin).__name__}, not a plain nn.Linear: LoRA recovery needs "
                    "the model loaded in fp32/bf16/fp16 (not 8/4-bit)."
                )
            width = min(lin.in_features, lin.out_features)
            if config.r > width:
                raise InvalidInput(
                    f"LoRA rank r={config.r} is larger than layer {layer_idx}'s {role} ({lin.in_features} -> "
                    f"{lin.out_features}, smaller side {width}): a rank above a projection's width adds parameters "
                    f"and no capacity. Use r <= {width}, or leave {role} out of target_modules."
                )
            out.append(names[id(lin)])
    return out


def recover(
    model: nn.Module,
    data: RecoveryData,
    config: RecoveryConfig | None = None,
    *,
    progress: Callable[[RecoveryStep], None] | None = None,
    should_stop: StopFlag = None,
    inplace: bool = False,
    keep_adapter: bool = False,
    teacher: nn.Module | None = None,
    teacher_name: str | None = None,
    teacher_cache: TeacherCache | None = None,
    log: Callable[[str], None] | None = None,
) -> RecoveryResult:
    """Train LoRA adapters on `data` for the config's budget, then merge them into the weights
    (or, with `config.train == "full"`, the decoder layers' own weights).

    `teacher`: the dense model to distill from (`config.loss` "kd" or "mix"; checked by the caller
    with `distill.check_teacher`), never trained; `teacher_name` is recorded with the run.
    `teacher_cache`: its logits on disk (`teacher_cache_plan` checks the size first, and `log` gets it).

    The input model is left untouched unless `inplace=True` (a copy is trained). `should_stop()`
    is polled between micro-batches; a stop keeps the state of the last whole step. A non-finite
    loss or gradient stops the run and keeps the last good state (status "nan").

    Example:
        >>> config = RecoveryConfig(steps=30)
        >>> docs, info = load_documents("calibration")
        >>> result = recover(pruned, data_for(config, tok, docs, info), config)
        >>> result.heldout_loss[0][1] > result.heldout_loss[-1][1]
        True
    """
    # here, not at the top: peft is needed only for LoRA recovery
    from peft import LoraConfig, get_peft_model  # optional heavy dependency, imported for training only

    config = config or RecoveryConfig()
    start = time.perf_counter()
    if data.seq_len != config.seq_len:
        raise InvalidInput(
            f"the data's windows have {data.seq_len} tokens but the config's seq_len is {config.seq_len}."
        )
    total = config.total_steps
    if total and data.train.shape[0] < config.batch_size:
        raise InvalidInput(
            f"the data holds {data.train.shape[0]} training windows, fewer than one batch of {config.batch_size}."
        )
    objective = Objective(config.loss, teacher, config.temperature, config.kd_weight, teacher_cache)
    check_fits(recovery_memory(model, config, inplace=inplace, teacher=teacher))  # before the copy is made
    cache_plan = teacher_cache_plan(teacher_cache, data, config) if objective.cache is not None else None
    if cache_plan is not None:
        if log is not None:
            log(teacher_cache.describe(cache_plan))
        teacher_cache.start_run()
    lora = config.train == "lora"
    targets = target_module_names(model, config) if lora else None
    if not inplace:
        model = copy.deepcopy(model)
    device = input_device(model)
    requires_grad = {n: p.requires_grad for n, p in model.named_parameters()}
    was_training = model.training
    for p in model.parameters():
        p.requires_grad_(False)
    torch.manual_seed(config.seed)  # LoRA A init and dropout masks
    lora_config = LoraConfig(
        r=config.r,
        lora_alpha=config.alpha,
        lora_dropout=config.dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    if lora:
        with warnings.catch_warnings():  # peft 0.21 calls transformers' deprecated is_gradient_checkpointing
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            peft_model = get_peft_model(model, lora_config, autocast_adapter_dtype=True)  # adapters in fp32
        lora_params = [p for p in peft_model.parameters() if p.requires_grad]
        for p in lora_params:  # peft keeps fp32 adapters on a half base; make it explicit on every path
            p.data = p.data.float()
    else:  # full fine-tuning: the decoder layers' weights themselves, in the model's dtype
        peft_model, lora_config = model, None
        lora_params = [p for layer in decoder_layers(model) for p in layer.parameters()]
        for p in lora_params:
            p.requires_grad_(True)
    optimizer = torch.optim.AdamW(lora_params, lr=config.lr, weight_decay=config.weight_decay)
    last_good = [p.detach().clone() for p in lora_params]

    train_loss: list[tuple[int, float]] = []
    train_parts: list[tuple[int, dict]] = []
    heldout_loss: list[tuple[int, float]] = []
    kl_record: list[tuple[int, float]] = []
    status, message = "complete", f"trained {total} steps"
    train_seconds, step = 0.0, 0
    eval_seconds = 0.0

    def report(loss, held, parts=None):
        done_rate = train_seconds / step if step else 0.0
        evals_left = (total - step) // config.eval_every if config.eval_every else 0
        per_eval = eval_seconds / max(1, len(heldout_loss))
        left = done_rate * (total - step) + per_eval * (evals_left + 1 if step < total else 0)
        tokens = step * config.tokens_per_step
        if progress is not None:
            progress(
                RecoveryStep(
                    step,
                    total,
                    loss,
                    held,
                    tokens,
                    tokens / train_seconds if train_seconds else 0.0,
                    time.perf_counter() - start,
                    left,
                    parts,
                    kl_record[-1][1] if held is not None and kl_record else None,
                )
            )

    def evaluate():
        nonlocal eval_seconds
        t = time.perf_counter()
        value = heldout(peft_model, data.heldout, config.micro_batch_size, device)
        heldout_loss.append((step, value))
        if teacher is not None:
            kl = heldout_kl(peft_model, objective.teacher_logits, data.heldout, config.micro_batch_size)
            kl_record.append((step, kl))
        eval_seconds += time.perf_counter() - t
        return value

    report(None, evaluate())
    micro = config.batch_size // config.micro_batch_size
    try:
        while step < total:
            if _stop(should_stop):
                status, message = "stopped", f"stopped at step {step} of {total}"
                break
            t = time.perf_counter()
            peft_model.train()
            lr = config.lr * min(1.0, (step + 1) / config.warmup_steps) if config.warmup_steps else config.lr
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = _batch(data.train, step, config.batch_size).to(device)  # [B, T]
            step_loss, bad, stopped, step_parts = 0.0, None, False, {}
            for chunk in batch.split(config.micro_batch_size):  # [b, T] each
                loss, parts = objective(peft_model, chunk)
                if not torch.isfinite(loss):
                    bad = f"the training loss became {loss.item()} at step {step + 1}"
                    break
                (loss / micro).backward()
                step_loss += loss.item() / micro
                for k, v in parts.items():
                    step_parts[k] = step_parts.get(k, 0.0) + v / micro
                if _stop(should_stop):
                    stopped = True
                    break
            if stopped:
                optimizer.zero_grad(set_to_none=True)
                train_seconds += time.perf_counter() - t
                status, message = "stopped", f"stopped during step {step + 1} of {total}; kept step {step}"
                break
            if bad is None:
                norm = torch.nn.utils.clip_grad_norm_(lora_params, config.max_grad_norm)
                if not torch.isfinite(norm):
                    bad = f"the gradient norm became {norm.item()} at step {step + 1}"
            if bad is not None:
                optimizer.zero_grad(set_to_none=True)
                _restore(lora_params, last_good)
                status = "nan"
                message = (
                    f"{bad}: training stopped and the adapters of step {step} (the last good state) were kept. "
                    f"Lower the learning rate (now {config.lr}), or use fp32 / bf16 rather than fp16."
                )
                break
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            for saved, p in zip(last_good, lora_params):
                saved.copy_(p.detach())
            step += 1
            train_seconds += time.perf_counter() - t
            train_loss.append((step, step_loss))
            train_parts.append((step, step_parts))
            held = None
            if step == total or (config.eval_every and step % config.eval_every == 0):
                held = evaluate()
            report(step_loss, held, step_parts)
        if heldout_loss[-1][0] != step:
            report(None, evaluate())
    finally:
        peft_model.eval()
    adapter_state = None
    if keep_adapter and lora:
        from peft import get_peft_model_state_dict

        adapter_state = {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(peft_model).items()}
    merged = peft_model.merge_and_unload(progressbar=False, safe_merge=True) if lora else model
    if config.gradient_checkpointing:
        merged.gradient_checkpointing_disable()
    for n, p in merged.named_parameters():
        p.requires_grad_(requires_grad.get(n, False))
    merged.train(was_training)
    update_config(merged)
    return RecoveryResult(
        model=merged,
        config=config,
        data=data.info,
        status=status,
        message=message,
        steps_done=step,
        tokens_trained=step * config.tokens_per_step,
        train_seconds=train_seconds,
        seconds=time.perf_counter() - start,
        train_loss=train_loss,
        heldout_loss=heldout_loss,
        peak_rss_mb=peak_rss_mb(),
        adapter_state=adapter_state,
        lora_config=lora_config,
        train_parts=train_parts,
        heldout_kl=kl_record,
        teacher=teacher_name if teacher is not None else None,
        teacher_cache=None if cache_plan is None else teacher_cache.summary() | _plan_record(cache_plan),
    )


def micro_batches(data: RecoveryData, config: RecoveryConfig) -> list[torch.Tensor]:
    """Every micro-batch the teacher sees in `recover(model, data, config)`: each step's (when the loss distills),
    then the held-out ones (its KL to the student)."""
    steps = [
        chunk
        for step in range(config.total_steps if config.loss != "lm" else 0)
        for chunk in _batch(data.train, step, config.batch_size).split(config.micro_batch_size)
    ]
    return steps + list(data.heldout.split(config.micro_batch_size))


def teacher_cache_plan(cache: TeacherCache, data: RecoveryData, config: RecoveryConfig) -> CachePlan:
    """The cache's sizes for this run (raises InvalidInput, before any training, when its disk cannot hold them)."""
    return cache.plan(micro_batches(data, config))


def _plan_record(plan: CachePlan) -> dict:
    return {"batches": plan.batches, "present_before": plan.present, "bytes_total": plan.bytes_total}


@torch.no_grad()
def heldout(model: nn.Module, ids: torch.Tensor, micro_batch: int, device) -> float:
    """Mean next-token loss over held-out windows `ids` [N, T] (eval mode: no dropout)."""
    was = model.training
    model.eval()
    total, count = 0.0, 0
    for chunk in ids.split(micro_batch):  # [b, T]
        chunk = chunk.to(device)
        total += model(input_ids=chunk, labels=chunk).loss.float().item() * chunk.shape[0]
        count += chunk.shape[0]
    model.train(was)
    return total / count


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def _batch(train: torch.Tensor, step: int, batch_size: int) -> torch.Tensor:
    """Windows for optimizer step `step` (0-based), cycling through the (already shuffled) pool."""
    n = train.shape[0]
    idx = (torch.arange(batch_size) + step * batch_size) % n
    return train[idx]  # [B, T]


def _stop(flag: StopFlag) -> bool:
    if flag is None:
        return False
    is_set = getattr(flag, "is_set", None)  # threading.Event
    return bool(is_set() if is_set else flag())


def _restore(params: list[torch.Tensor], saved: list[torch.Tensor]) -> None:
    with torch.no_grad():
        for p, s in zip(params, saved):
            p.copy_(s)


def _peft_version() -> str:
    return version("peft")
