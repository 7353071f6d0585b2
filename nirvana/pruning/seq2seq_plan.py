"""`Seq2SeqPlan`: which heads and FFN neurons each layer of a T5 keeps, per unit kind. Plain, versioned JSON.

The encoder-decoder counterpart of `PruningPlan` (`nirvana.pruning.plan`): data apart from the
scores that made it and the model it is applied to, carrying the dense model's fingerprint so it
is never applied to another model. A plan file says which it is by `"format"`:

    {"format": "nirvana-t5-plan", "schema_version": 1, "fingerprint": ..., "model": {t5_shape},
     "settings": {"sparsity", "gamma", "gamma_default", "scope", "align", "criterion", "calibration"},
     "kept": {"enc_self": [[heads kept in layer 0], ...], ..., "dec_ffn": [[neurons], ...]}, "stats": {...}}
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

from nirvana.errors import InvalidInput, PlanMismatch
from nirvana.guard.safety import check_file_size
from nirvana.models.t5 import KINDS
from nirvana.pruning.plan import PruningPlan
from nirvana.store.atomic import atomic_write_text

FORMAT = "nirvana-t5-plan"
SCHEMA_VERSION = 1
SCOPES = ("global", "per-stack")  # one ranking over both stacks (the default), or one budget per stack


@dataclass(frozen=True)
class Seq2SeqSettings:
    """How a T5 plan was made. `gamma`: the value used in each ranking's scope (`{"enc_self+...": g}`);
    `gamma_default`: gamma* of each scope; `gamma_given`: the gamma asked for (None: gamma*)."""

    sparsity: float
    gamma: dict
    gamma_default: dict
    gamma_given: float | None = None
    scope: str = "global"
    align: int = 8
    criterion: str = "nirvana"
    calibration: dict | None = None
    method: str = "nirvana"

    def __post_init__(self) -> None:
        if not isinstance(self.sparsity, (int, float)) or not 0 <= self.sparsity < 1:
            raise InvalidInput(f"sparsity must be in [0, 1), got {self.sparsity!r}.")
        if self.scope not in SCOPES:
            raise InvalidInput(f"scope {self.scope!r} is not one of {', '.join(SCOPES)}.")
        if self.gamma_given is not None and not self.gamma_given > 0:
            raise InvalidInput(f"gamma must be > 0, got {self.gamma_given!r}.")
        if not isinstance(self.align, int) or self.align < 1 or self.align & (self.align - 1):
            raise InvalidInput(f"align must be a power of two (1 = off), got {self.align!r}.")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Seq2SeqPlan:
    family: ClassVar[str] = "t5"  # nirvana.models.family.FAMILIES
    fingerprint: str
    model: dict  # t5_shape() of the dense model
    settings: Seq2SeqSettings
    kept: dict[str, list[list[int]]]
    stats: dict = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if isinstance(self.settings, dict):
            try:
                self.settings = Seq2SeqSettings(**self.settings)
            except (TypeError, InvalidInput) as exc:
                raise PlanMismatch(f"T5 plan settings are invalid: {exc}") from exc
        if set(self.kept) != set(KINDS):
            raise PlanMismatch(f"a T5 plan keeps units of the kinds {', '.join(KINDS)}; got {', '.join(self.kept)}.")

    @property
    def dense_widths(self) -> dict[str, int]:
        """{kind: units per layer of the dense model} (heads of an attention, neurons of an FFN)."""
        return {k: self.model["num_heads"] if v.attention else self.model["d_ff"] for k, v in KINDS.items()}

    @property
    def kept_counts(self) -> dict[str, list[int]]:
        """{kind: units kept per layer}."""
        return {kind: [len(row) for row in rows] for kind, rows in self.kept.items()}

    def to_dict(self) -> dict:
        head = {"format": FORMAT, "schema_version": self.schema_version, "fingerprint": self.fingerprint}
        return {**head, "model": self.model, "settings": asdict(self.settings), "kept": self.kept, "stats": self.stats}

    @classmethod
    def from_dict(cls, data: dict) -> Seq2SeqPlan:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PlanMismatch('not a T5 plan (its "format" is not nirvana-t5-plan).')
        if data.get("schema_version") != SCHEMA_VERSION:
            raise PlanMismatch(f"T5 plan schema {data.get('schema_version')!r} is not {SCHEMA_VERSION}; re-plan.")
        try:
            return cls(data["fingerprint"], data["model"], data["settings"], data["kept"], data.get("stats", {}))
        except KeyError as exc:
            raise PlanMismatch(f"the T5 plan is missing {exc.args[0]!r}.") from exc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def save(self, path: str | Path) -> Path:
        return atomic_write_text(path, json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Seq2SeqPlan:
        path = Path(path)
        try:
            check_file_size(path, "plan")
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise PlanMismatch(f"{str(path)!r} is not a readable plan ({exc}).") from exc
        return cls.from_dict(data)

    def check_model(self, fingerprint: str) -> None:
        if fingerprint != self.fingerprint:
            raise PlanMismatch(
                f"this T5 plan was made for model fingerprint {self.fingerprint}, not this model's ({fingerprint}); "
                "apply it to the dense model it was planned on, or plan again."
            )


def is_seq2seq_plan(data: dict) -> bool:
    return isinstance(data, dict) and data.get("format") == FORMAT


def load_plan(path: str | Path) -> PruningPlan | Seq2SeqPlan:
    """A plan file of either kind: a T5's (`"format": "nirvana-t5-plan"`) or a decoder-only model's (whose
    loader says what is wrong with a file that is neither)."""
    try:
        is_t5_plan = is_seq2seq_plan(json.loads(Path(path).read_text()))
    except (OSError, ValueError):
        is_t5_plan = False
    return (Seq2SeqPlan if is_t5_plan else PruningPlan).load(path)
