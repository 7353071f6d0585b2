"""SliceGPT: the rotation is exact, the slice equals a transcription of the reference, the model is real.

The reference is microsoft/TransformerCompression `src/slicegpt/rotate.py` `rotate_and_slice_sequential`
(PCA of the layer-0 inputs, of each layer's MLP-norm input and of its output, each on the model as
sliced so far) with `layernorm_fusion.py` `fuse_modules` and `modules.py` `RMSN` (norm over the
dense width). `reference_projected` below transcribes it in the original basis: slicing the rotated
stream to its first k principal directions is multiplying the unrotated stream by P = V_k V_k^T,
so the sliced model must equal the dense model with those projections at the 2L + 1 slice points.
"""

from __future__ import annotations

import pytest
import torch
from conftest import random_batch
from transformers import AutoModelForCausalLM

from nirvana.checkpoints.pruned import load_pruned, save_pruned
from nirvana.errors import InvalidInput, UnsupportedArchitecture
from nirvana.methods import method_config
from nirvana.methods.run import apply_method_plan, check_method, data_plan, method_scores
from nirvana.methods.slicegpt.budget import HiddenDims, dims_for
from nirvana.methods.slicegpt.config import SliceGPTConfig
from nirvana.methods.slicegpt.rotation import rotate_and_slice
from nirvana.models.architectures import decoder_layers, layer_projections
from nirvana.models.shapes import count_block_parameters, count_parameters
from nirvana.pruning.slicing import copy_without_block_weights
from tests.tiny import tiny_model

ROTATABLE = ["llama", "mistral", "qwen2", "qwen3"]


def tiny(family: str, **kw):
    """A tiny model whose norms have non-trivial scales (so the fold is exercised)."""
    model = tiny_model(family, **kw)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.2, generator=torch.Generator().manual_seed(len(name)))
    return model


def rotated(model, ids, width, **settings):
    copy = copy_without_block_weights(model)
    hidden, layers = model.config.hidden_size, model.config.num_hidden_layers
    dims = HiddenDims.constant(hidden, layers, width, settings.pop("slice_head", False))
    spectra = rotate_and_slice(copy, ids, dims, SliceGPTConfig(**settings))
    return copy, spectra


def slicegpt_prune(model, sparsity, ids, **settings):
    config = method_config("slicegpt", settings)
    batch = random_batch(vocab=model.config.vocab_size, n=ids.shape[0], t=ids.shape[1])
    batch.input_ids.copy_(ids)
    plan = data_plan(model, "slicegpt", config, sparsity, batch)
    return plan, apply_method_plan(model, plan, batch=batch)


def _principal_projection(signal: torch.Tensor, k: int, damp: float = 0.01) -> torch.Tensor:
    """rotate.py `pca_calc`: H = sum X^T X (fp64) + damp mean(diag H) I, eigenvectors by decreasing value."""
    x = signal.reshape(-1, signal.shape[-1]).double()
    cov = x.T @ x
    cov += damp * torch.mean(torch.diag(cov)) * torch.eye(cov.shape[0], dtype=cov.dtype)
    values, vectors = torch.linalg.eigh(cov)
    top = vectors[:, torch.argsort(values, descending=True)[:k]]
    return (top @ top.T).to(signal.dtype)  # (D, D): onto the first k principal directions


@torch.no_grad()
def reference_projected(model, ids, width: int):
    """The dense (sdpa, causal) model with SliceGPT's slices as projections in the original basis."""
    x = model.model.embed_tokens(ids)  # (N, T, D)
    x = x @ _principal_projection(x, width)  # slice_embeddings
    position_embeddings = model.model.rotary_emb(x, torch.arange(ids.shape[1])[None])
    layers = model.model.layers
    for idx, layer in enumerate(layers):
        attn, _ = layer.self_attn(
            hidden_states=layer.input_layernorm(x), position_embeddings=position_embeddings, attention_mask=None
        )
        h = x + attn
        h = h @ _principal_projection(h, width)  # slice_attention_output, slice_mlp_input
        y = h + layer.mlp(layer.post_attention_layernorm(h))
        last = idx == len(layers) - 1  # without slice_head the last output keeps all D dimensions
        x = y if last else y @ _principal_projection(y, width)  # slice_mlp_output
    return model.lm_head(model.model.norm(x))


