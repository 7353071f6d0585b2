"""LLM-Pruner (nirvana.methods.llm_pruner) against a transcription of horseee/LLM-Pruner, on tiny models.

The transcription follows llama3.py `main` (the `--block_wise` branch: the per-example `acc_grad`
loop for param_mix / param_second, then `loss = model(example_prompts, labels=example_prompts).loss;
loss.backward()`), `TaylorImportance.__call__` in LLMPruner/pruner/hf_llama_pruner.py (salience per
variant, per-channel norms of Linear out / in channels, the `min_imp_size` alignment, `_reduce`),
and `MetaPruner.prune_local` in LLMPruner/torch_pruning/pruner/algorithms/metapruner.py
(`n_pruned = current_channels - int(init_channels * (1 - ratio))`, `imp.view(-1, consecutive).sum(1)`,
`argsort(imp)[: n_pruned // consecutive]`). The groups are those the dependency graph couples to a
layer's k_proj (k, v, q out-channels and o in-channels) and gate_proj (gate, up out; down in).
"""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import random_batch

from nirvana.errors import InvalidInput
from nirvana.methods import method_config
from nirvana.methods.llm_pruner.config import default_layer_range
from nirvana.methods.run import apply_method_plan, check_method, method_plan, method_scores
from nirvana.models.architectures import layer_projections
from nirvana.models.shapes import model_shape
from tests.tiny import TINY_FAMILIES, tiny_model

# 8 KV groups per layer so that one group is a small step: 0.2 and 0.5 are both reachable.
SIZES = dict(num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=8, head_dim=4, intermediate_size=96)


def tiny(family: str, **kw):
    return tiny_model(family, **{**SIZES, **kw})


def reference_gradients(model, ids: torch.Tensor, taylor: str) -> None:
    """llama3.py: fills `.grad` (batch loss) and, for param_mix / param_second, `.acc_grad`."""
    for param in model.parameters():
        param.requires_grad_(True)
    num_examples = ids.shape[0]
    if taylor in ["param_mix", "param_second"]:
        for j in range(num_examples):
            batch_input = ids[j].unsqueeze(0)
            loss = model(batch_input, labels=batch_input).loss
            loss.backward()
            for module_param in model.parameters():
                module_param.grad = module_param.grad * module_param.grad / num_examples
                if hasattr(module_param, "acc_grad"):
                    module_param.acc_grad += module_param.grad
                else:
                    module_param.acc_grad = copy.deepcopy(module_param.grad)
            model.zero_grad()
    loss = model(ids, labels=ids).loss
    loss.backward()


