"""`PruningPlan`: which units of each kind every layer keeps. Plain, versioned JSON.

A plan is data, separate from the scores that produced it and from the model it is applied
to: `scores -> plan (JSON) -> apply -> pruned model`. It carries the model fingerprint so it
is never applied to another model by mistake.

One type for every family: `kept` maps each unit kind of the model's family (`nirvana.models.family`) to
the kept indices per layer, decoder-only `{"attn": KV groups, "mlp": neurons}`, a T5's five kinds
(`enc_self`, `dec_self`, `cross`, `enc_ffn`, `dec_ffn`). A plan file names its family by its JSON
`"format"` (`PLAN_FORMATS`); a decoder-only plan's file has none and lists its layers, the layout
plans had before T5 existed, so every plan file ever written loads and saves back byte for byte:

    decoder-only  {"fingerprint", "model", "settings", "layers": [{"layer_idx", "kept_kv_groups", "kept_neurons"}],
                   "stats", "schema_version"}
    t5            {"format": "nirvana-t5-plan", "schema_version", "fingerprint", "model", "settings",
                   "kept": {kind: [[kept units of layer 0], ...]}, "stats"}
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from nirvana.errors import InvalidInput, PlanMismatch
from nirvana.guard.safety import check_file_size
from nirvana.models.family import FAMILIES
from nirvana.store.atomic import atomic_write_text

SCHEMA_VERSION = 1
MAX_SPARSITY = 0.95
ALLOCATIONS = FAMILIES["decoder-only"].allocations  # ("global", "uniform")
SCOPES = FAMILIES["t5"].allocations  # ("global", "per-stack"): one ranking over both stacks, or one per stack
EVERY_ALLOCATION = tuple(dict.fromkeys(a for f in FAMILIES.values() for a in f.allocations))


@dataclass(frozen=True)
class PlanSettings:
    """How a plan was made; validated when built (from a resolved `Allocation` or a plan file).

    `sparsity`: target fraction of the blocks' prunable weights removed, in [0, MAX_SPARSITY].
    `gamma`: MLP fraction pruned / attention-unit fraction pruned (> 0); `gamma_default` the analytic gamma*.
    A family with several rankings (a T5 ranked per stack) records both per ranking, `{"enc_self+enc_ffn": g}`,
    and `gamma_given`, the gamma asked for (None: each ranking's gamma*).
    `align`: kept neurons per layer rounded up to a multiple of this power of two (1 = off).
    `allocation`: "global" or "uniform" (decoder-only), "global" or "per-stack" (T5).
    `criterion` and `calibration`: where the scores came from (`Scores.criterion`, `.calibration`).
    `method` and `method_settings`: the pruning method (`nirvana.methods.METHODS`) and its config as
    JSON; plans written before methods existed read as `"nirvana"` with no settings.
    The bound of `align` by the model's MLP width is checked where the shape is known (`Allocation.resolve`).
    """

    sparsity: float
    gamma: float | dict
    gamma_default: float | dict
    align: int = 8
    allocation: str = "global"
    criterion: str = "nirvana"
    calibration: dict | None = None
    method: str = "nirvana"
    method_settings: dict | None = None
    gamma_given: float | None = None

    def __post_init__(self) -> None:
        if self.per_ranking:
            check_allocation(self.sparsity, None, self.align, self.allocation, resolved=False)
            for name, values in (("gamma", self.gamma), ("gamma_default", self.gamma_default)):
                if not isinstance(values, dict) or not all(finite(v) and v > 0 for v in values.values()):
                    raise InvalidInput(
                        f"{name} must be a positive number per ranking ({{ranking: gamma}}), got {values!r}."
                    )
            if self.gamma_given is not None:
                check_gamma(self.gamma_given, None)
        else:
            check_allocation(self.sparsity, self.gamma, self.align, self.allocation, self.gamma_default)
            if self.gamma_given is not None:
                raise InvalidInput(
                    "gamma_given is recorded beside per-ranking gammas only; gamma is the one asked for."
                )
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

    @property
    def per_ranking(self) -> bool:
        """gamma and gamma* are recorded per ranking (a dict), as a T5's are."""
        return isinstance(self.gamma, dict) or isinstance(self.gamma_default, dict)

    def to_dict(self) -> dict:
        """As a decoder-only plan file holds it: the method keys at their defaults (NIRVANA, no settings) are left
        out, so such a plan's file is what it was before methods; `gamma_given` (per-ranking plans') likewise."""
        data = asdict(self)
        method_keys = [f for f in fields(self) if f.name in ("method", "method_settings")]
        if all(data[f.name] == f.default for f in method_keys):
            for f in method_keys:
                del data[f.name]
        if data["gamma_given"] is None:
            del data["gamma_given"]
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


@dataclass(frozen=True)
class LayerPlan:
    """One decoder layer of a decoder-only plan: its kept KV groups and neurons (a view of `PruningPlan.kept`)."""

    layer_idx: int
    kept_kv_groups: list[int]
    kept_neurons: list[int]


@dataclass
class PruningPlan:
    """Which units of each kind (`FAMILIES[family].units`) every layer of the dense model `model` keeps."""

    fingerprint: str
    model: dict  # the dense model's shape: ModelShape.to_dict() (decoder-only), t5_shape() (T5)
    settings: PlanSettings
    kept: dict[str, list[list[int]]]  # {unit kind: [sorted kept indices of layer 0, ...]}
    stats: dict = field(default_factory=dict)  # achieved sparsity, parameter counts, notes
    schema_version: int = SCHEMA_VERSION
    family: str = "decoder-only"  # nirvana.models.family.FAMILIES

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise InvalidInput(f"unknown family {self.family!r}; accepted: {', '.join(FAMILIES)}.")
        if isinstance(self.settings, dict):  # as read from JSON, or built by hand
            self.settings = PlanSettings.from_dict(self.settings)
        if not isinstance(self.settings, PlanSettings):
            raise InvalidInput(f"plan settings must be a PlanSettings, got {type(self.settings).__name__}.")
        units = FAMILIES[self.family].units
        if not isinstance(self.kept, dict) or set(self.kept) != set(units):
            got = ", ".join(self.kept) if isinstance(self.kept, dict) else repr(self.kept)
            raise PlanMismatch(f"a {self.family} plan keeps units of the kinds {', '.join(units)}; got {got}.")
        allocations = FAMILIES[self.family].allocations
        if self.settings.allocation not in allocations:
            raise PlanMismatch(
                f"allocation {self.settings.allocation!r} is not a {self.family} allocation; "
                f"accepted: {', '.join(allocations)}."
            )

    @property
    def layers(self) -> list[LayerPlan]:
        """A decoder-only plan per layer: its kept KV groups and neurons."""
        return [LayerPlan(i, kv, mlp) for i, (kv, mlp) in enumerate(zip(self.kept["attn"], self.kept["mlp"]))]

    @property
    def kept_counts(self) -> dict[str, list[int]]:
        """{kind: units kept per layer}."""
        return {kind: [len(row) for row in rows] for kind, rows in self.kept.items()}

    @property
    def kept_kv_groups(self) -> list[int]:
        return self.kept_counts["attn"]

    @property
    def kept_neurons(self) -> list[int]:
        return self.kept_counts["mlp"]

    @property
    def unit_widths(self) -> dict[str, list[int]]:
        """{kind: units of the dense model per layer}."""
        return PLAN_FORMATS[self.family].widths(self.model)

    @property
    def dense_widths(self) -> dict[str, int]:
        """{kind: units per layer of the dense model} (the widest layer's, for a non-uniform model)."""
        return {kind: max(widths) for kind, widths in self.unit_widths.items()}

    def to_dict(self) -> dict:
        return PLAN_FORMATS[self.family].write(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def save(self, path: str | Path) -> Path:
        indent = PLAN_FORMATS[self.family].indent
        return atomic_write_text(path, self.to_json() if indent is None else json.dumps(self.to_dict(), indent=indent))

    @classmethod
    def from_dict(cls, data: dict) -> PruningPlan:
        """A plan of any family from its JSON object: its `"format"` says which (`PLAN_FORMATS`)."""
        if not isinstance(data, dict):
            raise PlanMismatch("a plan must be a JSON object; this one is not.")
        by_format = {f.format: name for name, f in PLAN_FORMATS.items()}
        name = by_format.get(data.get("format"))
        if name is None:
            raise PlanMismatch(
                f"plan format {data.get('format')!r} is not one this version reads "
                f"({', '.join(repr(f) for f in by_format)}); recompute the plan with this version of nirvana."
            )
        if data.get("schema_version") != SCHEMA_VERSION:
            raise PlanMismatch(
                f"plan schema_version {data.get('schema_version')!r} is not supported (this version reads "
                f"{SCHEMA_VERSION}); recompute the plan with this version of nirvana."
            )
        plan = PLAN_FORMATS[name].read(data)
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
        """Per kind: one list per layer of the dense model, indices sorted, unique and in range; at least one
        attention unit per layer (and, for a family without a per-layer minimum of zero, one of every kind)."""
        try:
            widths = self.unit_widths
        except (KeyError, TypeError) as exc:
            raise PlanMismatch(f"the plan's model shape is malformed ({exc!r}).") from exc
        labels = PLAN_FORMATS[self.family].labels
        for kind, rows in self.kept.items():
            if len(rows) != len(widths[kind]):
                raise PlanMismatch(f"plan has {len(rows)} layers of {kind} but its model has {len(widths[kind])}.")
            for i, (kept, limit) in enumerate(zip(rows, widths[kind])):
                if kept != sorted(set(kept)) or (kept and (kept[0] < 0 or kept[-1] >= limit)):
                    raise PlanMismatch(
                        f"layer {i}: kept {labels[kind]} indices must be sorted, unique and in [0, {limit})."
                    )
                if not kept and (kind in PLAN_FORMATS[self.family].nonempty):
                    raise PlanMismatch(f"layer {i} keeps no {labels[kind]}; every layer must keep at least one.")

    def check_model(self, fingerprint: str) -> None:
        if fingerprint != self.fingerprint:
            raise PlanMismatch(
                f"this plan was made for model fingerprint {self.fingerprint}, not {fingerprint}; "
                "recompute it for this model (plans store indices that only make sense for their own weights)."
            )

    def summary(self) -> dict:
        merged = {**self.settings.to_dict(), **self.stats}
        return {k: v for k, v in merged.items() if not isinstance(v, (list, dict)) or k == "notes"}


def load_plan(path: str | Path) -> PruningPlan:
    """A plan file of any family (`prune --out` writes `plan.json`); the message says what is wrong with one that
    is not a plan."""
    return PruningPlan.load(path)


# -- the JSON layouts, one per family --------------------------------------------------------------------------


def _int_rows(rows) -> list[list[int]]:
    return [[int(i) for i in row] for row in rows]


def _write_decoder(plan: PruningPlan) -> dict:
    layers = [{"layer_idx": i, "kept_kv_groups": kv, "kept_neurons": mlp}
              for i, (kv, mlp) in enumerate(zip(plan.kept["attn"], plan.kept["mlp"]))]  # fmt: skip
    data = {"fingerprint": plan.fingerprint, "model": plan.model, "settings": plan.settings.to_dict(),
            "layers": layers, "stats": plan.stats, "schema_version": plan.schema_version}  # fmt: skip
    return json.loads(json.dumps(data))  # a copy, as dataclasses.asdict made


def _read_decoder(data: dict) -> PruningPlan:
    missing = [k for k in ("fingerprint", "model", "settings", "layers") if k not in data]
    if missing:
        raise PlanMismatch(f"plan is missing {', '.join(missing)}; it is not a nirvana plan or it is truncated.")
    try:
        layers = sorted(data["layers"], key=lambda x: int(x["layer_idx"]))
        if [int(x["layer_idx"]) for x in layers] != list(range(len(layers))):
            raise ValueError("layer_idx must number the layers 0, 1, ...")
        kept = {
            "attn": _int_rows(x["kept_kv_groups"] for x in layers),
            "mlp": _int_rows(x["kept_neurons"] for x in layers),
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanMismatch(
            f"plan layers are malformed ({exc!r}); each needs layer_idx, kept_kv_groups, kept_neurons."
        ) from exc
    settings = PlanSettings.from_dict(data["settings"])
    return PruningPlan(str(data["fingerprint"]), dict(data["model"]), settings, kept, dict(data.get("stats", {})),
                       data["schema_version"], "decoder-only")  # fmt: skip


def _decoder_widths(model: dict) -> dict[str, list[int]]:
    kv, inter = model.get("num_kv_heads"), model.get("intermediate")
    if not isinstance(kv, list) or not isinstance(inter, list):
        raise TypeError("num_kv_heads and intermediate must be lists per layer")
    return {"attn": kv, "mlp": inter}


T5_FORMAT = "nirvana-t5-plan"
T5_SETTINGS = ("sparsity", "gamma", "gamma_default", "gamma_given", "scope", "align", "criterion", "calibration",
               "method")  # fmt: skip


def _write_t5(plan: PruningPlan) -> dict:
    s = {**asdict(plan.settings), "scope": plan.settings.allocation}
    settings = {k: s[k] for k in T5_SETTINGS}
    head = {"format": T5_FORMAT, "schema_version": plan.schema_version, "fingerprint": plan.fingerprint}
    return {**head, "model": plan.model, "settings": settings, "kept": plan.kept, "stats": plan.stats}


def _read_t5(data: dict) -> PruningPlan:
    try:
        given = dict(data["settings"])
        unknown = sorted(set(given) - set(T5_SETTINGS))
        if unknown:
            raise PlanMismatch(
                f"T5 plan settings hold unknown keys {', '.join(unknown)}; accepted: {', '.join(T5_SETTINGS)}."
            )
        given["allocation"] = given.pop("scope", "global")
        settings = PlanSettings(**given)
        kept = {kind: _int_rows(rows) for kind, rows in dict(data["kept"]).items()}
        return PruningPlan(
            data["fingerprint"], data["model"], settings, kept, data.get("stats", {}), data["schema_version"], "t5"
        )
    except KeyError as exc:
        raise PlanMismatch(f"the T5 plan is missing {exc.args[0]!r}.") from exc
    except (TypeError, ValueError, InvalidInput) as exc:
        raise PlanMismatch(f"T5 plan settings are invalid: {exc}") from exc


# Each T5 kind's (layer count, units per layer) as keys of the plan's `model` (`t5_shape`).
T5_GRID = {
    "enc_self": ("encoder_layers", "num_heads"),
    "dec_self": ("decoder_layers", "num_heads"),
    "cross": ("decoder_layers", "num_heads"),
    "enc_ffn": ("encoder_layers", "d_ff"),
    "dec_ffn": ("decoder_layers", "d_ff"),
}


def _t5_widths(model: dict) -> dict[str, list[int]]:
    return {kind: [model[width]] * model[layers] for kind, (layers, width) in T5_GRID.items()}


@dataclass(frozen=True)
class PlanFormat:
    """A family's plan file: its JSON `"format"` (None: the first format, which has none), writer and reader, the
    dense units per layer from the plan's `model`, the units' names in messages, the kinds every layer must keep
    one of, and the file's indentation (None: one line)."""

    format: str | None
    write: Callable[[PruningPlan], dict]
    read: Callable[[dict], PruningPlan]
    widths: Callable[[dict], dict[str, list[int]]]
    labels: dict[str, str]
    nonempty: tuple[str, ...]
    indent: int | None


PLAN_FORMATS: dict[str, PlanFormat] = {
    "decoder-only": PlanFormat(None, _write_decoder, _read_decoder, _decoder_widths,
                               {"attn": "KV group", "mlp": "neuron"}, ("attn",), None),
    "t5": PlanFormat(T5_FORMAT, _write_t5, _read_t5, _t5_widths,
                     {k: k for k in FAMILIES["t5"].units}, FAMILIES["t5"].units, 1),
}  # fmt: skip


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
    if allocation not in EVERY_ALLOCATION:
        raise InvalidInput(
            f"allocation must be one of {', '.join(ALLOCATIONS)} (a T5: {', '.join(SCOPES)}), got {allocation!r}."
        )


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
