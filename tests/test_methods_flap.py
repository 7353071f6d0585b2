"""FLAP (nirvana.methods.flap) against a transcription of CASIA-IVA-Lab/FLAP, on tiny models of every family.

The transcriptions below follow lib/layerwrapper.py `BiasGPT.__init__` / `add_batch` (the WIFV
branch, lines 41-80 of the file) and lib/prune.py `prune_flap` (the per-layer loop that feeds one
sample at a time, the `metrics` table, `standarlization`, the AL-AM threshold) and `compress`
(`output_bias = (mean_inp * ~mask) @ W.T`). Two generalisations are the documented ones
(docs/BASELINES.md): the hard-coded 128 is the model's head_dim times its query heads per KV group,
and a head weighs its exact parameter count (the reference's int64 tensor truncates 512/3 to 170).
"""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import random_batch
from transformers import AutoModelForCausalLM

from nirvana.checkpoints.pruned import load_pruned, save_pruned
from nirvana.errors import InvalidInput, UnsupportedArchitecture
from nirvana.methods import method_config
from nirvana.methods.flap.statistics import ChannelStats
from nirvana.methods.run import apply_method_plan, check_method, method_plan, method_scores
from nirvana.models.architectures import layer_projections
from nirvana.models.shapes import count_parameters, model_shape
from nirvana.pruning.slicing import add_output_biases
from tests.tiny import TINY_FAMILIES, tiny_model

# A KV group weighs 48 neurons here; with 192 neurons per layer one unit is under 1% of the block weights.
SIZES = dict(num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4, intermediate_size=192)


def tiny(family: str, **kw):
    return tiny_model(family, **{**SIZES, **kw})


class RefBiasGPT:
    """lib/layerwrapper.py BiasGPT with metric WIFV, arithmetic kept as written (in-place ops included)."""

    def __init__(self, in_dim: int):
        self.nsamples = 0
        self.baseline_inp = torch.zeros(in_dim)
        self.fluc_inp = torch.zeros(in_dim)

    def add_batch(self, inp: torch.Tensor) -> None:
        if len(inp.shape) == 2:
            inp = inp.unsqueeze(0)
        batch_size = inp.shape[0]
        inp = inp.reshape((-1, inp.shape[-1])).t()  # (dim, seqlen)
        old_baseline_inp = self.baseline_inp
        self.baseline_inp *= self.nsamples / (self.nsamples + batch_size)
        self.baseline_inp += torch.mean(inp, dim=1) / (self.nsamples + batch_size)
        if self.nsamples == 0:
            self.fluc_inp = 0
        else:
            self.fluc_inp *= (self.nsamples - 1) / (self.nsamples + batch_size - 1)
            self.fluc_inp += torch.sum(
                (inp - self.baseline_inp.unsqueeze(1)) * (inp - old_baseline_inp.unsqueeze(1)), dim=1
            ) / (self.nsamples + batch_size)
        self.nsamples += batch_size


def reference_flap(model, ids: torch.Tensor, ratio: float):
    """prune_flap (AL-AM, WIFV) on a dense model, one sample at a time: masks and compensation biases."""
    shape = model_shape(model)
    L, g, d = shape.num_layers, shape.group_size, shape.head_dim
    wrapped = {}
    hooks = []
    for proj in layer_projections(model):
        for lin in (proj.o_proj, proj.down_proj):
            wrapped[lin] = RefBiasGPT(lin.in_features)
            hooks.append(lin.register_forward_hook(lambda m, inp, out: wrapped[m].add_batch(inp[0].data)))
    with torch.no_grad():
        for j in range(ids.shape[0]):  # for j in range(args.nsamples): layer(inps[j].unsqueeze(0))
            model(ids[j].unsqueeze(0))
    for h in hooks:
        h.remove()
    attn_metric_list, mlp_metric_list, attn_base, mlp_base = [], [], [], []
    for proj in layer_projections(model):
        o, down = wrapped[proj.o_proj], wrapped[proj.down_proj]
        attn_metric_list.append((o.fluc_inp * torch.sum(proj.o_proj.weight.data.pow(2), dim=0)) ** 2)
        mlp_metric_list.append(down.fluc_inp * torch.sum(proj.down_proj.weight.data.pow(2), dim=0))
        attn_base.append(o.baseline_inp)
        mlp_base.append(down.baseline_inp)

    def standarlization(x):
        return (x - torch.mean(x, axis=1, keepdim=True)) / torch.std(x, axis=1, keepdim=True)

    attn_metric = standarlization(torch.stack(attn_metric_list)).reshape(L, -1, g * d).mean(dim=2)
    mlp_metric = standarlization(torch.stack(mlp_metric_list))
    prune_metric = torch.cat([attn_metric.view(-1), mlp_metric.view(-1)])
    sorted_prune, indices = torch.sort(prune_metric, descending=True)
    compression_weight = torch.ones_like(indices, dtype=torch.float64)
    compression_weight[indices < attn_metric.numel()] = 2 * (g + 1) * d / 3  # 512/3 for g = 1, d = 128
    target = torch.sum(compression_weight) * (1 - ratio)
    threshold = sorted_prune[torch.argmin(torch.abs(torch.cumsum(compression_weight, 0) - target))]
    attn_mask, mlp_mask = attn_metric > threshold, mlp_metric > threshold
    biases = {}
    for i, proj in enumerate(layer_projections(model)):
        head_mask = attn_mask[i].repeat_interleave(g * d)
        biases[i] = {
            "o_proj": (attn_base[i] * ~head_mask) @ proj.o_proj.weight.data.T,
            "down_proj": (mlp_base[i] * ~mlp_mask[i]) @ proj.down_proj.weight.data.T,
        }
    return attn_mask, mlp_mask, biases, (attn_metric, mlp_metric)


