"""Pruning methods in the app: the picker, each method's "how to read it" box and settings, and a
baseline's scores and plans (Allocation, Prune & compare, Sweep).

Everything comes from the table `nirvana.methods.METHODS` (label, colour, `explain`, the typed
config): a method added there appears here with no change. A baseline's scores are computed once
per model + calibration batch + the settings that change them (`MethodConfig.score_key`), under a
status box with progress, through the pipeline's `score` (the library's disk cache) and the shared
`Memo`; its plans at each sparsity come from those cached scores (`method_plan`, milliseconds),
so a slider move never recomputes them. Bad settings (an LLM-Pruner layer range outside the model,
FLAP on a model whose o_proj has a bias, a sparsity the method cannot reach) are the library's
`InvalidInput`, shown as an error box by `ui.errors.guard`.

A rotating method (SliceGPT) has no unit scores: its plan at a sparsity is a kept hidden width
(arithmetic, `rotation_plan_for`), and what it costs is read from the dense model's PCA spectra
(`spectra_for`: one forward pass, layer by layer, cached in the memo and on disk).
"""

from __future__ import annotations

import json
from dataclasses import fields

import streamlit as st

from nirvana.errors import InvalidInput
from nirvana.methods import DEFAULT_METHOD, METHODS, method_config
from nirvana.methods.run import check_method, data_plan, method_plan
from nirvana.methods.slicegpt.spectrum import Spectra, dense_spectra
from nirvana.models.shapes import ModelShape
from nirvana.pipeline import PruneSettings, score
from nirvana.progress import sub_progress
from nirvana.scoring.scores import Scores, score_cache_path
from nirvana.store.keys import content_key
from ui import resources, state
from ui.errors import guard
from ui.progress import progress_status

DEFAULT = DEFAULT_METHOD  # the paper's method: the pages' default, planned by the Allocation page's sliders


def label(name: str) -> str:
    return METHODS[name].label


def rotates(name: str) -> bool:
    """A method that rotates the model on calibration data when it prunes (no unit scores: SliceGPT)."""
    return METHODS[name].rotates


def on_data(name: str) -> bool:
    """A method without unit scores: it plans and prunes on the calibration batch (SliceGPT, Tyr)."""
    return not METHODS[name].has_unit_scores


def searches(name: str) -> bool:
    """A method whose plan is a search on calibration data (Tyr): minutes, so it is planned only when pruned, and
    the Allocation page draws the plans this session searched."""
    return on_data(name) and not rotates(name)


def searched_key(name: str, settings: dict) -> str:
    return f"{name}:{json.dumps(settings, sort_keys=True)}"


def searched_plans(name: str, settings: dict) -> dict:
    """{sparsity (2 decimals): plan} this session's prunes with `name` and `settings` searched."""
    return (state.session.searched or {}).get(searched_key(name, settings), {})


def has_sliders(name: str) -> bool:
    """A method planned by the Allocation page's sliders (sparsity, γ, align: `Method.has_allocation_settings`,
    NIRVANA); the others are planned where they are chosen, with their settings box."""
    return name in METHODS and METHODS[name].has_allocation_settings


def baselines() -> list[str]:
    """The methods other than NIRVANA (the ones drawn beside its plan)."""
    return [name for name in METHODS if not has_sliders(name)]


def settings_key(name: str) -> str:
    """One settings box per method, shared by every page (the same key keeps the same JSON)."""
    return f"method_settings_{name}"


# "How to read it": two sentences per method on what it does differently from NIRVANA (a row added to METHODS gets
# its entry here: tests/test_app_methods.py checks that every row has one).
EXPLAIN = {
    "nirvana": (
        "The reference the other methods are read against: each unit's score is how much the model's output "
        "(its max logits, no labels) moves when the unit's weights go, |dF/dW * W|. KV groups and neurons are ranked "
        "across all layers at once and split by gamma, so how much each layer loses follows from the scores."
    ),
    "llm-pruner": (
        "It scores each KV group and neuron by the first-order Taylor change of the language-model loss (it uses "
        "the labels), where NIRVANA uses the model's output without labels. It removes the same fraction from every "
        "layer of its range and never touches the first and last layers, where NIRVANA ranks all layers together and "
        "lets each layer's width follow from the scores."
    ),
    "flap": (
        "It needs no backward pass: a channel's score is how much its input varies over the calibration tokens "
        "times its weights' squared norm, standardized per layer and module so heads and neurons of every layer share "
        "one ranking (NIRVANA ranks gradient saliencies, split by gamma). After slicing it adds the removed channels' "
        "mean output as a bias of o_proj and down_proj, so each layer's average output is kept; NIRVANA compensates "
        "nothing."
    ),
    "slicegpt": (
        "It prunes the other axis: every weight matrix loses columns or rows along the hidden dimension, after "
        "the residual stream is rotated into the basis of its principal components, while NIRVANA removes whole KV "
        "groups and neurons. The rotation comes first because the hidden dimensions of a trained model all carry "
        "signal (slicing them unrotated destroys it); after the PCA rotation the trailing dimensions carry the least "
        "variance."
    ),
    "tyr": (
        "It chooses how much each layer loses by search, not by one ranking: every layer's o_proj and down_proj is "
        "pruned at several sparsities, each pruned copy's kept weights re-solved by least squares so the module's "
        "output on calibration text changes as little as possible, and an evolutionary search then picks one level "
        "per layer by how close the whole model's next-token distribution stays to the dense model's (KL). NIRVANA "
        "ranks all units once by a saliency and does not change the weights it keeps."
    ),
}


