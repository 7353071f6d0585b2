"""`bench scale-up`: one row measured in-process on a tiny model (the plan the guard checked, the memory
scoring added), rows resumed from the output, a model that is not installed skipped with its command."""

from __future__ import annotations

import json
import subprocess

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
        row |= {"plan_error": 0.1, "peak_rss_gib": 1.0}
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(row) + "\n", stderr="")

    monkeypatch.setattr(scale_up, "installed", lambda name: name != "qwen2.5-coder-1.5b")
    logs: list[str] = []
    config = ScaleUpConfig(("smollm2-135m", "qwen2.5-coder-1.5b"), ("nirvana", "flap"), 2, 8, tmp_path)
    rows = run_scale_up(config, logs.append, fake_run)
    assert calls == [("smollm2-135m", "nirvana"), ("smollm2-135m", "flap")] and len(rows) == 2
    assert any("skipped qwen2.5-coder-1.5b" in x and "make models-large" in x for x in logs)
    assert run_scale_up(config, logs.append, fake_run) == rows and len(calls) == 2  # resumed: nothing run again
    assert "+10%" in (tmp_path / "scale-up.md").read_text()


def test_an_unknown_method_is_refused_with_the_accepted_ones(capsys):
    assert main(["bench", "scale-up", "--methods", "nirvana,obs"]) == 2
    err = capsys.readouterr().err
    assert "obs" in err and "llm-pruner" in err and "Traceback" not in err
