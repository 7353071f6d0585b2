"""Which pruning method a benchmark's pruned rows use (`--method`, `--method-settings`), and its cells.

Every benchmark prunes with NIRVANA unless told otherwise. With a baseline method (LLM-Pruner,
FLAP: `nirvana.methods.METHODS`) its pruned models come from that method's scores, allocation
and compensation (`nirvana.methods.run`) on the same calibration batch, and every row records
`method` and `method_settings` (the validated config as canonical JSON: sorted keys, defaults
filled in, so `{}` and the spelled-out defaults are one key). Rows written before these columns
existed have them empty and read as NIRVANA's (`nirvana.bench.rows.KEY_DEFAULTS`), so a resumed
run neither repeats nor drops them. A benchmark whose axis only NIRVANA has (gamma) refuses a
baseline with `nirvana_only`.

    choice = MethodChoice.of("flap", {"metric": "WIFV"})
    source = choice.source(lm, choice.scoring(), batch)     # FLAP's scores, cached like any scoring
    plan, pruned = choice.slice(lm.model, source, 0.2)      # FLAP's allocation + its biases

A rotating method (SliceGPT) has no unit scores: its source is the calibration batch itself, and
`slice` rotates on it afresh at each sparsity (one forward pass, layer by layer), so every
benchmark's grid runs it the way the sweep does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch.nn as nn

from nirvana.data.calibration import CalibrationBatch
from nirvana.errors import InvalidInput
from nirvana.methods import get_method, is_baseline, method_config
from nirvana.methods.base import MethodConfig
from nirvana.models.shapes import ModelShape, model_shape
from nirvana.pipeline import PruneSettings, calibration_for, score
from nirvana.scoring.criteria import DEFAULT_CRITERION
from nirvana.scoring.scores import Scores

Source = Scores | CalibrationBatch  # what `MethodChoice.slice` prunes from

METHOD_COLUMNS = ("method", "method_settings")


def settings_json(method: str, settings: dict | None = None) -> str:
    """The method's validated settings as canonical JSON: the CSV cell and the key part."""
    return json.dumps(method_config(method, settings).recorded(), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class MethodChoice:
    """A method and its settings as plain values (a job field; `of` validates them)."""

    method: str = "nirvana"
    settings: str = "{}"  # canonical JSON (`settings_json`)

    @classmethod
    def of(cls, method: str = "nirvana", settings: dict | None = None) -> MethodChoice:
        """Validate `method` and its `settings` (`InvalidInput` listing what is accepted)."""
        return cls(method, settings_json(method, settings))

    @property
    def has_allocation_settings(self) -> bool:
        """Its pruned rows vary criterion, gamma and allocation (NIRVANA's own settings); a baseline's do not."""
        return get_method(self.method).has_allocation_settings

    @property
    def on_data(self) -> bool:
        """A method without unit scores: it plans on the calibration batch (SliceGPT's widths, Tyr's search)."""
        return not get_method(self.method).has_unit_scores

    @property
    def config(self) -> MethodConfig:
        return method_config(self.method, json.loads(self.settings))

    @property
    def label(self) -> str:
        return get_method(self.method).label

    def cells(self) -> dict:
        """The row's `method` and `method_settings` cells."""
        return {"method": self.method, "method_settings": self.settings}

    def prune_settings(
        self,
        sparsity: float = 0.0,
        *,
        criterion: str = DEFAULT_CRITERION,
        gamma: float | None = None,
        align: int = 8,
        allocation: str = "global",
        **calibration,
    ) -> PruneSettings:
        """`PruneSettings` of this method at `sparsity`: the criterion and allocation of a method that has them
        (NIRVANA), otherwise the method's own settings; `calibration`: samples, seq_len, seed, micro_batch..."""
        own = {}
        if self.has_allocation_settings:
            own = {"criterion": criterion, "gamma": gamma, "align": align, "allocation": allocation}
        settings = json.loads(self.settings) or None
        return PruneSettings(sparsity=sparsity, method=self.method, method_settings=settings, **own, **calibration)

    def scoring(self, criterion: str = DEFAULT_CRITERION, **settings) -> PruneSettings:
        """Settings for `score` alone: NIRVANA with `criterion`, or this baseline (its criterion is its own)."""
        return self.prune_settings(0.0, criterion=criterion, **settings)

    def source(self, lm, settings: PruneSettings, batch: CalibrationBatch | None = None, progress=None) -> Source:
        """What `slice` prunes from: the unit scores of `settings` on `batch` (disk cache), or for a rotating
        method without unit scores the calibration batch itself (`batch`, or the one `settings` draws)."""
        if self.on_data:
            return batch if batch is not None else calibration_for(lm, settings, progress)[0]
        return score(lm, settings, progress, batch=batch)[0]

    def check(self, model: nn.Module, sparsity: float) -> None:
        """The method's model-dependent refusals (target, layer range, existing biases) before scoring."""
        get_method(self.method).check_config(model, model_shape(model), sparsity, self.config)

    def slice(
        self, model: nn.Module, source: Source, sparsity: float, shape: ModelShape | None = None, **allocation
    ) -> tuple:
        """(plan, pruned copy) at `sparsity`: NIRVANA's allocation (`allocation`: gamma, align, allocation; default
        gamma*, align 8, global), the baseline's own allocation and compensation (FLAP's biases), or a rotation on
        the batch (SliceGPT)."""
        method, config = get_method(self.method), self.prune_settings(sparsity, **allocation).config
        if not method.has_unit_scores:
            plan = method.plan_on_data(model, sparsity, config, source)
            return plan, method.apply(model, plan, batch=source)
        plan = method.allocate(source, shape or model_shape(model), sparsity, config)
        return plan, method.apply(model, plan, scores=source)

    def gamma_cell(self, plan) -> float | str:
        """The row's gamma: the plan's (rounded) where the method allocates by gamma, else empty."""
        return round(plan.settings.gamma, 4) if self.has_allocation_settings else ""


def nirvana_only(bench: str, what: str, method: str) -> None:
    """Refuse a baseline for a benchmark whose axis only NIRVANA has (the message says what to run)."""
    if not get_method(method).has_allocation_settings:  # an unknown name gets the list of methods first
        raise InvalidInput(
            f"the {bench} benchmark measures {what}, which only NIRVANA has; method {method!r} has no such axis. "
            "Drop --method (NIRVANA), or compare methods with `python -m nirvana bench baselines`."
        )


def method_stem(stem: str, method: str) -> str:
    """A benchmark's output name: the default method's committed files keep `stem`; a baseline's add its name."""
    return f"{stem}-{method}" if is_baseline(method) else stem


NIRVANA = MethodChoice()  # the default of every benchmark's jobs
