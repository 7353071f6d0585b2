"""Tyr-the-Pruner (`--method tyr`): each step against a transcription of the reference code (tests/tyr_reference.py,
written from AMD-AGI/Tyr-the-Pruner; docs/notes/tyr-reference.md) on tiny models, and the method end to end:
the supernet's levels on disk, error accumulation, the search keeping each type's budget, the plan, slicing,
re-solving, save and reload."""

from __future__ import annotations

import random

import pytest
import torch
import tyr_reference as ref
from conftest import random_batch

from nirvana.checkpoints.loaded import LoadedModel
from nirvana.checkpoints.pruned import load_pruned, save_pruned
from nirvana.errors import InvalidInput
from nirvana.methods import get_method, method_config
from nirvana.methods.tyr.config import REFERENCE, TyrConfig
from nirvana.methods.tyr.local import local_prune
from nirvana.methods.tyr.run import initial_centres, level_steps, search_tokens
from nirvana.methods.tyr.search import Grid, dense_topk, minibatch, mutate, offspring, sparse_kl_sum
from nirvana.methods.tyr.supernet import Supernet, modules_of
from nirvana.models.architectures import decoder_layers, layer_projections
from nirvana.models.capture import layer_inputs
from nirvana.models.shapes import model_shape
from nirvana.pipeline import PruneSettings, prune
from nirvana.pruning.reconstruct import Gram
from tests.tiny import TINY_FAMILIES, TYR_SMALL, tiny_model


