"""`RecoveryConfig`: the settings of one LoRA recovery run, validated and JSON round-trippable.

Defaults are the reference recipe (NIRVANA, after LLM-Pruner): LoRA r 8, alpha 16, dropout 0.05
on all seven projections, lr 1e-4, batch 16. The budget is a number of optimizer steps or of
training tokens; on a 2-core CPU the reference's 2 epochs of Alpaca (~10 M tokens) would take
days, so the default is a short budget (`DEFAULT_STEPS`) that runs in about 5 minutes there.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from nirvana.errors import InvalidInput

LOSSES = ("lm", "kd", "mix")  # next-token loss, distillation from the dense model, or a mix (recovery.distill)
TRAIN = ("lora", "full")  # LoRA adapters merged back, or every decoder-layer weight
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Above this a LoRA learning rate diverges within a few steps on every model we tried; it is
# almost always a typo (1 instead of 1e-4).
MAX_LR = 0.1
DEFAULT_STEPS = 16  # 16 x 16 x 128 = 32,768 tokens: ~5 min for SmolLM2 at 50% on a 2-core CPU (~110 tok/s)
MAX_STEPS = 1_000_000


@dataclass(frozen=True)
class RecoveryConfig:
    """LoRA recovery settings. `steps` or `tokens` sets the budget (`tokens` wins when given).

    Example:
        >>> RecoveryConfig(steps=30).total_steps
        30
        >>> RecoveryConfig(tokens=65_536, batch_size=16, seq_len=128).total_steps
        32
    """

    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.05
    target_modules: tuple[str, ...] = PROJECTIONS
    lr: float = 1e-4
    weight_decay: float = 0.0
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    batch_size: int = 16
    micro_batch_size: int = 4  # sequences per forward/backward; gradients accumulate to batch_size
    seq_len: int = 128
    steps: int = DEFAULT_STEPS
    tokens: int | None = None  # budget in training tokens; overrides `steps`
    seed: int = 0
    eval_every: int = 10  # held-out loss every k optimizer steps (0 = only before and after)
    eval_sequences: int = 8  # held-out sequences of seq_len tokens
    gradient_checkpointing: bool = False
    loss: str = "lm"  # LOSSES: "kd" and "mix" need the teacher (the dense model)
    temperature: float = 1.0  # distillation temperature tau (kd, mix)
    kd_weight: float = 0.5  # mix: w * kd + (1 - w) * lm
    train: str = "lora"  # TRAIN: "full" trains the sliced weights themselves (r, alpha, dropout unused)

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_modules", tuple(self.target_modules))
        _int(self, "r", 1, 4096)
        _num(self, "alpha", 0.0, 1e4, open_low=True)
        _num(self, "dropout", 0.0, 0.9)
        if not self.target_modules or any(m not in PROJECTIONS for m in self.target_modules):
            raise InvalidInput(
                f"target_modules must be a non-empty subset of {', '.join(PROJECTIONS)}; "
                f"got {list(self.target_modules)}."
            )
        if len(set(self.target_modules)) != len(self.target_modules):
            raise InvalidInput(f"target_modules lists a projection twice: {list(self.target_modules)}.")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not math.isfinite(self.lr):
            raise InvalidInput(f"lr must be a number, got {self.lr!r}.")
        if not 0 < self.lr <= MAX_LR:
            raise InvalidInput(
                f"lr {self.lr!r} is outside (0, {MAX_LR}]: a learning rate must be positive, and above {MAX_LR} "
                "LoRA diverges. The reference recipe uses 1e-4; try 1e-4 to 1e-3."
            )
        _num(self, "weight_decay", 0.0, 1.0)
        _num(self, "max_grad_norm", 0.0, 1e6, open_low=True)
        _int(self, "batch_size", 1, 4096)
        _int(self, "micro_batch_size", 1, 4096)
        if self.batch_size % self.micro_batch_size:
            raise InvalidInput(
                f"batch_size {self.batch_size} is not a multiple of micro_batch_size {self.micro_batch_size}; "
                "gradients accumulate over whole micro-batches: pick a divisor (e.g. 1, 2, 4, 8)."
            )
        _int(self, "seq_len", 2, 8192)
        _int(self, "steps", 0, MAX_STEPS, what="steps (optimizer steps; 0 merges untrained adapters)")
        if self.tokens is not None:
            _int(self, "tokens", 0, MAX_STEPS * 4096 * 8192, what="tokens (the training budget in tokens)")
        _int(self, "warmup_steps", 0, MAX_STEPS)
        _int(self, "seed", 0, 2**32 - 1)
        _int(self, "eval_every", 0, MAX_STEPS)
        _int(self, "eval_sequences", 1, 4096)
        if not isinstance(self.gradient_checkpointing, bool):
            raise InvalidInput(f"gradient_checkpointing must be true or false, got {self.gradient_checkpointing!r}.")
        if self.loss not in LOSSES:
            raise InvalidInput(
                f"unknown recovery loss {self.loss!r}; accepted: lm (next-token), kd (distillation from the dense "
                "model), mix (both, weighted by kd_weight)."
            )
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or not 0 < t <= 100:
            raise InvalidInput(f"temperature must be a number in (0, 100] (1 by default), got {t!r}.")
        _num(self, "kd_weight", 0.0, 1.0)
        if self.train not in TRAIN:
            raise InvalidInput(
                f"unknown train mode {self.train!r}; accepted: lora (adapters, merged back), full (the weights)."
            )

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    @property
    def total_steps(self) -> int:
        """Optimizer steps of the budget; a token budget is rounded up to whole steps."""
        if self.tokens is not None:
            return math.ceil(self.tokens / self.tokens_per_step)
        return self.steps

    @property
    def total_tokens(self) -> int:
        return self.total_steps * self.tokens_per_step

    def to_dict(self) -> dict:
        d = asdict(self)
        d["target_modules"] = list(self.target_modules)
        return d

    @classmethod
    def from_dict(cls, data: dict) -> RecoveryConfig:
        if not isinstance(data, dict):
            raise InvalidInput(f"a recovery config must be a JSON object, got {type(data).__name__}.")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidInput(f"unknown recovery settings {unknown}; accepted: {', '.join(sorted(known))}.")
        return cls(**data)


def _int(cfg, name: str, lo: int, hi: int, what: str | None = None) -> None:
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        hint = " Use a positive budget, e.g. --steps 30." if name in ("steps", "tokens") and value is not None else ""
        raise InvalidInput(f"{what or name} must be an integer in [{lo}, {hi}], got {value!r}.{hint}")


def _num(cfg, name: str, lo: float, hi: float, open_low: bool = False) -> None:
    value = getattr(cfg, name)
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not ok or value > hi or value < lo or (open_low and value == lo):
        bound = f"({lo}, {hi}]" if open_low else f"[{lo}, {hi}]"
        raise InvalidInput(f"{name} must be a number in {bound}, got {value!r}.")
