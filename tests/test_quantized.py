"""Scoring bitsandbytes 8-bit and 4-bit models on CPU through the hook path (weights take no gradient)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from nirvana.errors import InvalidInput
from nirvana.models.architectures import layer_projections
from nirvana.models.weights import dense_weight
from nirvana.scoring.criteria import compute_scores, gradient_saliency, nirvana_objective
from nirvana.scoring.hooks import hook_saliency, resolve_method
from tests.conftest import random_batch
from tests.tiny import tiny_model

pytest.importorskip("bitsandbytes")

# bitsandbytes' CPU 4-bit repacking needs rows and blocks of 32/64: a slightly wider tiny model.
WIDE = dict(hidden_size=128, intermediate_size=128, head_dim=32)


@pytest.fixture(scope="module")
def fp32_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-fp32")
    model = tiny_model("qwen2", **WIDE)  # q/k/v biases: the bias terms are exercised too
    model.save_pretrained(path)
    return path, model


def _load(path, quantization: str):
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    config = {
        "8bit": BitsAndBytesConfig(load_in_8bit=True),
        "4bit": BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float32),
    }[quantization]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(path, quantization_config=config, device_map="cpu")
    return model.eval()


def _dequantized_twin(fp32_model, quantized):
    """The fp32 model with every block weight replaced by the quantized model's de-quantized weight."""
    twin = copy.deepcopy(fp32_model)
    for p_twin, p_q in zip(layer_projections(twin), layer_projections(quantized)):
        for lin_twin, lin_q in zip(p_twin.named_linears().values(), p_q.named_linears().values()):
            with torch.no_grad():
                lin_twin.weight.copy_(dense_weight(lin_q))
    return twin


def test_4bit_hooks_equal_autograd_on_the_dequantized_weights(fp32_dir):
    """4-bit layers compute in fp32 on the de-quantized W, so the hook result is exact."""
    path, fp32_model = fp32_dir
    q4 = _load(path, "4bit")
    ids = random_batch(n=4, t=16).input_ids
    expected = gradient_saliency(_dequantized_twin(fp32_model, q4), ids, nirvana_objective)
    actual = hook_saliency(q4, ids, nirvana_objective)
    for got, want in zip(actual, expected):
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-6)


def test_8bit_scoring_runs_and_tracks_fp32(fp32_dir):
    """LLM.int8 casts activations to fp16 inside the matmul: close to the fp32 scores, not equal."""
    path, fp32_model = fp32_dir
    q8 = _load(path, "8bit")
    assert type(layer_projections(q8)[0].q_proj).__name__ == "Linear8bitLt"
    assert resolve_method(q8) == "hooks"
    batch = random_batch(n=4, t=16)
    scores = compute_scores(q8, "nirvana", batch)
    assert scores.meta["method"] == "hooks"
    reference = compute_scores(fp32_model, "nirvana", batch)
    for got, want in ((scores.attn, reference.attn), (scores.mlp, reference.mlp)):
        assert torch.isfinite(got).all() and (got > 0).all()
        cos = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0)
        assert cos > 0.99, cos
    # magnitude reads de-quantized weights too (int8 codes would rank rows by their scale, not size)
    mag = compute_scores(q8, "magnitude")
    mag_ref = compute_scores(_dequantized_twin(fp32_model, q8), "magnitude")
    torch.testing.assert_close(mag.mlp, mag_ref.mlp, rtol=1e-5, atol=1e-5)
    with pytest.raises(InvalidInput, match="hooks"):
        compute_scores(q8, "nirvana", batch, method="autograd")


def test_repacked_4bit_model_is_refused_not_silently_wrong(fp32_dir):
    path, _ = fp32_dir
    q4 = _load(path, "4bit")
    ids = random_batch(n=2, t=8).input_ids
    with torch.no_grad():
        q4(ids)  # no-grad CPU inference repacks 4-bit weights (when the CPU has AVX512-BF16)
    repacked = getattr(layer_projections(q4)[0].q_proj.weight.quant_state, "packing_format_for_cpu", False)
    if not repacked:
        pytest.skip("this CPU does not repack 4-bit weights")
    with pytest.raises(InvalidInput, match="fresh instance"):
        hook_saliency(q4, ids, nirvana_objective)
