"""`--method` / `--method-settings` on every benchmark: they reach the library, rows record them, old
rows without the columns read as NIRVANA's and resume, and bad input is refused before anything is written."""

from __future__ import annotations

import json

import pytest
from test_bad_input import run_cli

import nirvana.bench.quality as q
import nirvana.cli.bench_cmds as bench_cmds
from nirvana.bench.base import run
from nirvana.bench.methods import MethodChoice, settings_json
from nirvana.bench.rows import read_rows, row_key, store_row, write_rows
from nirvana.bench.speed import SpeedBenchConfig, run_speed_bench
from nirvana.models.shapes import count_parameters
from nirvana.search.calibration import AnchorSpec

FLAP = settings_json("flap")


def _quality(model_dir, tmp_path, **kw) -> q.QualityConfig:
    base = dict(
        model=str(model_dir),
        criteria=("magnitude",),
        sparsities=(0.5,),
        uniform_criteria=(),
        select_criteria=(),
        tokens=512,
        window=512,
        samples=2,
        seq_len=32,
        anchor=AnchorSpec(samples=4, seq_len=16),
        out_dir=tmp_path / "out",
    )
    return q.QualityConfig(**{**base, **kw})


def test_an_old_row_without_method_columns_keeps_its_key_and_is_replaced_in_place(tmp_path):
    path = tmp_path / "old.csv"
    old_columns = ("model", "criterion", "sparsity", "ppl")
    write_rows(path, [{"model": "m", "criterion": "nirvana", "sparsity": "0.2", "ppl": "30"}], old_columns)
    key = ("model", "criterion", "sparsity", "method", "method_settings")
    (old,) = read_rows(path)
    assert row_key(old, key) == ("m", "nirvana", "0.2", "nirvana", "{}")  # missing cells: NIRVANA's
    columns = (*old_columns, "method", "method_settings")
    store_row(path, {"model": "m", "criterion": "flap", "sparsity": 0.2, "ppl": 40, "method": "flap"}, columns, key)
    store_row(
        path, {"model": "m", "criterion": "nirvana", "sparsity": 0.2, "ppl": 31, "method": "nirvana"}, columns, key
    )
    rows = read_rows(path)
    assert [(r["criterion"], r["ppl"], r["method"]) for r in rows] == [
        ("nirvana", "31", "nirvana"),
        ("flap", "40", "flap"),
    ]


def test_settings_are_one_canonical_key_and_bad_ones_are_refused():
    assert MethodChoice.of("llm-pruner").settings == MethodChoice.of("llm-pruner", {"taylor": "param_first"}).settings
    assert json.loads(FLAP) == {"bias": True, "metric": "WIFV", "structure": "AL-AM"}
    assert MethodChoice.of().cells() == {"method": "nirvana", "method_settings": "{}"}


def test_quality_resumes_old_rows_and_adds_a_baseline_beside_them(tiny_with_tokenizer_dir, tmp_path, monkeypatch):
    config = _quality(tiny_with_tokenizer_dir, tmp_path)
    rows = run(q.QUALITY, config, log=lambda m: None)
    assert [r["criterion"] for r in rows] == ["dense", "magnitude"]
    # the CSV as it was before the method columns existed
    old_columns = [c for c in q.COLUMNS if c not in ("method", "method_settings")]
    write_rows(config.csv_path, read_rows(config.csv_path), old_columns)
    with monkeypatch.context() as m:
        m.setattr(q, "QualityWorker", lambda *a: pytest.fail("an old row was run again"))
        assert len(run(q.QUALITY, config, log=lambda m: None)) == 2

    # the CLI's --method reaches the grid: FLAP at the same sparsity, the dense row reused
    flags = "--method flap --sparsities 0.5 --tokens 512 --samples 2 --seq-len 32 --anchor-samples 4"
    flags += " --anchor-seq-len 16 --criteria magnitude"
    out = ["--out-dir", str(tmp_path / "out"), "--uniform-criteria", "", "--select-criteria", ""]
    code, err = run_cli(["bench", "quality", "--model", str(tiny_with_tokenizer_dir), *flags.split(), *out])
    assert code == 0, err
    assert "1 already in" in err and "1 to run" in err  # dense from the old rows; only FLAP measured
    rows = read_rows(config.csv_path)
    assert [(r["criterion"], r["method"], r["allocation"]) for r in rows] == [
        ("dense", "", "-"),
        ("magnitude", "", "global"),
        ("flap", "flap", "method"),
    ]
    flap = rows[-1]
    assert flap["method_settings"] == FLAP and float(flap["kl"]) > 0 and flap["gamma"] == ""
    assert 0.3 < float(flap["achieved_block_sparsity"]) < 0.6  # FLAP's own count on a tiny model
    # each grid's report reads its own rows
    assert [r["criterion"] for r in q.QUALITY.committed(config)] == ["dense", "magnitude"]
    flap_config = _quality(tiny_with_tokenizer_dir, tmp_path, method="flap")
    assert [r["criterion"] for r in q.QUALITY.committed(flap_config)] == ["dense", "flap"]