@pytest.mark.parametrize(
    "out, width, size, remove, rounds, dead",
    [(6, 16, 4, 1, 1, False), (6, 16, 4, 2, 1, True), (7, 32, 8, 3, 1, False), (5, 24, 1, 10, 16, False),
     (5, 24, 1, 7, 3, True), (4, 40, 1, 39, 16, False), (4, 12, 1, 0, 16, True)],
)  # fmt: skip
def test_local_pruning_equals_the_reference(out, width, size, remove, rounds, dead):
    """OBS rounds, group scores, the OBS update and the final re-solve, as `local_prune_core` computes them."""
    g = torch.Generator().manual_seed(width + remove)
    W, x = torch.randn(out, width, generator=g), torch.randn(96, width, generator=g)
    if dead:
        x[:, 2] = 0
    H = x.t() @ x
    kept, new = local_prune(W, H, remove, size, rounds)
    want = ref.local_prune(W, H, remove, size, rounds, dtype=torch.float64).float()
    torch.testing.assert_close(new, want, rtol=1e-5, atol=1e-5)
    assert len(kept) == width // size - remove
    removed_cols = torch.ones(width, dtype=torch.bool)
    removed_cols[(kept[:, None] * size + torch.arange(size)).reshape(-1)] = False
    assert new[:, removed_cols].abs().max() == 0 if remove else torch.equal(kept, torch.arange(width // size))
    if remove == 0:  # the sparsity-0 level: the dense weight, dead inputs zeroed
        assert torch.equal(new[:, 3:], W[:, 3:]) and new[:, 2].abs().max() == 0


def test_local_pruning_refuses_removing_every_group():
    with pytest.raises(InvalidInput, match="removes 0 to 3 of 4 groups"):
        local_prune(torch.randn(3, 8), torch.eye(8), 4, 2, 1)


@pytest.mark.parametrize("units, centre, step", [(64, 16, 8), (64, 32, 8), (64, 8, 16), (256, 64, 32), (64, 0, 8)])
def test_the_level_grid_is_the_references(units, centre, step):
    """`Pruner._prune_group`'s levels (sparsity c + l * weights_diff / numel, groups kept int(n (1 - s))), less the
    level that removes every unit, which a sliced layer cannot hold."""
    D = 8
    want = [(lvl, units - ref.groups_to_keep(units, sp)) for lvl, sp in
            ref.level_sparsities(centre / units, step / units, 9, weights_diff=step * D, numel=units * D)]  # fmt: skip
    grid = Grid(units, centre, step, 4)
    assert [(lvl, grid.removed(lvl)) for lvl in grid.levels] == [(lvl, r) for lvl, r in want if r < units]


def test_the_mutation_is_the_references_and_keeps_each_types_budget():
    types, bounds = ["attn"] * 5 + ["mlp"] * 5, [(0, 1)] * 5 + [(-4, 4)] * 5
    mine, theirs = random.Random(3), random.Random(3)
    state = [0] * 10
    for _ in range(200):
        child = mutate(state, types, bounds, mine)
        assert child == ref.mutate(state, types, 9, theirs, level_bounds=bounds)
        assert sum(child[:5]) == sum(state[:5]) and sum(child[5:]) == sum(state[5:])
        assert all(lo <= v <= hi for v, (lo, hi) in zip(child, bounds))
        state = child
    kids = offspring([0] * 10, 16, types, bounds, random.Random(0))
    assert len(kids) == 16 and len({tuple(k) for k in kids}) == 16


def test_a_type_that_cannot_move_is_left_alone():
    """Every attention module at its lowest level and none able to rise: the reference's draw never ends; here
    only the MLP moves."""
    types, bounds = ["attn"] * 3 + ["mlp"] * 3, [(0, 0)] * 3 + [(-2, 2)] * 3
    for seed in range(20):
        child = mutate([0] * 6, types, bounds, random.Random(seed))
        assert child[:3] == [0, 0, 0] and sum(child[3:]) == 0


def test_the_sparse_kl_and_the_minibatches_are_the_references():
    g = torch.Generator().manual_seed(0)
    dense = torch.randn(3, 10, 50, generator=g)
    pruned = dense + 0.3 * torch.randn(3, 10, 50, generator=g)
    values, ids = dense_topk(dense, 8)
    total, positions = sparse_kl_sum(values, ids, pruned)
    want = ref.sparse_kl(list(dense.unsqueeze(1)), list(pruned.unsqueeze(1)), 8)
    assert positions == 27 and total / positions == pytest.approx(want, rel=1e-5)
    assert sparse_kl_sum(values, ids, dense)[0] == pytest.approx(0.0, abs=1e-6)
    mine, theirs = random.Random(5), random.Random(5)
    for tokens in (7, 16, 40, 64):
        assert minibatch([16] * 4, tokens, mine) == ref.sample_minibatch([16] * 4, tokens, theirs)


def test_the_centres_meet_the_target_in_whole_units():
    shape = model_shape(tiny_model("llama", num_hidden_layers=3, intermediate_size=96))
    centres = initial_centres(shape, 0.3)
    assert centres == {"attn": [1, 1, 1], "mlp": [22, 22, 22]}  # 1 of 2 KV groups; the MLP makes up the rest
    removed = centres["attn"][0] * shape.attn_unit_cost + centres["mlp"][0] * shape.mlp_unit_cost
    assert abs(removed * shape.hidden_size / shape.layer_block_weights(0) - 0.3) < 0.01
    assert level_steps(shape, TyrConfig(min_channels=4), 0) == {"attn": 1, "mlp": 12}
    assert level_steps(shape, TyrConfig(min_channels=4), 3) == {"attn": 1, "mlp": 4}  # 1.5 channels: the floor


@pytest.mark.parametrize("accumulate", ["centre", "dense"])
def test_the_supernet_prunes_every_level_on_its_blocks_inputs(accumulate, tmp_path):
    """Layer 0's levels are the reference's local pruning on the embeddings' H; layer 1's inputs come from layer 0
    at its centre level (error accumulation) or dense (the reference code as written)."""
    model = tiny_model("qwen2", num_hidden_layers=2, intermediate_size=64)
    shape, batch = model_shape(model), random_batch(n=4, t=12)
    config = TyrConfig(accumulate=accumulate, min_channels=4)
    modules = modules_of(shape, initial_centres(shape, 0.3), level_steps(shape, config, 0), config.levels)
    net = Supernet(model, modules, tmp_path)
    net.build(model, batch.input_ids, config, micro_batch=4)
    source = net.work if accumulate == "centre" else model
    hidden, kwargs = layer_inputs(model, batch.input_ids, 4)
    for i, layer in enumerate(decoder_layers(source)):
        proj = layer_projections(model)[i]  # the dense block, run on this block's inputs: both H in one pass
        grams = {"o_proj": Gram(proj.o_proj.in_features), "down_proj": Gram(proj.down_proj.in_features)}
        handles = [getattr(proj, n).register_forward_pre_hook(g) for n, g in grams.items()]
        with torch.no_grad():
            for h, kw in zip(hidden, kwargs[i]):
                decoder_layers(model)[i](h, **kw)
            outs = [layer(h, **kw) for h, kw in zip(hidden, kwargs[i])]  # the next block's inputs
        for h in handles:
            h.remove()
        for j, module in enumerate(modules):
            if module.layer != i:
                continue
            name = "o_proj" if module.kind == "attn" else "down_proj"
            for level in module.grid.levels:
                want = ref.local_prune(getattr(proj, name).weight.detach(), grams[name].H, module.grid.removed(level),
                                       module.group_size, config.attn_rounds if module.kind == "attn" else 16,
                                       dtype=torch.float64)  # fmt: skip
                net.load([level if k == j else net.loaded[k] for k in range(len(modules))])
                torch.testing.assert_close(getattr(layer_projections(net.work)[i], name).weight, want.float(),
                                           rtol=1e-4, atol=1e-5)  # fmt: skip
            net.load([0] * len(modules))
        hidden = [o[0] if isinstance(o, tuple) else o for o in outs]
    assert {p.name for p in tmp_path.iterdir()} == {f"{m.name}.safetensors" for m in modules}


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_tyr_prunes_every_family_to_its_target_and_slices(family, tmp_path):
    model = tiny_model(family, num_hidden_layers=3, intermediate_size=64)
    lm = LoadedModel(model, None, "tiny", "local", 0.0)
    settings = PruneSettings(sparsity=0.3, method="tyr", method_settings=TYR_SMALL, use_cache=False)
    batch = random_batch(n=6, t=16)
    result = prune(lm, settings, batch=batch)  # the calibration: this batch (random ids, no tokenizer)
    plan, report = result.plan, result.report
    assert plan.settings.method == "tyr" and plan.settings.method_settings == TyrConfig(**_tuples(TYR_SMALL)).to_dict()
    assert abs(report["achieved_block_sparsity"] - 0.3) < 0.05, report["achieved_block_sparsity"]
    tyr = plan.stats["tyr"]
    assert len(tyr["iterations"]) == 1 and len(tyr["iterations"][0]["kl_per_generation"]) == 2
    per_type = {k: sum(v) for k, v in tyr["removed_per_layer"].items()}
    assert per_type == {k: 3 * v[0] for k, v in initial_centres(model_shape(model), 0.3).items()}  # budget kept
    assert model_shape(result.model).num_kv_heads == tuple(plan.kept_kv_groups)
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.isfinite(result.model(ids).logits).all()


def test_the_cli_path_prunes_saves_and_reloads_with_the_searched_distribution(tiny_with_tokenizer_dir, tmp_path):
    """`prune --method tyr` on a folder with a tokenizer: calibration text drawn, searched, re-solved; the folder
    reloads with the same logits and its plan records the searched levels."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_with_tokenizer_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_with_tokenizer_dir)
    lm = LoadedModel(model, tok, "tiny", "local", 0.0)
    settings = PruneSettings(sparsity=0.4, method="tyr", method_settings=TYR_SMALL, samples=4, seq_len=32)
    result = prune(lm, settings)
    assert result.report["method"] == "tyr" and result.plan.settings.calibration["samples"] == 4
    save_pruned(result.model, tok, result.plan, tmp_path / "p")
    again = load_pruned(tmp_path / "p")
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(again.model(ids).logits, result.model(ids).logits, rtol=1e-4, atol=1e-4)
    assert again.plan.stats["tyr"] == result.plan.stats["tyr"]
    # the plan alone, applied again with the same calibration settings, gives the same model
    replay = prune(lm, settings, plan=result.plan)
    with torch.no_grad():
        torch.testing.assert_close(replay.model(ids).logits, result.model(ids).logits)


def _tuples(settings: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()}


def test_sparsity_zero_keeps_everything_and_changes_nothing():
    model = tiny_model("llama", num_hidden_layers=2)
    plan = get_method("tyr").plan_on_data(model, 0.0, TyrConfig(**_tuples(TYR_SMALL)), random_batch(n=4, t=16))
    assert plan.kept_kv_groups == [2, 2] and plan.kept_neurons == [48, 48]
    pruned = get_method("tyr").apply(model, plan, batch=random_batch(n=4, t=16))
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # every column kept: the least squares give the weights back (up to the damping)
        torch.testing.assert_close(pruned(ids).logits, model(ids).logits, rtol=1e-3, atol=1e-3)


def test_tyr_settings_are_checked_and_the_reference_defaults_recorded():
    assert REFERENCE.offspring == 128 and REFERENCE.stage_tokens == (2048, 16384, 131072)
    assert REFERENCE.survivors == (16, 4, 2) and REFERENCE.kl_topk == 8192 and REFERENCE.iterations == 4
    assert search_tokens(TyrConfig()) == 8 * (16 * 512 + 5 * 2048)
    for bad, message in [({"levels": 8}, "levels must be odd"), ({"survivors": [4, 2, 1]}, "one survivor count per"),
                         ({"survivors": [1, 4]}, "must shrink"), ({"accumulate": "x"}, "accumulate must be one of"),
                         ({"step": 1.5}, "step must be")]:  # fmt: skip
        with pytest.raises(InvalidInput, match=message):
            method_config("tyr", bad)
    with pytest.raises(InvalidInput, match=r"re-solves the kept weights .* Drop --reconstruct"):
        PruneSettings(sparsity=0.2, method="tyr", reconstruct=True)
    with pytest.raises(InvalidInput, match=r"stages read up to"):
        get_method("tyr").plan_on_data(tiny_model("llama"), 0.2, TyrConfig(), random_batch(n=2, t=8))
    with pytest.raises(InvalidInput, match="has no unit scores"):
        get_method("tyr").scores(tiny_model("llama"), TyrConfig(), random_batch())


def test_a_searched_plan_is_cached_by_content_and_found_again():
    model, batch = tiny_model("llama", num_hidden_layers=2), random_batch(n=4, t=16)
    config, method = TyrConfig(**_tuples(TYR_SMALL)), get_method("tyr")
    first = method.plan_on_data(model, 0.3, config, batch)
    messages = []
    again = method.plan_on_data(model, 0.3, config, batch, progress=lambda f, m: messages.append(m))
    assert again.to_json() == first.to_json() and messages == ["tyr: the searched plan loaded from the cache"]
    other = method.plan_on_data(model, 0.3, TyrConfig(**{**_tuples(TYR_SMALL), "seed": 1}), batch, use_cache=False)
    assert other.settings.method_settings["seed"] == 1


def test_local_pruning_of_wide_groups_after_the_thread_count_is_set():
    """`bench --threads 2` sets torch's threads; the batched float64 inverse then failed in MKL on 3 groups of 192
    columns (SmolLM2's KV groups). Checked against the reference, threads restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        g = torch.Generator().manual_seed(0)
        W, x = torch.randn(8, 576, generator=g, dtype=torch.float64), torch.randn(700, 576, generator=g)
        H = (x.t() @ x).double()
        kept, new = local_prune(W, H, 1, 192, 1)
        want = ref.local_prune(W, H, 1, 192, 1, dtype=torch.float64)
        torch.testing.assert_close(new, want, rtol=1e-6, atol=1e-8)
        assert len(kept) == 2
    finally:
        torch.set_num_threads(threads)
