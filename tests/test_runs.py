"""Nothing lost: runs are written atomically and reopened; cached scores are keyed by model and batch."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import random_batch

from nirvana.errors import CorruptCheckpoint, InvalidInput
from nirvana.pruning.plan import PruningPlan
from nirvana.runs import (
    RUNS_ENV,
    RunNotFound,
    clean_incomplete,
    incomplete_runs,
    list_runs,
    new_run,
    open_run,
    record_run,
    runs_root,
)

ROOT = Path(__file__).resolve().parents[1]


def _plan():
    from nirvana.models.shapes import ModelShape
    from nirvana.pruning.allocation import Allocation, allocate
    from nirvana.scoring.scores import Scores

    shape = ModelShape("llama", 2, 32, 8, 2, (2, 2), (48, 48), 64, False, 10_000)
    gen = torch.Generator().manual_seed(0)
    scores = Scores(
        {"attn": torch.rand((2, 2), generator=gen), "mlp": torch.rand((2, 48), generator=gen)}, "random", "fp"
    )
    return allocate(scores, shape, Allocation(0.5))


def test_a_completed_run_is_listed_and_reopened_with_everything_it_wrote():
    plan = _plan()
    with new_run("prune", settings={"sparsity": 0.5}) as run:
        run.save_plan(plan)
        run.save_scores_ref({"criterion": "random", "fingerprint": "fp", "calibration": None, "meta": {}})
        run.write_json("report.json", {"achieved_block_sparsity": 0.42})
        run.write_json("metrics.json", {"timings": {"score": 1.5}})
        run.summary = {"model": "tiny", "achieved_block_sparsity": 0.42}
        assert list_runs() == []  # not visible until complete
    runs = list_runs()
    assert [r.id for r in runs] == [run.id]
    assert runs[0].kind == "prune" and runs[0].summary["model"] == "tiny"
    assert runs[0].path == runs_root() / run.id
    opened = open_run(run.id)
    assert opened.plan.to_dict() == plan.to_dict()
    assert opened.report == {"achieved_block_sparsity": 0.42}
    assert opened.metrics == {"timings": {"score": 1.5}}
    assert opened.scores["fingerprint"] == "fp"
    assert opened.settings == {"sparsity": 0.5}
    assert opened.files == ["metrics.json", "plan.json", "report.json", "scores.json"]


def test_record_run_writes_a_whole_run_in_one_call():
    run_id = record_run(
        "eval", settings={"model": "tiny"}, report={"ppl": 12.5}, metrics={"tokens": 4096}, summary={"ppl": 12.5}
    )
    (info,) = list_runs()
    assert info.id == run_id and info.kind == "eval" and info.summary == {"ppl": 12.5}
    opened = open_run(run_id)
    assert opened.plan is None and opened.scores is None
    assert opened.report == {"ppl": 12.5} and opened.metrics == {"tokens": 4096}


def test_a_run_that_raises_leaves_nothing_behind():
    with pytest.raises(RuntimeError), new_run("eval") as run:
        run.write_json("report.json", {"partial": True})
        raise RuntimeError("the evaluation crashed")
    assert list_runs() == [] and incomplete_runs() == []
    assert not any(runs_root().iterdir())


def test_runs_are_listed_newest_first_and_filtered_by_kind():
    ids = []
    for kind in ("prune", "eval", "prune"):
        with new_run(kind) as run:
            pass
        ids.append(run.id)
    assert [r.id for r in list_runs()] == ids[::-1]
    assert [r.id for r in list_runs(kind="eval")] == [ids[1]]


def test_the_runs_root_comes_from_the_environment(tmp_path, monkeypatch):
    from nirvana.store.paths import cache_dir

    assert runs_root() == cache_dir() / "runs"
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "elsewhere"))
    with new_run("prune") as run:
        pass
    assert run.final_path.parent == tmp_path / "elsewhere"
    assert [r.id for r in list_runs()] == [run.id]


def test_unreadable_or_foreign_folders_are_not_listed():
    with new_run("prune") as good:
        pass
    root = runs_root()
    (root / "stray-file.txt").write_text("x")
    (root / "20260101T000000000000Z-prune-aaaaaa").mkdir()  # no run.json
    bad = root / "20260101T000000000000Z-prune-bbbbbb"
    bad.mkdir()
    (bad / "run.json").write_text("{truncated")
    other = root / "20260101T000000000000Z-prune-cccccc"
    other.mkdir()
    (other / "run.json").write_text(json.dumps({"id": "someone-else"}))
    assert [r.id for r in list_runs()] == [good.id]


@pytest.mark.parametrize(
    ("run_id", "error", "message"),
    [
        ("../../etc", InvalidInput, "is not a run id"),
        ("", InvalidInput, "is not a run id"),
        ("20260101T000000000000Z-prune-abcdef", RunNotFound, "no completed run"),
    ],
    ids=["path-traversal", "empty", "unknown"],
)
def test_open_run_rejects_bad_ids(run_id, error, message):
    with pytest.raises(error, match=message):
        open_run(run_id)


def test_open_run_reports_a_damaged_run():
    with new_run("prune") as run:
        run.write_json("report.json", {})
    (run.final_path / "report.json").write_text("{damaged")
    with pytest.raises(CorruptCheckpoint, match="unreadable"):
        open_run(run.id)


def test_clean_incomplete_removes_only_runs_whose_writer_is_gone():
    with new_run("prune") as live:
        dead = runs_root() / ".tmp-20260101T000000000000Z-prune-dddddd"
        dead.mkdir()
        (dead / "owner.json").write_text(json.dumps({"pid": 2**22 + 12345}))  # above pid_max: never alive
        assert clean_incomplete() == [dead]
        assert live.path.exists()  # our own run, still being written, is kept
    assert [r.id for r in list_runs()] == [live.id]


KILLED_MIDWAY = """
import sys, time
import nirvana.checkpoints.pruned as checkpoint

