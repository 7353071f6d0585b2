"""Tyr-the-Pruner's settings: the reference's defaults recorded beside the ones this machine can afford.

AMD-AGI/Tyr-the-Pruner runs `script/example.sh` on Llama-2-7B with 4,194,304 FineWeb-Edu tokens, 9 levels a
step of 12.5 % of each module apart, 4 coarse-to-fine iterations of 50 generations x 128 offspring, selection
stages of 2,048 / 16,384 / 131,072 tokens keeping 16 / 4 / 2, and the sparse KL over the dense model's top
8,192 logits (docs/notes/tyr-reference.md section 8). On 2 CPU cores one SmolLM2-135M forward of 2,048 tokens
takes about a second, so those defaults would take days; the defaults here take minutes and say what they
cost (docs/BASELINES.md). `REFERENCE` holds the reference's values, for a run that can afford them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from nirvana.errors import InvalidInput
from nirvana.methods.base import MethodConfig

ACCUMULATE = ("centre", "dense")


@dataclass(frozen=True)
class TyrConfig(MethodConfig):
    """`levels`: supernet levels per module (odd; the centre and up to levels // 2 on each side). `step`: the
    first iteration's level step as a fraction of the module's units (at least one KV group, `min_channels`
    neurons), halved each iteration. `iterations`: coarse-to-fine rounds, each rebuilt around the last best.
    `generations`, `offspring`: the evolutionary search per iteration. `stage_tokens` / `survivors`: each
    generation's selection stages (tokens scored, candidates kept). `kl_topk`: the dense model's top logits the
    sparse KL keeps. `attn_rounds` / `mlp_rounds`: OBS rounds of the local pruning. `damp`: of mean(diag H).
    `accumulate`: which weights a block has while the next block's inputs are computed: "centre" (the centre
    level, the reference's stated intent) or "dense" (the reference code as written, docs/notes/tyr-reference.md
    section 5). `seed`: the search's random numbers."""

    levels: int = 9
    step: float = 0.125
    min_channels: int = 32
    iterations: int = 1
    generations: int = 8
    offspring: int = 16
    stage_tokens: tuple[int, ...] = (512, 2048)
    survivors: tuple[int, ...] = (4, 1)
    kl_topk: int = 256
    attn_rounds: int = 1
    mlp_rounds: int = 16
    damp: float = 0.01
    accumulate: str = "centre"
    seed: int = 0

    def __post_init__(self) -> None:
        ints = {k: getattr(self, k) for k in ("levels", "min_channels", "iterations", "generations", "offspring",
                                              "kl_topk", "attn_rounds", "mlp_rounds", "seed")}  # fmt: skip
        for name, value in ints.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "seed" else 1):
                raise InvalidInput(f"tyr {name} must be a positive integer, got {value!r}.")
        if self.levels % 2 == 0:
            raise InvalidInput(f"tyr levels must be odd (a centre and as many on each side), got {self.levels}.")
        if not isinstance(self.step, (int, float)) or isinstance(self.step, bool) or not 0 < self.step < 1:
            raise InvalidInput(f"tyr step must be a fraction of a module's units in (0, 1), got {self.step!r}.")
        if not isinstance(self.damp, (int, float)) or isinstance(self.damp, bool) or not self.damp > 0:
            raise InvalidInput(f"tyr damp must be a positive fraction of mean(diag H), got {self.damp!r}.")
        stages = (self.stage_tokens, self.survivors)
        if not all(isinstance(s, tuple) and s and all(isinstance(v, int) and v > 0 for v in s) for s in stages):
            raise InvalidInput("tyr stage_tokens and survivors must be lists of positive integers.")
        if len(self.stage_tokens) != len(self.survivors):
            raise InvalidInput(
                f"tyr needs one survivor count per selection stage: {len(self.stage_tokens)} stage_tokens, "
                f"{len(self.survivors)} survivors."
            )
        if list(self.survivors) != sorted(self.survivors, reverse=True) or self.survivors[0] > self.offspring:
            raise InvalidInput(
                f"tyr survivors must shrink stage by stage and start at most at offspring ({self.offspring}); "
                f"got {list(self.survivors)}."
            )
        if self.accumulate not in ACCUMULATE:
            raise InvalidInput(f"tyr accumulate must be one of {', '.join(ACCUMULATE)}, got {self.accumulate!r}.")

    def score_key(self) -> dict:
        return self.to_dict()


REFERENCE = replace(
    TyrConfig(),
    iterations=4,
    generations=50,
    offspring=128,
    stage_tokens=(2048, 16384, 131072),
    survivors=(16, 4, 2),
    kl_topk=8192,
)  # script/example.sh (the calibration: 4,194,304 tokens in sequences of 4,096: --samples 1024 --seq-len 4096)