def how_to_read(names, where=None) -> None:
    """The "how to read it" box of each method: what it does differently from NIRVANA (`EXPLAIN`)."""
    where = where or st
    for name in names:
        where.info(f"**How to read {METHODS[name].label}.** {EXPLAIN[name]}", icon=":material/menu_book:")


def boxes(chosen) -> dict[str, dict]:
    """Side by side, each chosen method's "how to read it" box and settings; {name: settings} of the valid ones."""
    out = {}
    for name, col in zip(chosen, st.columns(len(chosen)) if chosen else []):
        how_to_read([name], col)
        given = settings_input(name, col)
        if given is not None:
            out[name] = given
    return out


def settings_input(name: str, where=None) -> dict | None:
    """The method's settings as a JSON object (a text box; `{}` = its defaults), validated by its config.

    None, with an error box saying what was wrong and what is accepted, when the text is not a valid
    setting of the method. A method without settings (NIRVANA's are the page's sliders) gets `{}`.
    """
    where = where or st
    names = [f.name for f in fields(METHODS[name].config)]
    if not names:
        return {}
    key = settings_key(name)
    st.session_state.setdefault(key, "{}")
    defaults = json.dumps(METHODS[name].config().to_dict())
    text = where.text_input(
        f"{label(name)} settings (JSON)",
        key=key,
        help=f"A JSON object; {{}} keeps the defaults {defaults}. Keys: {', '.join(names)} (docs/BASELINES.md).",
    )
    with guard(f"reading the {label(name)} settings") as g:
        data = parse_settings(name, text)
    return None if g.failed else data


def parse_settings(name: str, text: str) -> dict:
    """The JSON text of a settings box, checked by the method's config (`InvalidInput` otherwise)."""
    try:
        data = json.loads(text.strip() or "{}")
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"the {label(name)} settings are not JSON ({exc.msg} at character {exc.pos}); write an object such as "
            f'{{"{fields(METHODS[name].config)[0].name}": ...}}, or {{}} for the defaults.'
        ) from None
    method_config(name, data)  # a wrong key or value: InvalidInput naming what is accepted
    return data


def check(lm, name: str, settings: dict, sparsity: float) -> None:
    """What the library refuses before any scoring (`InvalidInput`): the settings on this model, the target."""
    check_method(lm.model, name, method_config(name, settings), sparsity)


def calibration_batch(lm):
    """The batch the session's saliency was computed on (so every method sees the same data), else the
    Saliency page's defaults (WikiText-2 validation, the CPU-sized N x T, seed 0)."""
    batch = state.session.calib_batch
    if batch is not None:
        return batch
    d = state.default_calibration()
    return resources.calibration(
        lm.tokenizer, state.spec().key, "wikitext2-valid", d["samples"], d["seq_len"], d["seed"]
    )


def _scores_key(name: str, settings: dict, batch) -> str:
    """Model, method, the settings that change its scores, batch content: what the scores depend on."""
    return content_key("method-scores", state.spec().key, name, method_config(name, settings).score_key(), batch.hash)