def test_a_baseline_the_model_cannot_take_is_refused_before_any_row(tiny_with_tokenizer_dir, tmp_path):
    out = tmp_path / "out"
    base = ["--model", str(tiny_with_tokenizer_dir), "--sparsities", "0.2", "--out-dir", str(out)]
    code, err = run_cli(
        ["bench", "quality", *base, "--method", "llm-pruner", "--method-settings", '{"attn_layers": [0, 2]}']
    )
    assert code == 2 and "attn_layers [0, 2) is outside" in err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("bench", ["speed", "gpu", "quality", "gamma", "accuracy", "recovery"])
def test_bad_method_or_setting_exits_2_and_writes_nothing(bench, tmp_path):
    out = ["--out" if bench in ("speed", "gpu") else "--out-dir", str(tmp_path / "out")]
    code, err = run_cli(["bench", bench, *out, "--method", "sparsegpt"])
    assert code == 2 and "unknown method 'sparsegpt'; accepted: nirvana, llm-pruner, flap, slicegpt" in err
    code, err = run_cli(["bench", bench, *out, "--method", "flap", "--method-settings", '{"metric": "L2"}'])
    if bench == "gamma":
        assert code == 2 and "only NIRVANA has" in err and "bench baselines" in err
    else:
        assert code == 2 and "flap metric must be one of WIFV, IFV, WIFN, got 'L2'" in err
    code, err = run_cli(["bench", bench, *out, "--method-settings", "[1"])
    assert code == 2 and "not valid JSON" in err
    assert not (tmp_path / "out").exists()


