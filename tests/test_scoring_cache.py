"""One scoring cache (`nirvana.scoring.scores.cached_scores`) behind NIRVANA's criteria, the baselines and T5.

The cache file names below were computed by the code before the three copies were merged: a score file
written then is still found now. (They hold the model fingerprint, which hashes the config and weights: a
transformers or torch upgrade that changed the tiny models would change them, and invalidate old caches too.)
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from nirvana.errors import OutOfMemory
from nirvana.guard import memory
from nirvana.methods import METHODS, method_config
from nirvana.methods.run import method_scores
from nirvana.scoring.criteria import CRITERIA, compute_scores
from nirvana.scoring.scores import Scores, cached_scores
from nirvana.store.paths import cache_dir
from nirvana.t5 import scoring as t5_scoring
from nirvana.t5.scoring import compute_t5_scores
from tests.conftest import random_batch
from tests.tiny import tiny_model
from tests.tiny_t5 import tiny_t5

LLAMA = "be9df43bca873bdf"  # model_fingerprint(tiny_model("llama"))
T5 = "9373234d413b960d"  # model_fingerprint(tiny_t5("relu"))


def _fail(*args, **kwargs):
    pytest.fail("the scorer ran on a cache hit")


def _stored_meta(name: str) -> list[str]:
    path = cache_dir() / "scores" / f"{name}.json"
    assert path.exists() and path.with_suffix(".safetensors").exists(), sorted((cache_dir() / "scores").iterdir())
    return list(json.loads(path.read_text())["meta"])


def test_a_criterion_keeps_its_cache_key_and_a_second_call_is_a_hit(monkeypatch):
    model, batch = tiny_model("llama"), random_batch()
    first = compute_scores(model, "nirvana", batch)
    assert _stored_meta(f"nirvana-{LLAMA}-ebe8ac0e4a993ba42676") == [
        "seconds", "cache_hit", "seed", "micro_batch", "activation_checkpointing", "method",
    ]  # fmt: skip
    assert not first.meta["cache_hit"] and first.fingerprint == LLAMA
    monkeypatch.setitem(CRITERIA, "nirvana", dataclasses.replace(CRITERIA["nirvana"], score=_fail))
    again = compute_scores(model, "nirvana", batch)
    assert again.meta["cache_hit"] and again.meta["micro_batch"] == first.meta["micro_batch"]
    assert again.attn.equal(first.attn) and again.mlp.equal(first.mlp)


def test_a_baseline_keeps_its_cache_key_and_a_second_call_is_a_hit(monkeypatch):
    model, batch, config = tiny_model("llama"), random_batch(), method_config("flap")
    first = method_scores(model, "flap", config, batch)
    meta = ["seconds", "cache_hit", "method_settings", "micro_batch"]
    assert _stored_meta(f"flap-{LLAMA}-0117171143803b45b603") == meta
    assert not first.meta["cache_hit"] and set(first.extra) == {"attn_mean_inp", "mlp_mean_inp"}
    monkeypatch.setitem(METHODS, "flap", dataclasses.replace(METHODS["flap"], scorer=_fail))
    again = method_scores(model, "flap", config, batch)
    assert again.meta["cache_hit"] and again.mlp.equal(first.mlp)
    assert again.extra["mlp_mean_inp"].equal(first.extra["mlp_mean_inp"])


def test_a_t5_criterion_keeps_its_cache_key_and_a_second_call_is_a_hit(monkeypatch):
    model, batch = tiny_t5("relu"), random_batch()
    first = compute_t5_scores(model, "nirvana", batch)
    assert _stored_meta(f"t5-nirvana-{T5}-aa868b4e4ea7174432cd") == ["seconds", "seed"]
    assert set(first.meta) == {"seconds", "seed"}  # a fresh T5 score records no cache_hit, as before
    monkeypatch.setattr(t5_scoring, "t5_scores", _fail)
    again = compute_t5_scores(model, "nirvana", batch)
    assert again.meta["cache_hit"] and again.family == "t5"
    assert all(again.units[k].equal(first.units[k]) for k in first.units)
    monkeypatch.undo()
    compute_t5_scores(model, "random", seed=3)
    assert (cache_dir() / "scores" / f"t5-random-{T5}-6b138825098d7b019e44.json").exists()  # the seed in the key


def test_a_t5_scoring_that_cannot_fit_is_refused_before_computing(monkeypatch):
    """T5's planned peak is checked like the decoder-only path's: refused before any forward, with a micro-batch
    that would fit; nothing is written. The data-free criteria run no pass and are not checked (as decoder-only)."""
    model, batch = tiny_t5("relu"), random_batch()
    n, t = batch.input_ids.shape
    plan = {mb: memory.estimate_t5_scoring(model.config, samples=n, seq_len=t, micro_batch=mb).total for mb in (2, 4)}
    assert plan[2] < plan[4]
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": int((plan[2] + plan[4]) / 2 / 0.9))
    monkeypatch.setattr(model, "forward", lambda *a, **k: pytest.fail("ran a forward pass"))
    monkeypatch.setattr(t5_scoring, "t5_scores", lambda *a, **k: pytest.fail("scored"))
    with pytest.raises(OutOfMemory, match=r"scoring needs about .*GiB") as info:
        compute_t5_scores(model, "taylor", batch)
    assert "A micro-batch of 2 would fit" in str(info.value)
    assert not list((cache_dir() / "scores").glob("*.json"))
    monkeypatch.undo()
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 1000)
    assert compute_t5_scores(model, "magnitude").criterion == "magnitude"


def test_the_t5_estimate_counts_every_parameters_gradient_and_grows_with_the_micro_batch():
    for ff in ("relu", "gated-gelu"):
        model = tiny_t5(ff)
        est = memory.estimate_t5_scoring(model.config, samples=8, seq_len=16, micro_batch=2)
        assert est.components["weight grads (all parameters)"] == 4 * sum(p.numel() for p in model.parameters())
        whole = memory.estimate_t5_scoring(model.config, samples=8, seq_len=16)
        assert whole.components["logits"] == 4 * est.components["logits"] == 8 * 8 * 64 * (4 + 12)


def test_cached_scores_plans_only_on_a_miss_and_names_the_step_in_an_oom(monkeypatch):
    model = tiny_model("llama")
    calls = []

    def plan():
        calls.append("plan")
        return 7

    def score(fingerprint, planned):
        calls.append(("score", planned))
        attn, mlp = torch.ones(2, 2), torch.ones(2, 3)
        return Scores({"attn": attn, "mlp": mlp}, "probe", fingerprint, None, {"cache_hit": False, "planned": planned})

    first = cached_scores(model, "probe", None, {"k": 1}, score, memory=plan)
    assert calls == ["plan", ("score", 7)] and list(first.meta) == ["seconds", "cache_hit", "planned"]
    assert cached_scores(model, "probe", None, {"k": 1}, score, memory=plan).meta["cache_hit"]
    assert len(calls) == 2  # the hit neither plans nor scores
    assert not cached_scores(model, "probe", None, {"k": 2}, score, memory=plan).meta["cache_hit"]  # another key

    def oom(fingerprint, planned):
        raise MemoryError()

    with pytest.raises(OutOfMemory, match=r"scoring \(my label\) ran out of cpu memory"):
        cached_scores(model, "probe", None, {"k": 3}, oom, label="my label", use_cache=False)
    assert not model.training  # restored (tiny models are built in eval mode)
