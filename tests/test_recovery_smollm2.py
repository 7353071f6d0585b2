"""Recovery on the real SmolLM2-135M (slow) and in bf16 on a GPU (cuda)."""

from __future__ import annotations

import pytest
import torch

from nirvana.data.calibration import calibration_batch
from nirvana.measure.perplexity import perplexity
from nirvana.models.shapes import model_shape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.slicing import apply_plan
from nirvana.recovery.config import RecoveryConfig
from nirvana.recovery.train import recover
from nirvana.scoring.criteria import compute_scores
from tests.support import recovery_data


@pytest.mark.slow
def test_short_recovery_of_a_50_percent_model_lowers_wikitext2_perplexity(smollm2):
    tok = smollm2.tokenizer
    batch = calibration_batch(tok, "wikitext2-valid", samples=4, seq_len=64, seed=0)
    scores = compute_scores(smollm2.model, "nirvana", batch, use_cache=False)
    pruned = apply_plan(smollm2.model, allocate(scores, model_shape(smollm2.model), Allocation(0.5)))
    # 4 steps x 4 x 128 = 2,048 tokens (about 30 s on a quiet 2-core CPU); lr 1e-3 so so few steps show.
    config = RecoveryConfig(steps=4, batch_size=4, micro_batch_size=4, lr=1e-3, eval_every=0, eval_sequences=2)
    data = recovery_data(tok, "calibration", seq_len=128, train_sequences=4 * 4, heldout_sequences=2, seed=0)
    assert data.info["dataset"] == "wikitext2:validation"  # trained on validation, measured on test
    result = recover(pruned, data, config)
    assert result.complete and result.heldout_loss[-1][1] < result.heldout_loss[0][1]
    before = perplexity(pruned, tok, "wikitext2", seq_len=512, max_tokens=2048).ppl
    after = perplexity(result.model, tok, "wikitext2", seq_len=512, max_tokens=2048).ppl
    assert after < before * 0.95, (before, after)
    assert model_shape(result.model).intermediate == model_shape(pruned).intermediate


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_bf16_base_with_fp32_adapters_on_cuda():
    from test_recovery import pruned_tiny, tiny_data

    pruned, _ = pruned_tiny("llama")
    pruned = pruned.to("cuda", torch.bfloat16)
    config = RecoveryConfig(r=4, batch_size=4, micro_batch_size=2, seq_len=16, steps=4, lr=1e-2, eval_sequences=2)
    result = recover(pruned, tiny_data(), config, keep_adapter=True)
    assert result.complete and all(torch.isfinite(torch.tensor(v)) for _, v in result.train_loss)
    assert {v.dtype for v in result.adapter_state.values()} == {torch.float32}
    assert {p.dtype for p in result.model.parameters()} == {torch.bfloat16}
    assert {p.device.type for p in result.model.parameters()} == {"cuda"}
    assert result.train_loss[-1][1] < result.train_loss[0][1]
