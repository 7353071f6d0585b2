"""Weight reconstruction (`--reconstruct`, nirvana.pruning.reconstruct): Tyr-the-Pruner's least squares on the kept
columns of o_proj and down_proj, block by block on the pruned earlier blocks' outputs. Checked against an
independent least-squares solve (torch.linalg.lstsq on the stacked activations), at zero sparsity (nothing
changes), on every tiny family (Gemma-3's layers get their own masks), with FLAP's biases, through `prune`, and
through save and load."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import random_batch

from nirvana.checkpoints.loaded import LoadedModel
from nirvana.checkpoints.pruned import load_pruned, save_pruned
from nirvana.errors import InvalidInput
from nirvana.models.architectures import decoder_layers, layer_projections
from nirvana.models.shapes import model_shape
from nirvana.pipeline import PruneSettings, prune
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.reconstruct import reconstruct, solve_kept
from nirvana.pruning.slicing import apply_plan, group_rows
from nirvana.scoring.criteria import compute_scores
from nirvana.t5.steps import check_t5_settings
from tests.tiny import TINY_FAMILIES, tiny_model


def _ridge(X: torch.Tensor, W: torch.Tensor, kept: torch.Tensor, damp: float) -> torch.Tensor:
    """min ||X_K W'^T - X W^T||^2 + lam ||W' - W_K||^2, lam = damp * mean(diag X^T X): the damped normal
    equations of the reference, as one stacked least-squares problem solved by lstsq."""
    X, W = X.double(), W.double()
    lam = damp * (X * X).sum(0).mean()
    A = torch.cat([X[:, kept], math.sqrt(lam) * torch.eye(len(kept), dtype=torch.float64)])
    Y = torch.cat([X @ W.t(), math.sqrt(lam) * W[:, kept].t()])
    return torch.linalg.lstsq(A, Y).solution.t()


def test_the_solve_is_the_damped_least_squares_fit_and_keeping_everything_gives_w_back():
    g = torch.Generator().manual_seed(0)
    X, W = torch.randn(200, 12, generator=g), torch.randn(5, 12, generator=g)
    kept = torch.tensor([0, 2, 3, 7, 8, 11])
    H = X.t() @ X
    solved, _ = solve_kept(W, H, kept)
    torch.testing.assert_close(solved.double(), _ridge(X, W, kept, 0.01), rtol=1e-5, atol=1e-6)
    every, _ = solve_kept(W, H, torch.arange(12))
    torch.testing.assert_close(every, W, rtol=1e-5, atol=1e-6)  # G = H_damped B: the damping cancels
    # undamped, the fit is the plain least squares, which no other W_K beats
    plain, _ = solve_kept(W, H, kept, damp=0.0)
    error = lambda Wk: ((X[:, kept] @ Wk.t() - X @ W.t()) ** 2).sum()
    assert error(plain) <= error(W[:, kept]) and error(plain) <= error(solved)


def test_a_bias_is_solved_with_the_weights_as_the_coefficient_of_a_constant_input():
    g = torch.Generator().manual_seed(1)
    X, W, b = torch.randn(300, 10, generator=g) + 0.5, torch.randn(4, 10, generator=g), torch.randn(4, generator=g)
    kept = torch.tensor([1, 2, 5, 6, 9])
    weight, bias = solve_kept(W, X.t() @ X, kept, damp=0.0, bias=b, sums=X.sum(0), count=X.shape[0])
    A = torch.cat([X[:, kept], torch.ones(300, 1)], 1).double()
    sol = torch.linalg.lstsq(A, (X @ W.t() + b).double()).solution
    torch.testing.assert_close(weight.double(), sol[:-1].t(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(bias.double(), sol[-1], rtol=1e-5, atol=1e-6)


def _plan(model, sparsity: float, align: int = 1):
    scores = compute_scores(model, "magnitude", use_cache=False)
    return allocate(scores, model_shape(model), Allocation(sparsity, align=align))


def _module_inputs(model: torch.nn.Module, layer: int, ids: torch.Tensor, replace_with=None) -> dict[str, torch.Tensor]:
    """o_proj's and down_proj's inputs in decoder layer `layer` of `model` (with that layer swapped for
    `replace_with` when given), from one full forward: an independent way to the activations."""
    layers = decoder_layers(model)
    original = layers[layer]
    if replace_with is not None:
        layers[layer] = replace_with
    proj = layer_projections(model)[layer]
    seen = {}
    hooks = [
        proj.o_proj.register_forward_pre_hook(
            lambda m, a: seen.__setitem__("o_proj", a[0].reshape(-1, a[0].shape[-1]))
        ),
        proj.down_proj.register_forward_pre_hook(
            lambda m, a: seen.__setitem__("down_proj", a[0].reshape(-1, a[0].shape[-1]))
        ),
    ]
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
        layers[layer] = original
    return seen


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_every_layer_is_the_least_squares_fit_on_the_reconstructed_earlier_layers(family):
    dense = tiny_model(family, seed=0).eval()
    plan = _plan(dense, 0.5)
    pruned = apply_plan(dense, plan)
    batch = random_batch(n=6, t=12)
    reconstruct(dense, pruned, plan, batch, micro_batch=4)
    shape = model_shape(dense)
    d, g = shape.head_dim, shape.group_size
    for i, layer_plan in enumerate(plan.layers):
        # the dense layer i on the inputs the reconstructed layers 0..i-1 give (the pruned model, layer i swapped)
        X = _module_inputs(pruned, i, batch.input_ids, replace_with=decoder_layers(dense)[i])
        kept = {
            "o_proj": group_rows(layer_plan.kept_kv_groups, g * d),
            "down_proj": torch.tensor(layer_plan.kept_neurons),
        }
        for name in ("o_proj", "down_proj"):
            dense_w = getattr(layer_projections(dense)[i], name).weight.detach()
            expected = _ridge(X[name].detach(), dense_w, kept[name], 0.01)
            got = getattr(layer_projections(pruned)[i], name).weight.detach()
            torch.testing.assert_close(got.double(), expected, rtol=2e-4, atol=2e-5, msg=f"{family} layer {i} {name}")


def test_zero_sparsity_changes_nothing():
    dense = tiny_model("llama", seed=0).eval()
    plan = _plan(dense, 0.0)
    pruned = apply_plan(dense, plan)
    reconstruct(dense, pruned, plan, random_batch(n=4, t=12))
    ids = torch.randint(0, 64, (2, 9))
    torch.testing.assert_close(pruned(ids).logits, dense(ids).logits, rtol=1e-5, atol=1e-5)


def test_reconstruction_brings_the_pruned_outputs_closer_to_the_dense_ones():
    dense = tiny_model("qwen2", seed=3).eval()
    plan = _plan(dense, 0.5)
    batch = random_batch(n=8, t=16, seed=5)
    plain, fitted = apply_plan(dense, plan), reconstruct(dense, apply_plan(dense, plan), plan, batch)
    with torch.no_grad():
        target = dense(batch.input_ids).logits
        err = lambda m: ((m(batch.input_ids).logits - target) ** 2).mean().item()
        assert err(fitted) < err(plain)


def test_flaps_biases_are_re_solved_with_the_weights():
    from nirvana.methods import get_method, method_config

    dense = tiny_model("llama", seed=0).eval()
    batch = random_batch(n=6, t=12)
    flap = get_method("flap")
    config = method_config("flap")
    scores = flap.scores(dense, config, batch, use_cache=False)
    plan = flap.allocate(scores, model_shape(dense), 0.4, config)
    pruned = flap.apply(dense, plan, scores=scores)
    before = layer_projections(pruned)[0].o_proj.bias.detach().clone()
    reconstruct(dense, pruned, plan, batch)
    X = _module_inputs(pruned, 0, batch.input_ids, replace_with=decoder_layers(dense)[0])["o_proj"].double()
    shape = model_shape(dense)
    kept = group_rows(plan.layers[0].kept_kv_groups, shape.group_size * shape.head_dim)
    o = layer_projections(pruned)[0].o_proj
    W = layer_projections(dense)[0].o_proj.weight.detach().double()
    fit = ((X[:, kept] @ o.weight.detach().double().t() + o.bias.detach().double() - X @ W.t()) ** 2).sum()
    flap_fit = ((X[:, kept] @ W[:, kept].t() + before.double() - X @ W.t()) ** 2).sum()
    assert not torch.equal(o.bias.detach(), before) and fit < flap_fit


def test_prune_reconstructs_saves_and_reloads(tiny_with_tokenizer_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_with_tokenizer_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_with_tokenizer_dir)
    lm = LoadedModel(model, tok, name="tiny", source="test", load_seconds=0)
    settings = dict(sparsity=0.5, criterion="magnitude", samples=4, seq_len=16)
    plain = prune(lm, PruneSettings(**settings))
    fitted = prune(lm, PruneSettings(**settings, reconstruct=True))  # a data-free criterion: the batch is drawn
    assert fitted.plan.to_json() == plain.plan.to_json()  # the same units: only the kept weights move
    assert fitted.report["reconstructed"] and "reconstruct" in fitted.report["timings"]
    assert not plain.report["reconstructed"]
    ids = torch.randint(0, 64, (2, 9))
    assert not torch.allclose(fitted.model(ids).logits, plain.model(ids).logits)
    save_pruned(fitted.model, tok, fitted.plan, tmp_path / "out")
    again = load_pruned(tmp_path / "out").model
    torch.testing.assert_close(again(ids).logits, fitted.model(ids).logits)


def test_in_place_pruning_keeps_the_dense_model_that_reconstruction_fits_to(tiny_with_tokenizer_dir):
    """The CLI prunes in place; reconstruction needs the dense modules as its target, so it slices a copy
    (once an IndexError: the 'dense' o_proj was already sliced)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_with_tokenizer_dir)
    models = [AutoModelForCausalLM.from_pretrained(tiny_with_tokenizer_dir).eval() for _ in range(2)]
    dense = {k: v.clone() for k, v in models[0].state_dict().items()}
    settings = PruneSettings(sparsity=0.5, criterion="magnitude", samples=4, seq_len=16, reconstruct=True)
    results = [
        prune(LoadedModel(m, tok, name="tiny", source="test", load_seconds=0), settings, inplace=inplace)
        for m, inplace in zip(models, (True, False))
    ]
    ids = torch.randint(0, 64, (2, 9))
    torch.testing.assert_close(results[0].model(ids).logits, results[1].model(ids).logits)
    assert all(v.equal(dense[k]) for k, v in models[0].state_dict().items())


