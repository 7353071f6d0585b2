"""T5 (issue 26, first steps) on tiny random T5 models of both FFN kinds: NIRVANA's seq2seq saliency
against an autograd reference that sums each head's and neuron's weights by hand, and slicing against
the dense model with the removed units masked (logits and greedy generation with the KV cache)."""

from __future__ import annotations

import copy

import pytest
import torch

from nirvana.errors import InvalidInput, UnsupportedArchitecture
from nirvana.t5.anatomy import KINDS, is_sliced, kind_modules
from nirvana.t5.scoring import compute_t5_scores, split_windows, t5_scores
from tests.tiny import tiny_model
from tests.tiny_t5 import tiny_t5


def reference(model, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Autograd on the whole batch, then each unit's weights summed one by one (loops, no reshapes)."""
    half = ids.shape[1] // 2
    enc, dec = ids[:, :half], model._shift_right(ids[:, half:])
    logits = model(input_ids=enc, decoder_input_ids=dec, use_cache=False).logits
    f = logits.max(dim=1).values.mean()  # mean over (N, V) of the max over decoder positions
    params = dict(model.named_parameters())
    grads = dict(zip(params, torch.autograd.grad(f, list(params.values()), allow_unused=True)))

    def s(name):
        g = grads[name]
        return torch.zeros_like(params[name]) if g is None else (g * params[name]).abs().double()

    out = {}
    for kind, k in KINDS.items():
        stack = model.encoder if k.stack == "encoder" else model.decoder
        rows = []
        for i, _ in enumerate(stack.block):
            prefix = f"{k.stack}.block.{i}.layer.{k.sublayer}.{k.module}."
            if k.attention:
                d, heads = model.config.d_kv, model.config.num_heads
                vals = []
                for h in range(heads):
                    v = sum(s(prefix + p + ".weight")[h * d : (h + 1) * d, :].sum() for p in "qkv")
                    v = v + s(prefix + "o.weight")[:, h * d : (h + 1) * d].sum()
                    if prefix + "relative_attention_bias.weight" in params:
                        v = v + s(prefix + "relative_attention_bias.weight")[:, h].sum()
                    vals.append(v)
            else:
                wi = [n for n in ("wi", "wi_0", "wi_1") if prefix + n + ".weight" in params]
                vals = [
                    sum(s(prefix + n + ".weight")[j, :].sum() for n in wi) + s(prefix + "wo.weight")[:, j].sum()
                    for j in range(model.config.d_ff)
                ]
            rows.append(torch.stack(vals))
        out[kind] = torch.stack(rows).float()
    return out


@pytest.mark.parametrize("ff", ["relu", "gated-gelu"])
def test_t5_scores_equal_the_autograd_reference_and_micro_batches_add_up(ff):
    model = tiny_t5(ff)
    ids = torch.randint(1, 64, (4, 12), generator=torch.Generator().manual_seed(1))
    scores = t5_scores(model, ids)
    expected = reference(model, ids)
    assert {k: tuple(v.shape) for k, v in scores.items()} == {
        "enc_self": (2, 4), "dec_self": (3, 4), "cross": (3, 4), "enc_ffn": (2, 24), "dec_ffn": (3, 24),
    }  # fmt: skip
    for kind in KINDS:
        torch.testing.assert_close(scores[kind], expected[kind], rtol=1e-5, atol=1e-8)
        assert (scores[kind] > 0).float().mean() > 0.9, kind  # (a ReLU neuron dead on every token scores 0)
    chunked = t5_scores(model, ids, micro_batch=1)
    for kind in KINDS:
        torch.testing.assert_close(chunked[kind], scores[kind], rtol=1e-4, atol=1e-8)
    assert all(p.grad is None for p in model.parameters())  # nothing left behind


def test_the_relative_bias_column_belongs_to_its_head_in_the_owning_block_only():
    model = tiny_t5("relu")
    ids = torch.randint(1, 64, (2, 10), generator=torch.Generator().manual_seed(2))
    with_bias = t5_scores(model, ids)["enc_self"]
    kind_modules(model, "enc_self")[0].relative_attention_bias.weight.data.zero_()  # its saliency vanishes
    without = t5_scores(model, ids)["enc_self"]
    assert (with_bias[0] != without[0]).any()
    assert kind_modules(model, "enc_self")[1].has_relative_attention_bias is False


def test_bad_input():
    with pytest.raises(UnsupportedArchitecture, match="not a T5 encoder-decoder"):
        t5_scores(tiny_model("llama"), torch.zeros(2, 8, dtype=torch.long))
    with pytest.raises(InvalidInput, match="T >= 2 to split in halves"):
        split_windows(torch.zeros(2, 1, dtype=torch.long))
    from nirvana.t5.slicing import slice_t5

    model = tiny_t5("relu")
    kept = _kept(model, 0, True)
    for kind, bad in (("enc_self", [[], [0]]), ("cross", [[0], [1], [4]]), ("dec_ffn", [[0, 0], [1], [2]])):
        with pytest.raises(InvalidInput, match=f"kept {kind} of layer"):
            slice_t5(model, {**kept, kind: bad})
    with pytest.raises(InvalidInput, match="one list per layer"):
        slice_t5(model, {**kept, "enc_ffn": [[0]]})
    sliced = slice_t5(model, kept)
    with pytest.raises(InvalidInput, match="already sliced"):
        slice_t5(sliced, kept)
    assert is_sliced(sliced) and not is_sliced(model)
    with pytest.raises(InvalidInput, match=r"already pruned .*score the dense model"):
        compute_t5_scores(sliced, "magnitude", use_cache=False)  # scores of a sliced T5 index no dense unit


def _kept(model, seed: int, drop_first_heads: bool) -> dict:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for kind, k in KINDS.items():
        rows = []
        for i, m in enumerate(kind_modules(model, kind)):
            total = m.n_heads if k.attention else m.wo.in_features
            keep = sorted(torch.randperm(total, generator=g)[: max(1, total // 2 + i % 2)].tolist())
            if k.attention and i == 0 and not drop_first_heads:
                keep = list(range(total))  # the block that owns the relative bias keeps every head
            rows.append(keep)
        out[kind] = rows
    return out


def _masked(model, kept):
    """The dense model with each removed head's o columns and each removed neuron's wo column zeroed."""
    masked = copy.deepcopy(model)
    with torch.no_grad():
        for kind, k in KINDS.items():
            for units, m in zip(kept[kind], kind_modules(masked, kind)):
                if k.attention:
                    d = m.key_value_proj_dim
                    for h in set(range(m.n_heads)) - set(units):
                        m.o.weight[:, h * d : (h + 1) * d] = 0
                else:
                    for j in set(range(m.wo.in_features)) - set(units):
                        m.wo.weight[:, j] = 0
    return masked


@pytest.mark.parametrize("ff", ["relu", "gated-gelu"])
@pytest.mark.parametrize("drop_first_heads", [False, True], ids=["bias-owner-whole", "bias-owner-sliced"])
def test_a_sliced_t5_equals_the_dense_model_with_the_removed_units_masked(ff, drop_first_heads):
    from nirvana.t5.slicing import slice_t5

    model = tiny_t5(ff)
    kept = _kept(model, 3, drop_first_heads)
    sliced = slice_t5(model, kept)
    enc = torch.randint(1, 64, (2, 7), generator=torch.Generator().manual_seed(4))
    dec = torch.randint(1, 64, (2, 5), generator=torch.Generator().manual_seed(5))
    expected = _masked(model, kept)(input_ids=enc, decoder_input_ids=dec).logits
    torch.testing.assert_close(sliced(input_ids=enc, decoder_input_ids=dec).logits, expected, rtol=1e-5, atol=1e-5)
    sizes = {kind: [len(u) for u in rows] for kind, rows in kept.items()}
    assert [m.q.out_features // 8 for m in kind_modules(sliced, "cross")] == sizes["cross"]
    assert [m.wo.in_features for m in kind_modules(sliced, "enc_ffn")] == sizes["enc_ffn"]
    assert sum(p.numel() for p in sliced.parameters()) < sum(p.numel() for p in model.parameters())
    # generate() with the KV cache (on equal stacks: transformers 5.24 sizes T5's cache by the encoder's depth)
    even = tiny_t5(ff, decoder_layers=2)
    kept_even = _kept(even, 3, drop_first_heads)
    greedy = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False)
    out = slice_t5(even, kept_even).generate(input_ids=enc, **greedy)
    assert out.shape == (2, 5) and torch.equal(out, _masked(even, kept_even).generate(input_ids=enc, **greedy))


def test_t5_gamma_star_known_answers():
    from nirvana.pruning.allocation import t5_default_gamma

    ca = 4 * 64  # T5-base: d_kv 64, 12 heads, 12 + 12 blocks
    heads_all, heads_enc, heads_dec = 12 * (12 + 2 * 12), 12 * 12, 12 * 2 * 12
    assert t5_default_gamma(heads_all, 3072 * 24, ca, 2) == pytest.approx(2 / 3)  # T5-base, ReLU
    assert t5_default_gamma(heads_all, 2048 * 24, ca, 3) == pytest.approx(2 / 3)  # FLAN-T5-base, gated
    assert t5_default_gamma(heads_enc, 3072 * 12, ca, 2) == pytest.approx(1.0)
    assert t5_default_gamma(heads_dec, 3072 * 12, ca, 2) == pytest.approx(0.5)


@pytest.mark.parametrize("ff", ["relu", "gated-gelu"])
@pytest.mark.parametrize("scope", ["global", "per-stack"])
def test_t5_allocation_meets_the_budget_and_slices(ff, scope):
    from nirvana.pruning.allocation import Allocation, allocate, unit_kinds
    from nirvana.scoring.scores import Scores
    from nirvana.t5.anatomy import t5_shape
    from nirvana.t5.slicing import slice_t5

    model = tiny_t5(ff, heads=8, d_ff=96)  # units fine enough for the budget to land within 1%
    ids = torch.randint(1, 64, (4, 12), generator=torch.Generator().manual_seed(1))
    scores = t5_scores(model, ids)
    shape, units = t5_shape(model), Scores(scores, "nirvana", "fp", family="t5")
    ca, cm = (unit_kinds("t5", shape)[k].cost for k in ("enc_self", "enc_ffn"))
    assert (ca, cm) == (32, 2 if ff == "relu" else 3)

    def allocate_t5(sparsity: float, align: int):
        plan = allocate(units, shape, Allocation(sparsity, align=align, kind=scope))
        return plan.kept, plan.stats

    kept, stats = allocate_t5(0.3, 1)
    # per stack, each of the two rankings floors its own counts; one head is 1.1% of this tiny model's blocks
    assert abs(stats["achieved_block_sparsity"] - 0.3) < (0.01 if scope == "global" else 0.02), stats
    assert all(rows and all(r for r in rows) for rows in kept.values())  # at least one unit everywhere
    counted = sum(sum(len(r) for r in kept[k]) * (ca if KINDS[k].attention else cm) for k in KINDS)
    sliced = slice_t5(model, kept)
    block = sum(p.numel() for n, p in sliced.named_parameters() if ".layer." in n and "layer_norm" not in n
                and "relative_attention_bias" not in n)  # fmt: skip
    assert block == counted * model.config.d_model  # the plan's weights are the model's real weights
    if scope == "global":  # one ranking: every kept unit outscores every removed one of its ranking
        for group in ([k for k in KINDS if KINDS[k].attention], [k for k in KINDS if not KINDS[k].attention]):
            kept_scores = [float(scores[k][i, u]) for k in group for i, row in enumerate(kept[k]) for u in row]
            removed = [float(scores[k][i, u]) for k in group for i, row in enumerate(kept[k])
                       for u in range(scores[k].shape[1]) if u not in row]  # fmt: skip
            assert max(removed) <= min(kept_scores)
    dense = allocate_t5(0.0, 1)[0]
    assert all(len(r) == (8 if KINDS[k].attention else 96) for k in KINDS for r in dense[k])  # sparsity 0: dense
    kept8, _ = allocate_t5(0.3, 8)
    assert all(len(r) % 8 == 0 for k in ("enc_ffn", "dec_ffn") for r in kept8[k])


@pytest.mark.parametrize("ff", ["relu", "gated-gelu"])
def test_prune_save_and_reload_through_nirvana_and_stock_transformers(ff, tmp_path):
    """The pipeline's prune on a T5 folder: the plan is JSON, the saved folder reloads (nirvana, and stock
    transformers through the shipped modeling file) with the same logits, the sliced widths are the plan's."""
    from transformers import AutoModelForSeq2SeqLM

    from nirvana.checkpoints.loading import load_model
    from nirvana.checkpoints.pruned import save_prune_output
    from nirvana.pipeline import PruneSettings, load_plan, prune
    from nirvana.t5.anatomy import kept_units
    from tests.tiny_t5 import write_tiny_t5

    lm = load_model(str(write_tiny_t5(tmp_path / "dense", ff)))
    settings = PruneSettings(sparsity=0.3, calib="pydoc", samples=4, seq_len=32, align=1, use_cache=False)
    result = prune(lm, settings)
    assert result.plan.family == "t5" and abs(result.report["achieved_block_sparsity"] - 0.3) < 0.02
    assert kept_units(result.model) == result.plan.kept_counts
    assert result.report["params_after"] < result.report["params_before"]
    save_prune_output(tmp_path / "out", result.model, lm.tokenizer, result.plan, result.report)
    assert load_plan(tmp_path / "out" / "plan.json").to_dict() == result.plan.to_dict()
    again = load_model(str(tmp_path / "out"))
    stock = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out" / "model", trust_remote_code=True).eval()
    enc = torch.randint(3, 300, (2, 9), generator=torch.Generator().manual_seed(0))
    dec = torch.randint(3, 300, (2, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = result.model(input_ids=enc, decoder_input_ids=dec).logits
        torch.testing.assert_close(again.model(input_ids=enc, decoder_input_ids=dec).logits, expected)
        torch.testing.assert_close(stock(input_ids=enc, decoder_input_ids=dec).logits, expected)
    assert again.plan.to_dict() == result.plan.to_dict()
    # the plan applied again to the dense model gives the same model
    replay = prune(load_model(str(tmp_path / "dense")), plan=again.plan)
    with torch.no_grad():
        torch.testing.assert_close(replay.model(input_ids=enc, decoder_input_ids=dec).logits, expected)


def test_t5_criteria_and_refusals(tmp_path):
    from nirvana.checkpoints.loading import load_model
    from nirvana.pipeline import PruneSettings, prune
    from tests.tiny_t5 import write_tiny_t5

    lm = load_model(str(write_tiny_t5(tmp_path / "dense", "relu")))
    small = dict(calib="pydoc", samples=4, seq_len=32, use_cache=False)
    for criterion in ("taylor", "magnitude", "random"):
        result = prune(lm, PruneSettings(sparsity=0.3, criterion=criterion, **small))
        assert (
            result.report["criterion"] == criterion and result.report["params_after"] < result.report["params_before"]
        )
    with pytest.raises(InvalidInput, match="not available on T5"):
        prune(lm, PruneSettings(sparsity=0.3, criterion="wanda", **small))
    with pytest.raises(InvalidInput, match="written for decoder-only models"):
        prune(lm, PruneSettings(sparsity=0.3, method="flap", **small))
    with pytest.raises(InvalidInput, match="not a T5 encoder-decoder allocation"):
        prune(lm, PruneSettings(sparsity=0.3, allocation="uniform", **small))
    per_stack = prune(lm, PruneSettings(sparsity=0.3, allocation="per-stack", **small))
    assert set(per_stack.plan.settings.gamma) == {"enc_self+enc_ffn", "dec_self+cross+dec_ffn"}


def test_cli_prune_writes_a_t5_folder(tmp_path):
    import json
    import subprocess
    import sys

    from tests.tiny_t5 import write_tiny_t5

    folder = write_tiny_t5(tmp_path / "t5")
    out = tmp_path / "t30"
    cmd = [sys.executable, "-m", "nirvana", "prune", "--model", str(folder), "--sparsity", "0.3", "--calib", "pydoc",
           "--samples", "4", "--seq-len", "32", "--out", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["architecture"] == "t5" and report["params_after"] < report["params_before"]
    assert (out / "model" / "modeling_t5_sliced.py").exists()
    bad = subprocess.run([*cmd[:-2], "--out", str(tmp_path / "x"), "--method", "flap"], capture_output=True, text=True)
    assert bad.returncode == 2 and "decoder-only" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "x").exists()