@pytest.mark.parametrize("family", ROTATABLE)
def test_rotation_without_slicing_reproduces_the_dense_logits(family):
    model = tiny(family, tie_word_embeddings=family == "llama")  # llama: tied, so the fold must untie
    ids = random_batch(n=8, t=16).input_ids
    sliced, spectra = rotated(model, ids, model.config.hidden_size)
    with torch.no_grad():
        torch.testing.assert_close(sliced(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-4)
    assert spectra["attention"] == [1.0, 1.0] and spectra["mlp"] == [1.0, 1.0]
    assert all(isinstance(layer.attn_shortcut_Q, torch.nn.Parameter) for layer in decoder_layers(sliced))


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("width", [24, 16])
def test_slicing_equals_the_reference_transcription(family, width):
    model = tiny(family, attn_implementation="sdpa")
    ids = random_batch(n=8, t=16, seed=3).input_ids
    sliced, spectra = rotated(model, ids, width)
    with torch.no_grad():
        got = sliced(ids).logits
    torch.testing.assert_close(got, reference_projected(model, ids, width), rtol=1e-4, atol=1e-4)
    assert sliced.get_input_embeddings().weight.shape == (64, width)
    for proj in layer_projections(sliced):
        assert proj.q_proj.in_features == proj.gate_proj.in_features == width
    assert all(0 < v < 1 for v in spectra["attention"])  # a real slice loses some variance


def test_slicing_without_rotation_destroys_the_model_and_with_it_does_not():
    """Why rotation comes first: deleting the same number of raw hidden dimensions is far worse."""
    model = tiny("llama", attn_implementation="sdpa")
    ids = random_batch(n=8, t=16, seed=5).input_ids
    with torch.no_grad():
        dense = model(ids).logits
        keep = torch.zeros(32, 32)
        keep[:24, :24] = torch.eye(24)  # the first 24 raw dimensions, no rotation
        raw = model.lm_head(model.model.norm(model.model(inputs_embeds=model.model.embed_tokens(ids) @ keep)[0]))
        sliced, _ = rotated(model, ids, 24)
        error_rotated = (sliced(ids).logits - dense).pow(2).mean()
    assert error_rotated < (raw - dense).pow(2).mean()


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_a_slicegpt_model_saves_and_reloads_with_nirvana_and_stock_transformers(family, tmp_path, tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    model = tiny(family, vocab_size=len(tok), attn_implementation="sdpa", tie_word_embeddings=True)
    ids = random_batch(vocab=len(tok), n=8, t=10, seed=1).input_ids
    plan, pruned = slicegpt_prune(model, 0.3, ids, round_interval=4)
    save_pruned(pruned, tok, plan, tmp_path / "m")
    with torch.no_grad():
        expected = pruned(ids).logits
        again = load_pruned(tmp_path / "m")
        torch.testing.assert_close(again.model(ids).logits, expected, rtol=0, atol=0)
        assert again.model.config.nirvana_sliced_hidden["embedding"] == pruned.get_input_embeddings().embedding_dim
        stock, info = AutoModelForCausalLM.from_pretrained(
            tmp_path / "m", trust_remote_code=True, output_loading_info=True
        )
        assert not any(info.values()), info  # nothing missing (the shortcuts), unexpected or re-initialised
        torch.testing.assert_close(stock.eval()(ids).logits, expected, rtol=1e-5, atol=1e-5)
        out = stock.generate(ids[:1], max_new_tokens=5, do_sample=False)
        mine = pruned.generate(ids[:1], max_new_tokens=5, do_sample=False)
    assert torch.equal(out, mine)


@pytest.mark.parametrize("sparsity", [0.2, 0.5])
def test_parameters_are_counted_exactly_and_the_target_is_met_within_one_percent(sparsity):
    model = tiny("qwen2", hidden_size=64, head_dim=16, intermediate_size=96, tie_word_embeddings=True)
    ids = random_batch(n=8, t=16).input_ids
    plan, pruned = slicegpt_prune(model, sparsity, ids, round_interval=1)
    stats = plan.stats["slicegpt"]
    assert stats["params_after"] == count_parameters(pruned) == plan.stats["params_after"]
    assert stats["block_params_after"] == count_block_parameters(pruned)
    assert stats["block_params_before"] == count_block_parameters(model)
    assert abs(stats["achieved_block_param_sparsity"] - sparsity) <= 0.01
    assert plan.kept_neurons == [96, 96] and plan.kept_kv_groups == [2, 2]  # SliceGPT keeps every unit


def test_smollm2_widths_meet_every_target_within_one_percent(smollm2):
    for sparsity in (0.1, 0.2, 0.3, 0.5):
        dims, stats = dims_for(smollm2.model, sparsity, SliceGPTConfig())
        assert dims.embedding % 8 == 0 and abs(stats["achieved_block_param_sparsity"] - sparsity) <= 0.01
    # The reference's own 25% slicing removes far fewer block parameters than 25% (the shortcuts add some back).
    _, stats = dims_for(smollm2.model, 0.2, SliceGPTConfig(slicing=0.25))
    assert stats["hidden_kept"] == 432 and stats["achieved_block_param_sparsity"] < 0.2


def test_bad_settings_and_unrotatable_families_are_refused():
    for bad in (0, 1, 1.5, -0.1, True, "0.2"):
        with pytest.raises(InvalidInput, match="slicing must be a fraction"):
            SliceGPTConfig(slicing=bad)
    with pytest.raises(InvalidInput, match="round_interval"):
        SliceGPTConfig(round_interval=0)
    with pytest.raises(InvalidInput, match="final_orientation"):
        SliceGPTConfig(final_orientation="random")
    model = tiny("llama")
    with pytest.raises(InvalidInput, match="at least 8 must stay"):
        dims_for(model, 0.2, SliceGPTConfig(slicing=0.9))
    for family, missing in (("gemma3_text", "post_feedforward"), ("gemma2", "post_feedforward"), ("gemma", "1 \\+ w")):
        with pytest.raises(UnsupportedArchitecture, match=missing):
            check_method(tiny_model(family), "slicegpt", method_config("slicegpt"), 0.2)
    with pytest.raises(InvalidInput, match="16 < 32"):
        rotated(model, random_batch(n=1, t=16).input_ids, 24)  # 16 tokens < 32 dimensions
    with pytest.raises(InvalidInput, match="no unit scores"):
        method_scores(model, "slicegpt", method_config("slicegpt"), random_batch())


def test_slicegpt_never_calls_backward():
    model = tiny("llama")
    for p in model.parameters():
        p.register_hook(lambda g: (_ for _ in ()).throw(AssertionError("backward ran")))
    slicegpt_prune(model, 0.3, random_batch(n=8, t=16).input_ids, round_interval=4)


def test_export_gguf_refuses_a_sliced_residual_stream(tmp_path, tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    from nirvana.export.gguf import write_gguf

    tok = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    model = tiny("llama", vocab_size=len(tok))
    plan, pruned = slicegpt_prune(model, 0.3, random_batch(vocab=len(tok), n=8, t=10).input_ids, round_interval=4)
    save_pruned(pruned, tok, plan, tmp_path / "m")
    with pytest.raises(UnsupportedArchitecture, match="shortcut matrices"):
        write_gguf(tmp_path / "m", tmp_path / "m.gguf", tokenizer_gguf=None)
    assert not (tmp_path / "m.gguf").exists()


def test_a_slicegpt_model_recovers_with_lora_and_reloads(tmp_path, tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    from nirvana.recovery.config import RecoveryConfig
    from nirvana.recovery.data import RecoveryData
    from nirvana.recovery.save import save_recovered
    from nirvana.recovery.train import recover

    tok = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    model = tiny("llama", vocab_size=len(tok), attn_implementation="sdpa")
    ids = random_batch(vocab=len(tok), n=8, t=10, seed=1).input_ids
    plan, pruned = slicegpt_prune(model, 0.3, ids, round_interval=4)
    shortcuts = [layer.attn_shortcut_Q.detach().clone() for layer in decoder_layers(pruned)]
    train = torch.randint(0, len(tok), (18, 16), generator=torch.Generator().manual_seed(0))
    data = RecoveryData(train[:16], train[16:], {"source": "random-ids", "kind": "text"})
    fast = dict(r=4, alpha=8, batch_size=4, micro_batch_size=2, seq_len=16, eval_every=2, eval_sequences=2)
    result = recover(pruned, data, RecoveryConfig(**fast, steps=2, lr=1e-2))
    assert result.complete
    for layer, shortcut in zip(decoder_layers(result.model), shortcuts):
        torch.testing.assert_close(layer.attn_shortcut_Q, shortcut)  # LoRA adapts projections; shortcuts stay
    out = save_recovered(result, tok, plan, tmp_path / "rec", base_model="tiny")
    with torch.no_grad():
        torch.testing.assert_close(load_pruned(out).model(ids).logits, result.model(ids).logits, rtol=0, atol=0)


def test_a_slicegpt_model_is_measured_for_speed_like_any_pruned_model():
    from nirvana.measure.speed import measure_speeds

    model = tiny("llama")
    _, pruned = slicegpt_prune(model, 0.3, random_batch(n=8, t=16).input_ids, round_interval=4)
    out = measure_speeds({"dense": model, "slicegpt": pruned}, batch_sizes=[1], prompt_len=8, new_tokens=2, repeats=1)
    assert set(out) == {"dense", "slicegpt"} and len(out["slicegpt"]["results"]) == 1


def test_dense_spectra_predict_the_first_slice_and_are_cached_without_touching_the_model(tmp_path, monkeypatch):
    from nirvana.methods.slicegpt.spectrum import Spectra, dense_spectra

    monkeypatch.setenv("NIRVANA_CACHE_DIR", str(tmp_path))
    model = tiny("llama")
    batch = random_batch(vocab=model.config.vocab_size, n=4, t=32)
    before = model(batch.input_ids).logits
    spectra = dense_spectra(model, batch)
    torch.testing.assert_close(model(batch.input_ids).logits, before)  # a copy was rotated, not the model
    hidden, layers = model.config.hidden_size, model.config.num_hidden_layers
    assert len(spectra.embedding) == hidden and len(spectra.attention) == len(spectra.mlp) == layers
    full = spectra.kept(hidden)
    assert full["embedding"] == pytest.approx(1.0) and full["mlp"] == pytest.approx([1.0] * layers)
    fractions = [spectra.kept(w)["attention"][0] for w in range(8, hidden + 1, 8)]
    assert fractions == sorted(fractions) and 0 < fractions[0] < 1  # more width, more variance
    # the embedding's PCA sees nothing sliced before it: a real prune keeps exactly the predicted fraction
    plan, pruned = slicegpt_prune(model, 0.3, batch.input_ids)
    width = plan.stats["slicegpt"]["hidden_kept"]
    kept = pruned.config.nirvana_sliced_hidden["variance_kept"]
    assert kept["embedding"] == pytest.approx(spectra.kept(width)["embedding"], rel=1e-9)
    assert len(list((tmp_path / "spectra").iterdir())) == 1
    assert dense_spectra(model, batch) == spectra == Spectra.from_dict(spectra.to_dict())  # from the cache


def test_a_slicegpt_plan_reapplies_from_the_batch_alone_and_refuses_another(tiny_with_tokenizer_dir):
    """`prune(plan=..., batch=...)` (the app reopening a run) rotates again to the same model; not on another batch."""
    from nirvana.checkpoints.loading import load_model
    from nirvana.errors import PlanMismatch
    from nirvana.pipeline import PruneSettings, prune

    lm = load_model(str(tiny_with_tokenizer_dir), dtype="float32", device="cpu")
    batch = random_batch(vocab=lm.model.config.vocab_size, n=4, t=32)
    first = prune(lm, PruneSettings(0.3, method="slicegpt"), batch=batch)
    assert first.plan.settings.calibration["hash"] == batch.hash
    again = prune(lm, plan=first.plan, batch=batch)
    ids = batch.input_ids[:2]
    torch.testing.assert_close(again.model(ids).logits, first.model(ids).logits)
    other = random_batch(vocab=lm.model.config.vocab_size, n=4, t=32, seed=1)
    with pytest.raises(PlanMismatch, match="rotated on calibration batch"):
        prune(lm, plan=first.plan, batch=other)


def test_gradient_checkpointing_reaches_the_shortcut_layers_and_gives_the_same_gradients():
    model = tiny("llama")
    ids = random_batch(vocab=model.config.vocab_size, n=4, t=16).input_ids
    _, sliced = slicegpt_prune(model, 0.3, ids)
    sliced.train()

    def grads():
        sliced.zero_grad()
        sliced(ids, labels=ids).loss.backward()
        return [p.grad.clone() for p in sliced.parameters() if p.grad is not None]

    plain = grads()
    calls = []
    sliced.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert all(layer.gradient_checkpointing for layer in decoder_layers(sliced))
    for layer in decoder_layers(sliced):
        inner = layer._gradient_checkpointing_func
        layer._gradient_checkpointing_func = lambda *a, inner=inner, **k: calls.append(1) or inner(*a, **k)
    checkpointed = grads()
    assert len(calls) == len(decoder_layers(sliced))  # every layer's forward went through the checkpoint
    for a, b in zip(plain, checkpointed):
        torch.testing.assert_close(a, b)
