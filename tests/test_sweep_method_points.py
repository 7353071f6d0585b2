"""The sweep with a baseline method (nirvana.search.sweep, SweepSettings.method): each point is that
method's allocation and compensation from its cached scores, the same model the pipeline's `prune` makes."""

from __future__ import annotations

import pytest
from conftest import random_batch

from nirvana.checkpoints.loaded import LoadedModel
from nirvana.measure.kl import DenseReference, kl_to_dense
from nirvana.methods import method_config
from nirvana.methods.run import method_scores
from nirvana.pipeline import PruneSettings, prune
from nirvana.pruning.allocation import Allocation
from nirvana.search.calibration import AnchorSpec, anchor_batch
from nirvana.search.sweep import SweepSettings, run_sweep, sweep_points
from tests.tiny import tiny_model


@pytest.fixture
def lm(tiny_with_tokenizer_dir):
    from transformers import AutoTokenizer

    model = tiny_model("llama", vocab_size=49152, num_hidden_layers=4)
    return LoadedModel(model, AutoTokenizer.from_pretrained(tiny_with_tokenizer_dir), "tiny4", "local", 0.0)


def test_a_flap_sweep_point_is_the_model_prune_makes_biases_included(lm):
    scores = method_scores(lm.model, "flap", method_config("flap"), random_batch(vocab=49152, n=4, t=16))
    settings = SweepSettings(
        sparsities=(0.2, 0.4),
        gammas=(1.0, 2.0),  # gamma is NIRVANA's: no gamma points for a baseline
        allocation=Allocation(0.2),
        metric="kl",
        anchor_samples=2,
        anchor_len=16,
        speed=False,
        method="flap",
    )
    assert [axis for axis, _ in sweep_points(settings)] == ["dense", "sparsity", "sparsity"]
    rows = run_sweep(lm, scores, settings)
    want = [("dense", 0.0, None), ("flap", 0.2, None), ("flap", 0.4, None)]
    assert [(r["method"], r["sparsity"], r["gamma"]) for r in rows] == want
    anchor = anchor_batch(lm.tokenizer, AnchorSpec(samples=2, seq_len=16))
    reference = DenseReference(lm.model, anchor.input_ids)
    for row in rows[1:]:
        result = prune(lm, PruneSettings(sparsity=row["sparsity"], method="flap"), scores=scores)
        assert row["achieved_block_sparsity"] == result.plan.stats["achieved_block_sparsity"]
        assert row["quality"] == pytest.approx(kl_to_dense(result.model, reference), rel=1e-5)
    no_bias = prune(lm, PruneSettings(sparsity=0.4, method="flap", method_settings={"bias": False}), scores=scores)
    assert rows[-1]["quality"] != pytest.approx(kl_to_dense(no_bias.model, reference), rel=1e-3)  # the biases count
    second = run_sweep(lm, scores, SweepSettings(**{**settings.__dict__, "dense": False}))
    assert [r["sparsity"] for r in second] == [0.2, 0.4]
