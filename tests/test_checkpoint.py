"""save_pruned -> load_pruned gives identical tensors and logits; reference format; corrupt dirs."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import random_batch

from nirvana.checkpoints.pruned import load_pruned, save_pruned
from nirvana.errors import CorruptCheckpoint
from nirvana.models.shapes import model_shape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.slicing import apply_plan
from nirvana.scoring.criteria import compute_scores
from tests.tiny import tiny_model


def pruned_tiny(family="qwen2", sparsity=0.5, attn_implementation="eager", **overrides):
    model = tiny_model(family, attn_implementation=attn_implementation, **overrides)
    scores = compute_scores(model, "nirvana", random_batch(vocab=model.config.vocab_size), use_cache=False)
    plan = allocate(scores, model_shape(model), Allocation(sparsity))
    return apply_plan(model, plan), plan


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3_text"])
def test_save_load_round_trip_is_exact(tmp_path, family, smollm2):
    # sdpa, as load_pruned builds by default: eager vs sdpa differ in the last float bits.
    pruned, plan = pruned_tiny(family, vocab_size=len(smollm2.tokenizer), attn_implementation="sdpa")
    save_pruned(pruned, smollm2.tokenizer, plan, tmp_path / "m")
    assert (tmp_path / "m" / "model.safetensors").exists()
    assert not list((tmp_path / "m").glob("*.bin")) and not list((tmp_path / "m").glob("*.pt"))
    loaded = load_pruned(tmp_path / "m")
    original, again = pruned.state_dict(), loaded.model.state_dict()
    assert original.keys() == again.keys()
    for key in original:
        assert torch.equal(original[key], again[key]), key
    ids = random_batch(vocab=100, n=2, t=10).input_ids
    with torch.no_grad():
        assert torch.equal(pruned(ids).logits, loaded.model(ids).logits)
    assert loaded.plan == plan


def test_reference_format_is_read(tmp_path, smollm2):
    """A checkpoint carrying only the authors' keys (modified_head_num, modified_intermediate_dimension)."""
    pruned, plan = pruned_tiny("llama", vocab_size=len(smollm2.tokenizer), attn_implementation="sdpa")
    pruned.save_pretrained(tmp_path)
    smollm2.tokenizer.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    del cfg["nirvana_layer_shapes"]
    assert cfg["pruned"] is True
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    loaded = load_pruned(tmp_path)
    assert model_shape(loaded.model).intermediate == tuple(plan.kept_neurons)
    ids = random_batch(vocab=100, n=2, t=10).input_ids
    with torch.no_grad():
        assert torch.equal(pruned(ids).logits, loaded.model(ids).logits)


def test_missing_and_corrupt_files_are_reported(tmp_path, smollm2):
    pruned, plan = pruned_tiny("llama", vocab_size=len(smollm2.tokenizer))
    save_pruned(pruned, smollm2.tokenizer, plan, tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptCheckpoint, match="unreadable or truncated"):
        load_pruned(tmp_path / "m")
    weights.unlink()
    with pytest.raises(CorruptCheckpoint, match=r"no model\.safetensors"):
        load_pruned(tmp_path / "m")
    weights.write_bytes(data)
    cfg_path = tmp_path / "m" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["nirvana_layer_shapes"][0]["intermediate_size"] += 8
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(CorruptCheckpoint, match="do not match"):
        load_pruned(tmp_path / "m")
