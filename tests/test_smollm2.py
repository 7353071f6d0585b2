"""Integration on the real SmolLM2-135M: facts, prune end to end through the CLI, reload, generate."""

from __future__ import annotations

import json

import pytest
import torch

from nirvana.checkpoints.facts import describe
from nirvana.checkpoints.pruned import load_pruned
from nirvana.cli import main
from nirvana.models.shapes import model_shape

pytestmark = pytest.mark.slow


def test_smollm2_architecture_facts(smollm2):
    facts = describe(smollm2)
    assert (facts["layers"], facts["query_heads"], facts["kv_heads"], facts["head_dim"]) == (30, 9, 3, 64)
    assert facts["intermediate_size"] == 1536 and facts["hidden_size"] == 576
    assert facts["parameters"] == 134_515_008  # 134.5M, tied embeddings counted once
    assert facts["default_gamma"] == 2.25


def test_prune_cli_end_to_end(tmp_path, capsys, smollm2, smollm2_dir):
    out = tmp_path / "p50"
    code = main(
        [
            "prune",
            "--model",
            str(smollm2_dir),
            "--sparsity",
            "0.5",
            "--samples",
            "4",
            "--seq-len",
            "64",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    assert report["params_after"] < report["params_before"] == 134_515_008
    assert 0.49 <= report["achieved_block_sparsity"] <= 0.51
    assert all(n % 8 == 0 for n in report["kept_neurons"]) and all(k >= 1 for k in report["kept_kv_groups"])
    assert report["block_params_after"] < report["block_params_before"]
    assert set(report["timings"]) >= {"load", "score", "plan", "slice"}
    dense_bytes = (smollm2_dir / "model.safetensors").stat().st_size
    pruned_bytes = (out / "model" / "model.safetensors").stat().st_size
    assert pruned_bytes < 0.75 * dense_bytes

    loaded = load_pruned(out)
    assert model_shape(loaded.model).intermediate == tuple(report["kept_neurons"])
    assert json.loads((out / "plan.json").read_text())["fingerprint"] == loaded.plan.fingerprint
    capsys.readouterr()
    assert main(["generate", "--model", str(out), "--prompt", "The capital of France is", "--max-new-tokens", "8"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("The capital of France is") and len(text.strip()) > len("The capital of France is")


def test_pruned_model_reload_gives_identical_logits(tmp_path, smollm2):
    from nirvana.checkpoints.pruned import save_pruned
    from nirvana.data.calibration import calibration_batch
    from nirvana.pruning.allocation import Allocation, allocate
    from nirvana.pruning.slicing import apply_plan
    from nirvana.scoring.criteria import compute_scores

    batch = calibration_batch(smollm2.tokenizer, "wikitext2-valid", samples=4, seq_len=64, seed=0)
    scores = compute_scores(smollm2.model, "nirvana", batch)
    plan = allocate(scores, model_shape(smollm2.model), Allocation(0.2))
    assert abs(plan.stats["achieved_block_sparsity"] - 0.2) <= 0.01
    pruned = apply_plan(smollm2.model, plan)
    save_pruned(pruned, smollm2.tokenizer, plan, tmp_path / "m")
    loaded = load_pruned(tmp_path / "m")
    ids = batch.input_ids[:2]
    with torch.no_grad():
        assert torch.equal(pruned(ids).logits, loaded.model(ids).logits)


def test_info_cli_and_unknown_model(capsys, persistent_cache):
    assert main(["info", "--model", "smollm2-135m", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["layers"] == 30 and facts["model_load_seconds"] > 0
    assert main(["info", "--model", "no/such-model"]) == 2
    err = capsys.readouterr().err
    assert "ModelNotFound" in err and "smollm2-135m" in err and "Traceback" not in err