def scores_for(lm, name: str, settings: dict, batch, progress=None):
    """(key, scores) of baseline `name` on `batch`: the pipeline's `score` through the shared memo and the
    library's disk cache, one job per device. Refuses bad settings before any scoring (`InvalidInput`)."""
    key = _scores_key(name, settings, batch)
    micro_batch = max(1, batch.shape[0] // 4)  # progress (and a chance to cancel) every quarter

    def compute():
        prune_settings = PruneSettings(sparsity=0.0, method=name, method_settings=settings, micro_batch=micro_batch)
        with resources.hold_device(lm.model, progress):
            return score(lm, prune_settings, progress, batch=batch)[0]

    return key, resources.memo("scores").get_or_compute(key, compute)


def cached_scores(name: str, settings: dict, batch):
    """(key, scores) when they are already in the memo (no work), else None."""
    key = _scores_key(name, settings, batch)
    found = resources.memo("scores").get(key)
    return None if found is None else (key, found)


def score_methods(lm, chosen: dict[str, dict], title: str) -> dict[str, tuple[str, object]]:
    """{name: (key, scores)} of the chosen baselines `{name: settings}`; the ones not cached yet are
    computed under one status box with progress and a Cancel button. A method that fails shows its
    error and is left out; the others are still returned."""
    batch = calibration_batch(lm)
    out, todo = {}, []
    for name, settings in chosen.items():
        if on_data(name):  # no unit scores: `spectra_for` and `rotation_plan_for`, or a searched plan
            continue
        with guard(f"checking the {label(name)} settings") as g:
            # cached scores serve every setting that does not change them (a layer range): check each one anyway
            check(lm, name, settings, 0.0)
            found = cached_scores(name, settings, batch)
        if g.failed:
            continue
        if found is not None:
            out[name] = found
        else:
            todo.append(name)
    if not todo:
        return out
    names = ", ".join(label(n) for n in todo)
    with progress_status(f"{title}: scoring {names} on {batch.shape[0]}×{batch.shape[1]} tokens") as progress:
        for i, name in enumerate(todo):
            step = sub_progress(progress, i / len(todo), (i + 1) / len(todo), f"{label(name)}: ")
            with guard(f"scoring with {label(name)}") as g:
                result = scores_for(lm, name, chosen[name], batch, step)
            if not g.failed:
                out[name] = result
    return out


def plan_scores(plan):
    """The scores a baseline plan was made from, when its compensation needs them (FLAP's biases) and the
    library's disk cache still holds them (a plan reopened from a past run); else None."""
    name = plan.settings.method
    if name not in METHODS or not METHODS[name].applies_from_scores:
        return None
    config = method_config(name, plan.settings.method_settings)
    calibration_hash = (plan.settings.calibration or {}).get("hash")
    path = score_cache_path(plan.fingerprint, name, calibration_hash, config.score_key())
    return Scores.load(path) if path.with_suffix(".json").exists() else None


@st.cache_data(max_entries=512, show_spinner=False)
def plan_for(_scores, scores_key: str, shape: dict, name: str, settings_json: str, sparsity: float):
    """`method_plan` (pure tensor work) cached by scores, settings and sparsity; `InvalidInput` when the method
    cannot reach `sparsity` (errors are not cached)."""
    config = method_config(name, json.loads(settings_json))
    return method_plan(_scores, ModelShape.from_dict(shape), sparsity, name, config)


def plan(entry: tuple[str, object], shape: ModelShape, name: str, settings: dict, sparsity: float):
    key, scores = entry
    return plan_for(scores, key, shape.to_dict(), name, json.dumps(settings, sort_keys=True), float(sparsity))


def spectra_for(lm, name: str, settings: dict, title: str) -> Spectra | None:
    """The dense model's PCA spectra for rotating method `name` on the session's calibration batch: from the
    memo, else computed (forward only, layer by layer) under a status box with progress; None on an error."""
    config = method_config(name, settings)
    batch = calibration_batch(lm)
    key = content_key("spectra", state.spec().key, batch.hash, config.damp)
    found = resources.memo("spectra").get(key)
    if found is not None:
        return found
    with guard(f"checking {label(name)} on this model") as g:
        check(lm, name, settings, 0.0)  # a family the rotation cannot handle says so before any work
    if g.failed:
        return None
    micro_batch = max(1, batch.shape[0] // 4)
    title = f"{title}: {label(name)}'s PCA of every layer on {batch.shape[0]}×{batch.shape[1]} tokens"

    def compute(progress):
        with resources.hold_device(lm.model, progress):
            return dense_spectra(lm.model, batch, config, micro_batch=micro_batch, progress=progress)

    with progress_status(title) as progress, guard(f"computing {label(name)}'s PCA spectra") as g:
        spectra = resources.memo("spectra").get_or_compute(key, lambda: compute(progress))
    return None if g.failed else spectra


@st.cache_data(max_entries=256, show_spinner=False)
def _rotation_plan(_model, model_key: str, name: str, settings_json: str, sparsity: float):
    return data_plan(_model, name, method_config(name, json.loads(settings_json)), sparsity, None)


def rotation_plan_for(lm, name: str, settings: dict, sparsity: float):
    """A rotating method's plan at `sparsity` (its kept hidden width: arithmetic, no data), cached by content;
    `InvalidInput` when the width cannot reach it."""
    return _rotation_plan(lm.model, state.spec().key, name, json.dumps(settings, sort_keys=True), float(sparsity))


def plan_batch(lm, plan):
    """The calibration batch a rotating method's plan was made on (rebuilt from its record), else None."""
    if not rotates(plan.settings.method):
        return None
    c = plan.settings.calibration or {}
    if not all(k in c for k in ("source", "samples", "seq_len", "seed")):
        raise InvalidInput(
            f"this {label(plan.settings.method)} plan does not record its calibration batch, which the rotation needs; "
            "prune again with the method on this page."
        )
    return resources.calibration(lm.tokenizer, state.spec().key, c["source"], c["samples"], c["seq_len"], c["seed"])