def flap_prune(model, sparsity: float, ids: torch.Tensor, **settings):
    config = method_config("flap", settings)
    check_method(model, "flap", config, sparsity)
    batch = random_batch(n=ids.shape[0], t=ids.shape[1])
    batch.input_ids = ids
    scores = method_scores(model, "flap", config, batch, use_cache=False)
    plan = method_plan(scores, model_shape(model), sparsity, "flap", config)
    return scores, plan, apply_method_plan(model, plan, scores)


def masked_dense(model, plan, biases):
    """The dense model with the removed units' weights zeroed and FLAP's biases added (no slicing)."""
    masked = copy.deepcopy(model)
    shape = model_shape(model)
    g, d = shape.group_size, shape.head_dim
    with torch.no_grad():
        for proj, layer in zip(layer_projections(masked), plan.layers):
            heads = torch.ones(shape.num_kv_heads[0], dtype=torch.bool)
            heads[layer.kept_kv_groups] = False
            q_rows, kv_rows = heads.repeat_interleave(g * d), heads.repeat_interleave(d)
            neurons = torch.ones(shape.intermediate[0], dtype=torch.bool)
            neurons[layer.kept_neurons] = False
            for lin, rows in ((proj.q_proj, q_rows), (proj.k_proj, kv_rows), (proj.v_proj, kv_rows)):
                lin.weight[rows] = 0
                if lin.bias is not None:
                    lin.bias[rows] = 0
            proj.o_proj.weight[:, q_rows] = 0
            proj.gate_proj.weight[neurons] = 0
            proj.up_proj.weight[neurons] = 0
            proj.down_proj.weight[:, neurons] = 0
    add_output_biases(masked, biases)
    return masked