real_save = checkpoint.save_pruned

def save_then_hang(*args, **kwargs):  # the slow step: the model is saved, the run not yet committed
    real_save(*args, **kwargs)
    print("SAVED", flush=True)
    time.sleep(600)

checkpoint.save_pruned = save_then_hang
from nirvana.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_run_killed_midway_never_looks_complete(tiny_with_tokenizer_dir, tmp_path):
    out = tmp_path / "out"
    argv = ["prune", "--model", str(tiny_with_tokenizer_dir), "--criterion", "magnitude", "--sparsity", "0.5"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_MIDWAY, *argv, "--out", str(out)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        for line in proc.stdout:
            if line.strip() == "SAVED":
                break
        assert proc.poll() is None, "the prune finished or died before the slow step"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    assert list_runs() == []
    assert [p.name for p in runs_root().iterdir() if not p.name.startswith(".")] == []
    (partial,) = incomplete_runs()
    assert (partial / "plan.json").exists() and not (partial / "run.json").exists()  # killed midway
    assert not (out / "report.json").exists()  # the --out report lands last too
    assert clean_incomplete() == [partial]

    # The same prune, not interrupted, is listed and reopens to what --out holds.
    from nirvana.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main([*argv, "--out", str(out)]) == 0
    (run,) = list_runs()
    opened = open_run(run.id)
    assert opened.plan.to_dict() == PruningPlan.load(out / "plan.json").to_dict()
    report = json.loads((out / "report.json").read_text())
    assert opened.report["achieved_block_sparsity"] == report["achieved_block_sparsity"]
    assert run.summary["out"] == str(out.resolve())
    assert opened.scores["criterion"] == "magnitude" and opened.metrics["params_after"] == report["params_after"]


def test_an_interrupted_cli_prune_leaves_no_run(tiny_with_tokenizer_dir, tmp_path, monkeypatch):
    import nirvana.checkpoints.pruned
    from nirvana.cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    # `prune` imports the saver when it saves (nirvana.cli stays light), so the saver's own module is patched
    monkeypatch.setattr(nirvana.checkpoints.pruned, "save_prune_output", interrupted)
    argv = ["prune", "--model", str(tiny_with_tokenizer_dir), "--criterion", "magnitude", "--sparsity", "0.3"]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert main([*argv, "--out", str(tmp_path / "o")]) == 130
    assert "interrupted" in err.getvalue()
    assert list_runs() == [] and incomplete_runs() == []


# ---- cache keys: cached scores are never reused for another model or another calibration batch ----


def test_cached_scores_are_never_reused_for_another_model_or_batch(tmp_path):
    from nirvana.scoring.criteria import compute_scores
    from tests.tiny import tiny_model

    a, b = tiny_model("llama", seed=0), tiny_model("llama", seed=1)  # same shapes, other weights
    x, y = random_batch(seed=0), random_batch(seed=1)

    first = compute_scores(a, "nirvana", x)
    again = compute_scores(a, "nirvana", x)
    assert not first.meta["cache_hit"] and again.meta["cache_hit"]
    torch.testing.assert_close(again.mlp, first.mlp)

    other_model = compute_scores(b, "nirvana", x)
    assert not other_model.meta["cache_hit"] and other_model.fingerprint != first.fingerprint
    torch.testing.assert_close(other_model.mlp, compute_scores(b, "nirvana", x, use_cache=False).mlp)
    assert not torch.allclose(other_model.mlp, first.mlp)

    other_batch = compute_scores(a, "nirvana", y)
    assert not other_batch.meta["cache_hit"]
    assert other_batch.calibration["hash"] != first.calibration["hash"]
    torch.testing.assert_close(other_batch.mlp, compute_scores(a, "nirvana", y, use_cache=False).mlp)

    other_criterion = compute_scores(a, "taylor", x)
    assert not other_criterion.meta["cache_hit"]

    with torch.no_grad():  # one weight changed: a different model, so no reuse
        a.model.layers[1].mlp.down_proj.weight[0, 0] += 1.0
    assert not compute_scores(a, "nirvana", x).meta["cache_hit"]


def test_the_same_weights_reloaded_from_disk_do_reuse_the_cache(tmp_path):
    from transformers import AutoModelForCausalLM

    from nirvana.scoring.criteria import compute_scores
    from tests.tiny import tiny_model

    model = tiny_model("llama", seed=0)
    compute_scores(model, "magnitude")
    model.save_pretrained(tmp_path / "m")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float32)
    assert compute_scores(reloaded, "magnitude").meta["cache_hit"]
