"""`PruningPlan`: which KV groups and neurons each layer keeps. Plain, versioned JSON.

A plan is data, separate from the scores that produced it and from the model it is applied
to: `scores -> plan (JSON) -> apply -> pruned model`. It carries the model fingerprint so it
is never applied to another model by mistake.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar

from nirvana.errors import InvalidInput, PlanMismatch
from nirvana.guard.safety import check_file_size
from nirvana.store.atomic import atomic_write_text

SCHEMA_VERSION = 1
MAX_SPARSITY = 0.95
ALLOCATIONS = ("global", "uniform")


@dataclass(frozen=True)
class PlanSettings:
    """How a plan was made; validated when built (from a resolved `Allocation` or a plan file).

    `sparsity`: target fraction of decoder-block weights removed, in [0, MAX_SPARSITY].
    `gamma`: MLP fraction pruned / KV-group fraction pruned (> 0); `gamma_default` the analytic gamma*.
    `align`: kept neurons per layer rounded up to a multiple of this power of two (1 = off).
    `criterion` and `calibration`: where the scores came from (`Scores.criterion`, `.calibration`).
    `method` and `method_settings`: the pruning method (`nirvana.methods.METHODS`) and its config as
    JSON; plans written before methods existed read as `"nirvana"` with no settings.
    The bound of `align` by the model's MLP width is checked where the shape is known (`Allocation.resolve`).
    """

    sparsity: float
    gamma: float
    gamma_default: float
    align: int = 8
    allocation: str = "global"
    criterion: str = "nirvana"
    calibration: dict | None = None
    method: str = "nirvana"
    method_settings: dict | None = None

    def __post_init__(self) -> None:
        check_allocation(self.sparsity, self.gamma, self.align, self.allocation, self.gamma_default)
        if not isinstance(self.criterion, str) or not self.criterion:
            raise InvalidInput(f"criterion must be a criterion name (see nirvana.CRITERIA), got {self.criterion!r}.")
        if self.calibration is not None and not isinstance(self.calibration, dict):
            raise InvalidInput(
                f"calibration must be the scores' calibration description (a dict) or None, got {self.calibration!r}."
            )

        if not isinstance(self.method, str) or not self.method:
            raise InvalidInput(f"method must be a method name (see nirvana.methods.METHODS), got {self.method!r}.")
        if self.method_settings is not None and not isinstance(self.method_settings, dict):
            raise InvalidInput(
                f"method_settings must be a dict (the method's config) or None, got {self.method_settings!r}."
            )

    def to_dict(self) -> dict:
        """As JSON; the method keys at their defaults (NIRVANA, no settings) are left out, so such a plan's file is
        what it was before methods."""
        data = asdict(self)
        method_keys = [f for f in fields(self) if f.name in ("method", "method_settings")]
        if all(data[f.name] == f.default for f in method_keys):
            for f in method_keys:
                del data[f.name]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> PlanSettings:
        """Read the `settings` object of a plan file; `PlanMismatch` says what is missing or wrong."""
        if not isinstance(data, dict):
            raise PlanMismatch("plan settings must be a JSON object; these are not.")
        names = [f.name for f in fields(cls)]
        missing = [k for k in names[:3] if k not in data]  # sparsity, gamma, gamma_default; the rest have defaults
        if missing:
            raise PlanMismatch(f"plan settings are missing {', '.join(missing)}; the plan is not a nirvana plan.")
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise PlanMismatch(
                f"plan settings hold unknown keys {', '.join(unknown)}; accepted: {', '.join(names)}. "
                "Was the plan written by another version of nirvana?"
            )
        try:
            return cls(**data)
        except InvalidInput as exc:
            raise PlanMismatch(f"plan settings are invalid: {exc}") from exc


@dataclass
class LayerPlan:
    layer_idx: int
    kept_kv_groups: list[int]
    kept_neurons: list[int]


@dataclass
class PruningPlan:
    family: ClassVar[str] = "decoder-only"  # nirvana.models.family.FAMILIES
    fingerprint: str
    model: dict  # ModelShape.to_dict() of the dense model
    settings: PlanSettings
    layers: list[LayerPlan]
    stats: dict = field(default_factory=dict)  # achieved sparsity, parameter counts, notes
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if isinstance(self.settings, dict):  # as read from JSON, or built by hand
            self.settings = PlanSettings.from_dict(self.settings)
        if not isinstance(self.settings, PlanSettings):
            raise InvalidInput(f"plan settings must be a PlanSettings, got {type(self.settings).__name__}.")

    @property
    def kept_kv_groups(self) -> list[int]:
        return [len(layer.kept_kv_groups) for layer in self.layers]

    @property
    def kept_neurons(self) -> list[int]:
        return [len(layer.kept_neurons) for layer in self.layers]

    def to_dict(self) -> dict:
        return {**asdict(self), "settings": self.settings.to_dict()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def save(self, path: str | Path) -> Path:
        return atomic_write_text(path, self.to_json())

    @classmethod
    def from_dict(cls, data: dict) -> PruningPlan:
        if not isinstance(data, dict):
            raise PlanMismatch("a plan must be a JSON object; this one is not.")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise PlanMismatch(
                f"plan schema_version {version!r} is not supported (this version reads {SCHEMA_VERSION}); "
                "recompute the plan with this version of nirvana."
            )
        missing = [k for k in ("fingerprint", "model", "settings", "layers") if k not in data]
        if missing:
            raise PlanMismatch(f"plan is missing {', '.join(missing)}; it is not a nirvana plan or it is truncated.")
        try:
            layers = [
                LayerPlan(
                    int(x["layer_idx"]), [int(i) for i in x["kept_kv_groups"]], [int(i) for i in x["kept_neurons"]]
                )
                for x in data["layers"]
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanMismatch(
                f"plan layers are malformed ({exc!r}); each needs layer_idx, kept_kv_groups, kept_neurons."
            ) from exc
        plan = cls(
            str(data["fingerprint"]),
            dict(data["model"]),
            PlanSettings.from_dict(data["settings"]),
            layers,
            dict(data.get("stats", {})),
            version,
        )
        plan.validate()
        return plan

    @classmethod
    def from_json(cls, text: str) -> PruningPlan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PlanMismatch(f"plan is not valid JSON ({exc.msg} at line {exc.lineno}).") from exc
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> PruningPlan:

        path = Path(path)
        try:
            check_file_size(path, "plan")
            text = path.read_text()
        except OSError as exc:
            raise PlanMismatch(f"cannot read plan {str(path)!r}: {exc.strerror}.") from exc
        except UnicodeDecodeError as exc:
            raise PlanMismatch(f"plan {str(path)!r} is not text (a binary file?); pass a plan.json.") from exc
        return cls.from_json(text)

    def validate(self) -> None:
        """Indices in range, sorted, unique; at least one KV group per layer."""
        num_layers = self.model.get("num_layers")
        kv, inter = self.model.get("num_kv_heads"), self.model.get("intermediate")
        if not isinstance(kv, list) or not isinstance(inter, list) or len(self.layers) != num_layers:
            raise PlanMismatch(f"plan has {len(self.layers)} layers but its model has {num_layers}.")
        for layer in self.layers:
            for label, kept, limit in (
                ("kv group", layer.kept_kv_groups, kv[layer.layer_idx]),
                ("neuron", layer.kept_neurons, inter[layer.layer_idx]),
            ):
                if kept != sorted(set(kept)) or (kept and (kept[0] < 0 or kept[-1] >= limit)):
                    raise PlanMismatch(
                        f"layer {layer.layer_idx}: kept {label} indices must be sorted, unique and in [0, {limit})."
                    )
            if not layer.kept_kv_groups:
                raise PlanMismatch(f"layer {layer.layer_idx} keeps no KV group; every layer must keep at least one.")

    def check_model(self, fingerprint: str) -> None:
        if fingerprint != self.fingerprint:
            raise PlanMismatch(
                f"this plan was made for model fingerprint {self.fingerprint}, not {fingerprint}; "
                "recompute it for this model (plans store indices that only make sense for their own weights)."
            )

    def summary(self) -> dict:
        merged = {**self.settings.to_dict(), **self.stats}
        return {k: v for k, v in merged.items() if not isinstance(v, (list, dict)) or k == "notes"}


def check_allocation(sparsity, gamma, align, allocation, gamma_default=None, *, resolved: bool = True) -> None:
    """The allocation's checks that need no model, written once: `PlanSettings` runs them all (`resolved`:
    gamma and gamma_default are numbers); `Allocation` before `resolve` lets both be None (not filled yet).

    `InvalidInput` says which value is wrong and what is accepted.
    """
    if not finite(sparsity) or not 0 <= sparsity <= MAX_SPARSITY:
        raise InvalidInput(
            f"sparsity must be a number in [0, {MAX_SPARSITY}] (fraction of decoder-block weights "
            f"to remove), got {sparsity!r}."
        )
    if (resolved or gamma_default is not None) and (not finite(gamma_default) or gamma_default <= 0):
        raise InvalidInput(f"gamma_default must be a positive number (the analytic gamma*), got {gamma_default!r}.")
    if resolved or gamma is not None:
        check_gamma(gamma, gamma_default)
    check_align(align)
    if allocation not in ALLOCATIONS:
        raise InvalidInput(f"allocation must be one of {', '.join(ALLOCATIONS)}, got {allocation!r}.")


def check_gamma(gamma, gamma_default: float | None) -> None:
    """gamma is a positive number; the message names the model's gamma* when it is known."""
    if not finite(gamma) or gamma <= 0:
        hint = (
            "leave it unset (None) for the model's analytic default gamma*"
            if gamma_default is None
            else f"the analytic default for this model is {gamma_default:.3g}"
        )
        raise InvalidInput(
            f"gamma must be a positive number (MLP fraction pruned / KV-group fraction pruned), got {gamma!r}; {hint}."
        )


def check_align(align, mlp_width: int | None = None) -> None:
    """align is a power of two, at most the model's smallest MLP width when that is known."""
    bad = not isinstance(align, int) or isinstance(align, bool) or align < 1 or align & (align - 1)
    if bad or (mlp_width is not None and align > mlp_width):
        width = "the MLP width" if mlp_width is None else f"the MLP width ({mlp_width})"
        raise InvalidInput(
            f"align must be a power of two between 1 and {width}, got {align!r}; "
            "common choices: 1 (off), 8, 16, 64, 128."
        )


def finite(value: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