def test_channel_statistics_equal_the_reference_running_update():
    torch.manual_seed(0)
    samples = torch.randn(5, 7, 6)  # (N, T, C)
    ours, ref = ChannelStats(6, "cpu"), RefBiasGPT(6)
    for x in samples:
        ours.add_sample(x)
        ref.add_batch(x.clone())
    torch.testing.assert_close(ours.mean, ref.baseline_inp)
    torch.testing.assert_close(ours.fluc, ref.fluc_inp)
    # The reference's quirks, kept: the first sample's spread is ignored and the updated mean is used twice.
    rest = samples[1:]
    assert not torch.allclose(ours.fluc, rest.reshape(-1, 6).var(0), rtol=1e-3)


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("sparsity", [0.2, 0.5])
def test_kept_units_and_biases_equal_the_reference_and_the_slice_equals_the_masked_model(family, sparsity):
    model = tiny(family)
    ids = random_batch(n=6, t=12, seed=3).input_ids
    attn_mask, mlp_mask, ref_biases, (ref_attn, ref_mlp) = reference_flap(copy.deepcopy(model), ids, sparsity)
    scores, plan, pruned = flap_prune(model, sparsity, ids)
    torch.testing.assert_close(scores.attn, ref_attn.float(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(scores.mlp, ref_mlp.float(), rtol=1e-4, atol=1e-5)
    assert all(attn_mask.any(dim=1)), "the transcription left a layer without heads: pick other seeds"
    assert [layer.kept_kv_groups for layer in plan.layers] == [torch.nonzero(m).flatten().tolist() for m in attn_mask]
    assert [layer.kept_neurons for layer in plan.layers] == [torch.nonzero(m).flatten().tolist() for m in mlp_mask]
    assert abs(plan.stats["achieved_block_sparsity"] - sparsity) <= 0.01
    for i, proj in enumerate(layer_projections(pruned)):
        torch.testing.assert_close(proj.o_proj.bias, ref_biases[i]["o_proj"], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(proj.down_proj.bias, ref_biases[i]["down_proj"], rtol=1e-4, atol=1e-5)
    masked = masked_dense(model, plan, ref_biases)
    with torch.no_grad():
        torch.testing.assert_close(pruned(ids).logits, masked(ids).logits, rtol=1e-4, atol=1e-4)
    # The added biases count as parameters: L layers x (D for o_proj + D for down_proj).
    shape = model_shape(model)
    removed = shape.total_params - plan.stats["params_after"]
    assert count_parameters(pruned) == shape.total_params - removed + 2 * shape.num_layers * shape.hidden_size


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3_text"])
def test_flap_model_saves_and_reloads_with_nirvana_and_stock_transformers(family, tmp_path, tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    model = tiny(family, vocab_size=len(tok), attn_implementation="sdpa")  # what a reload builds
    ids = random_batch(vocab=len(tok), n=4, t=10, seed=1).input_ids
    _, plan, pruned = flap_prune(model, 0.5, ids)
    save_pruned(pruned, tok, plan, tmp_path / "m")
    with torch.no_grad():
        expected = pruned(ids).logits
        again = load_pruned(tmp_path / "m").model
        torch.testing.assert_close(again(ids).logits, expected, rtol=0, atol=0)
        stock, info = AutoModelForCausalLM.from_pretrained(
            tmp_path / "m", trust_remote_code=True, output_loading_info=True
        )
        assert not any(info.values()), info  # nothing missing (the biases), unexpected or re-initialised
        torch.testing.assert_close(stock.eval()(ids).logits, expected, rtol=1e-5, atol=1e-5)
        out = stock.generate(ids[:1], max_new_tokens=5, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 5


def test_export_gguf_refuses_the_added_biases_with_a_clear_message(tmp_path, tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    from nirvana.export.gguf import write_gguf

    tok = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    model = tiny("llama", vocab_size=len(tok))
    _, plan, pruned = flap_prune(model, 0.2, random_batch(vocab=len(tok), n=4, t=10).input_ids)
    save_pruned(pruned, tok, plan, tmp_path / "m")
    with pytest.raises(UnsupportedArchitecture, match="o_proj / down_proj biases"):
        write_gguf(tmp_path / "m", tmp_path / "m.gguf", tokenizer_gguf=None)
    assert not (tmp_path / "m.gguf").exists()


def test_flap_refuses_a_model_whose_o_proj_already_has_a_bias():
    model = tiny("llama", attention_bias=True)
    with pytest.raises(InvalidInput, match="already has a bias"):
        check_method(model, "flap", method_config("flap"), 0.2)
    check_method(model, "flap", method_config("flap", {"bias": False}), 0.2)  # without compensation it may run


def test_flap_without_bias_leaves_the_projections_bias_free():
    model = tiny("llama")
    _, _, pruned = flap_prune(model, 0.2, random_batch(n=4, t=10).input_ids, bias=False)
    assert all(p.o_proj.bias is None and p.down_proj.bias is None for p in layer_projections(pruned))


def test_flap_never_calls_backward():
    model = tiny("llama")
    for p in model.parameters():
        p.register_hook(lambda g: (_ for _ in ()).throw(AssertionError("backward ran")))
    flap_prune(model, 0.2, random_batch(n=4, t=10).input_ids)


def test_a_flap_model_recovers_with_lora_keeps_its_biases_and_reloads(tmp_path, tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    from nirvana.recovery.config import RecoveryConfig
    from nirvana.recovery.data import RecoveryData
    from nirvana.recovery.save import save_recovered
    from nirvana.recovery.train import recover

    tok = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    model = tiny("llama", vocab_size=len(tok), attn_implementation="sdpa")
    ids = random_batch(vocab=len(tok), n=4, t=10, seed=1).input_ids
    _, plan, pruned = flap_prune(model, 0.5, ids)
    biases = [p.o_proj.bias.detach().clone() for p in layer_projections(pruned)]
    train = torch.randint(0, len(tok), (18, 16), generator=torch.Generator().manual_seed(0))
    data = RecoveryData(train[:16], train[16:], {"source": "random-ids", "kind": "text"})
    fast = dict(r=4, alpha=8, batch_size=4, micro_batch_size=2, seq_len=16, eval_every=2, eval_sequences=2)
    result = recover(pruned, data, RecoveryConfig(**fast, steps=2, lr=1e-2))
    assert result.complete
    for proj, bias in zip(layer_projections(result.model), biases):
        torch.testing.assert_close(proj.o_proj.bias, bias)  # LoRA adapts weights; the compensation stays
    out = save_recovered(result, tok, plan, tmp_path / "rec", base_model="tiny")
    with torch.no_grad():
        torch.testing.assert_close(load_pruned(out).model(ids).logits, result.model(ids).logits, rtol=0, atol=0)


def test_a_flap_model_is_measured_for_speed_like_any_pruned_model():
    from nirvana.measure.speed import measure_speeds

    model = tiny("llama")
    _, _, pruned = flap_prune(model, 0.5, random_batch(n=4, t=10).input_ids)
    out = measure_speeds({"dense": model, "flap": pruned}, batch_sizes=[1], prompt_len=8, new_tokens=2, repeats=1)
    assert set(out) == {"dense", "flap"} and len(out["flap"]["results"]) == 1