def test_what_reconstruction_cannot_fit_is_refused():
    with pytest.raises(InvalidInput, match="rotates and slices the residual stream"):
        PruneSettings(sparsity=0.2, method="slicegpt", reconstruct=True)
    with pytest.raises(InvalidInput, match="drop it on T5"):
        check_t5_settings(PruneSettings(sparsity=0.2, reconstruct=True))
    with pytest.raises(InvalidInput, match="reconstruct must be true or false"):
        PruneSettings(sparsity=0.2, reconstruct="yes")


def test_the_memory_plan_counts_the_copy_the_hidden_states_the_grams_and_the_solve():
    from transformers import LlamaConfig

    from nirvana.pruning.reconstruct import reconstruct_memory

    config = LlamaConfig(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=2, vocab_size=100, tie_word_embeddings=True)  # fmt: skip
    est = reconstruct_memory(config, samples=4, seq_len=8)
    params = 100 * 64 + 2 * (64 * 64 * 2 + 2 * 64 * 32 + 3 * 64 * 96 + 2 * 64) + 64  # tied head; no q/k/v bias
    c = est.components
    assert est.step == "reconstruction"
    assert c["pruned copy of the model (at most the dense one)"] == params * 4
    assert c["block inputs and outputs, all sequences"] == 2 * 4 * 8 * 64 * 4
    assert c["H of o_proj and down_proj (fp32)"] == 4 * (96**2 + 64**2)
    assert c["the solve (fp64)"] == 8 * (3 * 96 * 96 + 2 * 96 * 64)


def test_a_reconstruction_that_would_not_fit_is_refused_before_scoring(tiny_with_tokenizer_dir, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import nirvana.guard.memory as memory
    from nirvana.errors import OutOfMemory

    model = AutoModelForCausalLM.from_pretrained(tiny_with_tokenizer_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_with_tokenizer_dir)
    lm = LoadedModel(model, tok, name="tiny", source="test", load_seconds=0)
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 1000)
    monkeypatch.setattr("nirvana.pipeline._scored", lambda *a, **k: pytest.fail("scored before the memory check"))
    with pytest.raises(OutOfMemory, match=r"reconstruction needs about .*pruned copy of the model"):
        prune(lm, PruneSettings(sparsity=0.5, criterion="taylor", samples=4, seq_len=16, reconstruct=True))
    monkeypatch.undo()  # the machine's own memory again: the same prune runs
    assert prune(lm, PruneSettings(sparsity=0.5, criterion="magnitude", samples=4, seq_len=16, reconstruct=True))
