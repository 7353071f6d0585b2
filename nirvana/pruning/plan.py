"""`PruningPlan`: which KV groups and neurons each layer keeps. Plain, versioned JSON.

A plan is data, separate from the scores that produced it and from the model it is applied
to: `scores -> plan (JSON) -> apply -> pruned model`. It carries the model fingerprint so it
is never applied to another model by mistake.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nirvana.errors import PlanMismatch
from nirvana.store.atomic import atomic_write_text

SCHEMA_VERSION = 1


@dataclass
class LayerPlan:
    layer_idx: int
    kept_kv_groups: list[int]
    kept_neurons: list[int]


@dataclass
class PruningPlan:
    fingerprint: str
    model: dict  # ModelShape.to_dict() of the dense model
    settings: dict  # sparsity, gamma, gamma_default, align, allocation, criterion, calibration
    layers: list[LayerPlan]
    stats: dict = field(default_factory=dict)  # achieved sparsity, parameter counts, notes
    schema_version: int = SCHEMA_VERSION

    @property
    def kept_kv_groups(self) -> list[int]:
        return [len(layer.kept_kv_groups) for layer in self.layers]

    @property
    def kept_neurons(self) -> list[int]:
        return [len(layer.kept_neurons) for layer in self.layers]

    def to_dict(self) -> dict:
        return asdict(self)

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
            dict(data["settings"]),
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
        from nirvana.guard.safety import check_file_size

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
        s = self.settings
        return {k: v for k, v in {**s, **self.stats}.items() if not isinstance(v, (list, dict)) or k == "notes"}


def finite(value: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