def test_each_bench_flag_reaches_its_config(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(bench_cmds, "run_or_report", lambda bench, config, *_: seen.setdefault(bench.name, config))
    monkeypatch.setattr(bench_cmds, "run_grid", lambda bench, config, *_: seen.setdefault(bench.name, config))
    monkeypatch.setattr(bench_cmds, "run", lambda bench, config, *_: seen.setdefault(bench.name, config))
    flags = ["--method", "llm-pruner", "--method-settings", '{"taylor": "param_mix"}']
    for bench in ("quality", "accuracy", "recovery"):
        run_cli(["bench", bench, "--out-dir", str(tmp_path), *flags])
    for bench in ("speed", "gpu"):
        run_cli(["bench", bench, "--tiny" if bench == "gpu" else "--json", "--out", str(tmp_path), *flags])
    assert set(seen) == {"quality", "accuracy", "recovery", "speed", "gpu"}
    for config in seen.values():
        assert (config.method, config.method_settings) == ("llm-pruner", {"taylor": "param_mix"})


def test_speed_bench_times_the_baselines_models(smollm2_tiny_lm):
    """The speed bench's pruned model is the method's (FLAP: its adaptive widths, and its biases)."""
    settings = SpeedBenchConfig(
        batch_sizes=(1,), prompt_len=4, new_tokens=2, repeats=1, warmup=0, samples=2, seq_len=16, method="flap"
    )
    result = run_speed_bench(smollm2_tiny_lm, [0.0, 0.5], settings)
    assert result["method"] == "flap" and result["calibration"]["criterion"] == "flap"
    pruned = [r for r in result["rows"] if r["sparsity"] == 0.5]
    assert pruned and all(r["method"] == "flap" and r["method_settings"] == FLAP for r in pruned)
    assert 0.3 < pruned[0]["achieved_block_sparsity"] < 0.6


@pytest.fixture
def smollm2_tiny_lm(tiny_with_tokenizer_dir):
    from nirvana.checkpoints.loading import load_model

    return load_model(str(tiny_with_tokenizer_dir), dtype="float32", device="cpu")


def test_gpu_bench_tiny_prunes_with_flap_and_writes_its_own_file(tmp_path):
    from nirvana.bench.gpu import GpuBenchConfig, run_gpu_bench, write_result

    result = run_gpu_bench(GpuBenchConfig(tiny=True, device="cpu", method="flap", repeats=1, new_tokens=2))
    assert result["method"] == "flap" and "flap on" in result["weights"]
    assert write_result(result, tmp_path).name == "tiny-cpu-flap.json"
    with open(tmp_path / "tiny-cpu-flap.json") as f:
        assert json.load(f)["method_settings"] == FLAP


def test_accuracy_and_recovery_grids_of_a_baseline(tmp_path):
    from test_bench_accuracy import _rows

    from nirvana.bench.accuracy import ACCURACY, AccuracyConfig, plan_jobs
    from nirvana.bench.accuracy_report import write_report
    from nirvana.bench.recovery import RECOVERY, RecoveryBenchConfig

    config = AccuracyConfig(model="m", out_dir=tmp_path, method="flap", lambada_limit=0, bpb_limit=0, gsm8k_bpb_limit=0)
    jobs = plan_jobs(config)
    assert [j.variant.name for j in jobs[::7]] == ["dense", "flap s=0.2", "flap s=0.5"] and len(jobs) == 3 * 7
    assert ACCURACY.key(config, jobs[7])[-2:] == ("flap", FLAP) and ACCURACY.key(config, jobs[0])[-2:] == (
        "nirvana",
        "{}",
    )
    mixed = AccuracyConfig(method="llm-pruner", method_settings={"taylor": "param_mix"}, sparsities=(0.2,))
    assert (
        plan_jobs(mixed)[7].variant.name == f"llm-pruner s=0.2 {settings_json('llm-pruner', {'taylor': 'param_mix'})}"
    )
    rows = _rows("dense", 0.0, 0.5) + [
        {**r, "criterion": "flap", "allocation": "method", **MethodChoice.of("flap").cells()}
        for r in _rows("flap s=0.2", 0.2, 0.45)
    ]
    for r in rows[:7]:
        r.update(criterion="dense", allocation="-")
    _, text = write_report(rows, config)
    assert "| flap s=0.2 |" in text

    recovery = RecoveryBenchConfig(method="flap", out_dir=tmp_path)
    jobs = RECOVERY.jobs(recovery)
    assert [(j.criterion, j.allocation, j.sparsity) for j in jobs] == [("flap", "method", 0.2), ("flap", "method", 0.5)]
    assert RECOVERY.key(recovery, jobs[0])[-2:] == ("flap", FLAP)


def test_speed_bench_times_a_slicegpt_model_rotated_on_its_calibration_batch(smollm2_tiny_lm):
    """A rotating method has no scores: the bench's batch is what it rotates on, and its rows time the
    thinner residual stream (the hidden width in the plan's stats)."""
    settings = SpeedBenchConfig(
        batch_sizes=(1,), prompt_len=4, new_tokens=2, repeats=1, warmup=0, samples=2, seq_len=16, method="slicegpt"
    )
    result = run_speed_bench(smollm2_tiny_lm, [0.0, 0.3], settings)
    assert result["method"] == "slicegpt" and result["calibration"]["criterion"] == "slicegpt"
    (pruned,) = [r for r in result["rows"] if r["sparsity"] == 0.3]
    assert abs(pruned["achieved_block_sparsity"] - 0.3) < 0.1 and pruned["method"] == "slicegpt"
    assert pruned["params"] < count_parameters(smollm2_tiny_lm.model)


def test_gpu_bench_tiny_rotates_with_slicegpt_on_random_ids(tmp_path):
    from nirvana.bench.gpu import GpuBenchConfig, run_gpu_bench, write_result

    result = run_gpu_bench(GpuBenchConfig(tiny=True, device="cpu", method="slicegpt", repeats=1, new_tokens=2))
    assert result["method"] == "slicegpt" and "slicegpt on" in result["weights"]
    assert write_result(result, tmp_path).name == "tiny-cpu-slicegpt.json"


def test_quality_grid_of_slicegpt_from_the_cli(tiny_with_tokenizer_dir, tmp_path):
    flags = "--method slicegpt --sparsities 0.3 --tokens 512 --samples 2 --seq-len 32 --anchor-samples 4"
    flags += " --anchor-seq-len 16 --criteria magnitude --uniform-criteria= --select-criteria="
    out = tmp_path / "out"
    code, err = run_cli(
        ["bench", "quality", "--model", str(tiny_with_tokenizer_dir), *flags.split(), "--out-dir", str(out)]
    )
    assert code == 0, err
    rows = read_rows(next(out.glob("quality-*.csv")))
    assert [(r["criterion"], r["method"], r["allocation"]) for r in rows] == [
        ("dense", "", "-"),
        ("slicegpt", "slicegpt", "method"),
    ]
    assert float(rows[1]["kl"]) > 0 and abs(float(rows[1]["achieved_block_sparsity"]) - 0.3) < 0.1
