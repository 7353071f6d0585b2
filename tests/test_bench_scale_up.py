"""`bench scale-up`: one row measured in-process on a tiny model (the plan the guard checked, the memory
scoring added), rows resumed from the output, a model that is not installed skipped with its command."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest
import torch

from nirvana.bench import scale_up
from nirvana.bench.scale_up import ScaleUpConfig, measure_one, run_scale_up, table
from nirvana.cli import main


def test_one_row_records_the_checked_plan_and_what_scoring_added(tiny_with_tokenizer_dir):
    row = measure_one(str(tiny_with_tokenizer_dir), "nirvana", 4, 16)
    assert row["micro_batch"] in (1, 2, 4) and row["planned_gib"] > 0 and row["scoring_s"] >= 0
    assert set(row["plan"]) >= {"activations"} and row["peak_rss_gib"] >= row["rss_before_gib"]
    assert row["parameters"] > 0 and "| nirvana | 4 x 16 |" in table([row])


def test_rows_resume_and_a_missing_model_is_skipped(tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, **kwargs):
        model, method = cmd[-4], cmd[-3]
        calls.append((model, method))
        row = {"model": model, "method": method, "samples": 2, "seq_len": 8, "parameters": 1e6, "scoring_s": 1.0}
        row |= {"micro_batch": 2, "activation_checkpointing": False, "added_gib": 0.5, "planned_gib": 0.55}
        row |= {"plan_error": 0.1, "peak_rss_gib": 1.0, "heap": scale_up.heap_setting()}
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(row) + "\n", stderr="")

    monkeypatch.setattr(scale_up, "installed", lambda name: name != "qwen2.5-coder-1.5b")
    logs: list[str] = []
    config = ScaleUpConfig(("smollm2-135m", "qwen2.5-coder-1.5b"), ("nirvana", "flap"), 2, 8, tmp_path)
    rows = run_scale_up(config, logs.append, fake_run)
    assert calls == [("smollm2-135m", "nirvana"), ("smollm2-135m", "flap")] and len(rows) == 2
    assert any("skipped qwen2.5-coder-1.5b" in x and "make models-large" in x for x in logs)
    assert run_scale_up(config, logs.append, fake_run) == rows and len(calls) == 2  # resumed: nothing run again
    assert "+10%" in (tmp_path / "scale-up.md").read_text()
    again = run_scale_up(dataclasses.replace(config, rerun=True), logs.append, fake_run)  # --rerun: measured again
    assert len(calls) == 4 and len(again) == 4 and again[:2] == rows


def test_a_row_measured_under_another_heap_setting_is_measured_again_and_the_table_shows_the_latest(
    tmp_path, monkeypatch
):
    old = {"model": "smollm2-135m", "method": "flap", "samples": 2, "seq_len": 8, "parameters": 1e6, "scoring_s": 1.0}
    old |= {"micro_batch": 2, "activation_checkpointing": False, "added_gib": 0.9, "planned_gib": 0.6}
    old |= {"plan_error": -0.333, "peak_rss_gib": 1.0}  # no "heap": written before it was recorded
    (tmp_path / "scale-up.jsonl").write_text(json.dumps(old) + "\n")
    new = old | {"added_gib": 0.62, "plan_error": -0.032, "heap": scale_up.heap_setting()}
    ran = []

    def fake_run(cmd, **kwargs):
        ran.append(cmd[-3])
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(new) + "\n", stderr="")

    monkeypatch.setattr(scale_up, "installed", lambda name: True)
    rows = run_scale_up(ScaleUpConfig(("smollm2-135m",), ("flap",), 2, 8, tmp_path), lambda _: None, fake_run)
    assert ran == ["flap"] and len(rows) == 2  # the old row stays in the .jsonl
    table = (tmp_path / "scale-up.md").read_text()
    assert "-3%" in table and "-33%" not in table and table.count("| smollm2-135m |") == 1


def test_an_unknown_method_is_refused_with_the_accepted_ones(capsys):
    assert main(["bench", "scale-up", "--methods", "nirvana,obs"]) == 2
    err = capsys.readouterr().err
    assert "obs" in err and "llm-pruner" in err and "Traceback" not in err


def test_the_peak_is_scorings_own_not_an_earlier_transient_nor_paging_weights_in(tmp_path):
    from safetensors.torch import load_file, save_file

    big = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB, resident
    del big
    if not scale_up.reset_peak():
        pytest.skip("/proc/self/clear_refs is not writable here")
    assert scale_up.peak_rss(True) - scale_up._rss() < 32 * 1024**2  # the freed transient is not the peak

    save_file({"w": torch.randn(2048, 4096)}, tmp_path / "w.safetensors")  # 32 MiB on disk
    model = torch.nn.ParameterList([torch.nn.Parameter(load_file(tmp_path / "w.safetensors")["w"])])
    before = scale_up._rss()
    scale_up.fault_in(model)
    added = scale_up._rss() - before
    assert sum(p.numel() for p in model) * 4 == 32 * 1024**2
    assert added < 40 * 1024**2  # reading the weights adds at most their own size (0 when load copied them)