def reference_group_importance(group, taylor: str, reduction: str = "sum") -> torch.Tensor:
    """TaylorImportance.__call__ for Linear out/in channels; `group` = [(linear, "out" | "in")]."""
    group_imp = []
    for layer, kind in group:
        salience = layer.weight * layer.weight.grad
        if taylor in ["param_second"]:
            salience = layer.weight * layer.weight.acc_grad * layer.weight
        elif taylor in ["param_mix"]:
            salience = salience - 0.5 * layer.weight * layer.weight.acc_grad * layer.weight
        dim = 1 if kind == "out" else 0
        local_norm = salience.sum(dim).abs() if taylor == "vectorize" else salience.abs().sum(dim)
        group_imp.append(local_norm)  # idxs = all channels of the group
    min_imp_size = min([len(imp) for imp in group_imp])
    aligned_group_imp = []
    for imp in group_imp:
        if len(imp) > min_imp_size and len(imp) % min_imp_size == 0:
            imp = imp.view(len(imp) // min_imp_size, min_imp_size).sum(0)
            aligned_group_imp.append(imp)
        elif len(imp) == min_imp_size:
            aligned_group_imp.append(imp)
    group_imp = torch.stack(aligned_group_imp, dim=0)
    reduce = {"sum": lambda x: x.sum(0), "mean": lambda x: x.mean(0), "max": lambda x: x.max(0)[0]}[reduction]
    return reduce(group_imp).detach()


def reference_llm_pruner(model, ids, ratio, layers, taylor="param_first", reduction="sum"):
    """(attn scores [L, Hkv], mlp scores [L, I], pruned KV heads per layer, pruned neurons per layer)."""
    reference_gradients(model, ids, taylor)
    head_dim = model_shape(model).head_dim
    attn, mlp, pruned_heads, pruned_neurons = [], [], [], []
    for idx, p in enumerate(layer_projections(model)):
        imp = reference_group_importance(
            [(p.k_proj, "out"), (p.v_proj, "out"), (p.q_proj, "out"), (p.o_proj, "in")], taylor, reduction
        )
        imp = imp.view(-1, head_dim).sum(1)  # consecutive_groups = head_dim
        mlp_imp = reference_group_importance(
            [(p.gate_proj, "out"), (p.up_proj, "out"), (p.down_proj, "in")], taylor, reduction
        )
        attn.append(imp)
        mlp.append(mlp_imp)
        heads, neurons = [], []
        if layers[0] <= idx < layers[1]:
            channels = p.k_proj.out_features
            n_pruned = channels - int(channels * (1 - ratio))
            heads = torch.argsort(imp)[: n_pruned // head_dim].tolist()
            n_pruned = p.gate_proj.out_features - int(p.gate_proj.out_features * (1 - ratio))
            neurons = torch.argsort(mlp_imp)[:n_pruned].tolist()
        pruned_heads.append(sorted(heads))
        pruned_neurons.append(sorted(neurons))
    return torch.stack(attn), torch.stack(mlp), pruned_heads, pruned_neurons


def llm_prune(model, sparsity, ids, **settings):
    config = method_config("llm-pruner", settings)
    check_method(model, "llm-pruner", config, sparsity)
    batch = random_batch(n=ids.shape[0], t=ids.shape[1])
    batch.input_ids = ids
    scores = method_scores(model, "llm-pruner", config, batch, use_cache=False)
    plan = method_plan(scores, model_shape(model), sparsity, "llm-pruner", config)
    return scores, plan, apply_method_plan(model, plan, scores)


def pruned_sets(plan, shape):
    heads = [sorted(set(range(shape.num_kv_heads[0])) - set(layer.kept_kv_groups)) for layer in plan.layers]
    neurons = [sorted(set(range(shape.intermediate[0])) - set(layer.kept_neurons)) for layer in plan.layers]
    return heads, neurons


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("sparsity", [0.2, 0.5])
def test_scores_and_kept_units_equal_the_reference(family, sparsity):
    model = tiny(family)
    ids = random_batch(n=4, t=12, seed=2).input_ids
    scores, plan, pruned = llm_prune(model, sparsity, ids, query_credit="strided")
    ratio, layers = plan.stats["pruning_ratio"], tuple(plan.settings.method_settings["attn_layers"])
    assert layers == default_layer_range(8) == (1, 7)
    ref_attn, ref_mlp, heads, neurons = reference_llm_pruner(copy.deepcopy(model), ids, ratio, layers)
    torch.testing.assert_close(scores.attn, ref_attn, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(scores.mlp, ref_mlp, rtol=1e-4, atol=1e-7)
    assert pruned_sets(plan, model_shape(model)) == (heads, neurons)
    assert abs(plan.stats["achieved_block_sparsity"] - sparsity) <= 0.01
    # the same ratio in every pruned layer, nothing outside the range
    assert len({len(h) for h in heads[1:7]}) == 1 and len({len(n) for n in neurons[1:7]}) == 1
    dense, sliced = layer_projections(model), layer_projections(pruned)
    for idx in (0, 7):
        for name, lin in dense[idx].named_linears().items():
            assert torch.equal(lin.weight, sliced[idx].named_linears()[name].weight), (idx, name)


@pytest.mark.parametrize("taylor", ["param_second", "param_mix", "vectorize"])
@pytest.mark.parametrize("reduction", ["sum", "max"])
def test_every_taylor_variant_and_reduction_equals_the_reference(taylor, reduction):
    model = tiny("llama")
    ids = random_batch(n=3, t=10, seed=4).input_ids
    settings = dict(taylor=taylor, group_reduction=reduction, query_credit="strided")
    scores, plan, _ = llm_prune(model, 0.2, ids, **settings)
    ratio = plan.stats["pruning_ratio"]
    ref_attn, ref_mlp, heads, neurons = reference_llm_pruner(
        copy.deepcopy(model), ids, ratio, (1, 7), taylor, reduction
    )
    torch.testing.assert_close(scores.attn, ref_attn, rtol=1e-4, atol=1e-9)
    torch.testing.assert_close(scores.mlp, ref_mlp, rtol=1e-4, atol=1e-9)
    assert pruned_sets(plan, model_shape(model)) == (heads, neurons)


def test_group_credit_gives_each_kv_group_the_query_heads_it_removes():
    """query_credit="group" (the default): KV group m is scored with query heads m g .. m g + g - 1."""
    model = tiny("llama")
    ids = random_batch(n=3, t=10, seed=5).input_ids
    group = method_scores(model, "llm-pruner", method_config("llm-pruner"), _batch(ids), use_cache=False)
    strided = method_scores(
        model, "llm-pruner", method_config("llm-pruner", {"query_credit": "strided"}), _batch(ids), use_cache=False
    )
    reference_gradients(model, ids, "param_first")
    shape = model_shape(model)
    hkv, g, d = shape.num_kv_heads[0], shape.group_size, shape.head_dim
    for idx, p in enumerate(layer_projections(model)):
        per_channel = {n: (lin.weight * lin.weight.grad).abs() for n, lin in p.named_linears().items()}
        k, v = per_channel["k_proj"].sum(1), per_channel["v_proj"].sum(1)
        q, o = (
            per_channel["q_proj"].sum(1).view(hkv, g * d).sum(1),
            per_channel["o_proj"].sum(0).view(hkv, g * d).sum(1),
        )
        expected = k.view(hkv, d).sum(1) + v.view(hkv, d).sum(1) + q + o
        torch.testing.assert_close(group.attn[idx], expected.detach(), rtol=1e-4, atol=1e-9)
    torch.testing.assert_close(group.mlp, strided.mlp)  # only the attention credit differs
    assert not torch.allclose(group.attn, strided.attn)


def _batch(ids):
    batch = random_batch(n=ids.shape[0], t=ids.shape[1])
    batch.input_ids = ids
    return batch


def test_kept_mlp_width_is_the_reference_truncation_without_alignment():
    model = tiny("llama")
    _, plan, _ = llm_prune(model, 0.3, random_batch(n=2, t=8).input_ids)
    ratio = plan.stats["pruning_ratio"]
    assert plan.kept_neurons[1:7] == [int(96 * (1 - ratio))] * 6 and plan.kept_neurons[0] == plan.kept_neurons[7] == 96
    assert plan.settings.align == 1 and plan.settings.method == "llm-pruner"


@pytest.mark.parametrize(
    "settings, sparsity, message",
    [
        ({"attn_layers": [0, 7]}, 0.2, r"attn_layers \[0, 7\) is outside .* 1 <= start <= end <= 7"),
        ({"mlp_layers": [2, 9]}, 0.2, r"mlp_layers \[2, 9\) is outside"),
        ({}, 0.9, r"cannot reach block sparsity 0.9 .*nearest reachable: at most 0\.\d+"),
        ({"attn_layers": [1, 2], "mlp_layers": [1, 2]}, 0.5, r"cannot reach block sparsity 0.5"),
    ],
)
def test_settings_that_do_not_apply_are_refused_before_scoring(settings, sparsity, message):
    model = tiny("llama")
    with pytest.raises(InvalidInput, match=message):
        check_method(model, "llm-pruner", method_config("llm-pruner", settings), sparsity)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"taylor": "param_third"}, r"taylor must be one of param_first, param_second, param_mix, vectorize"),
        ({"pruning_ratio": 1.0}, r"pruning_ratio must be a number in \[0, 1\)"),
        ({"attn_layers": [1]}, r"attn_layers must be \[start, end\]"),
        ({"ratio": 0.3}, r"ratio is not a setting of method 'llm-pruner'; accepted: taylor, group_reduction"),
    ],
)
def test_bad_settings_are_refused_with_what_is_accepted(settings, message):
    with pytest.raises(InvalidInput, match=message):
        method_config("llm-pruner", settings)


def test_llm_pruner_model_saves_and_reloads_with_nirvana_and_stock_transformers(tmp_path, tiny_tokenizer_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nirvana.checkpoints.pruned import load_pruned, save_pruned

    tok = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    model = tiny("qwen2", vocab_size=len(tok), attn_implementation="sdpa")
    ids = random_batch(vocab=len(tok), n=3, t=10, seed=1).input_ids
    _, plan, pruned = llm_prune(model, 0.5, ids)
    save_pruned(pruned, tok, plan, tmp_path / "m")
    with torch.no_grad():
        expected = pruned(ids).logits
        torch.testing.assert_close(load_pruned(tmp_path / "m").model(ids).logits, expected, rtol=0, atol=0)
        stock, info = AutoModelForCausalLM.from_pretrained(
            tmp_path / "m", trust_remote_code=True, output_loading_info=True
        )
        assert not any(info.values()), info
        torch.testing.assert_close(stock.eval()(ids).logits, expected, rtol=1e-5, atol=1e-5)
    assert load_pruned(tmp_path / "m").plan.settings.method == "llm-pruner"
