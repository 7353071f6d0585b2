"""Gamma benchmark: every (criterion, sparsity, gamma) point measured once, best = argmin KL, outputs written."""

from __future__ import annotations

import nirvana.bench.gamma as gb
from nirvana.cli import build_parser
from nirvana.cli.bench_cmds import gamma_config


def test_gamma_bench_measures_the_grid_and_writes_its_report(tiny_with_tokenizer_dir, tmp_path):
    parser = build_parser()
    small = ["--samples", "2", "--seq-len", "32", "--anchor-samples", "4", "--anchor-seq-len", "16"]
    grid = ["--criteria", "nirvana,random", "--sparsities", "0.3,0.5", "--gammas", "0.5,2"]
    argv = ["bench", "gamma", "--model", str(tiny_with_tokenizer_dir), *grid, *small, "--out-dir", str(tmp_path)]
    data = gb.run_gamma_bench(gamma_config(parser.parse_args(argv)), log=lambda m: None)
    g_star = round(data["gamma_default"], 4)
    assert data["gammas"] == sorted({0.5, 2.0, g_star})
    for criterion in ("nirvana", "random"):
        result = data["criteria"][criterion]
        points = result["points"]
        assert {(p["sparsity"], p["gamma"]) for p in points} == {(s, g) for s in (0.3, 0.5) for g in data["gammas"]}
        for s in (0.3, 0.5):
            kls = [p["kl"] for p in points if p["sparsity"] == s]
            assert result["best"][str(s)]["kl"] == min(kls) and all(k > 0 for k in kls)
    _, md, png = gb.write_outputs({**data, "seconds": 1.0}, tmp_path)
    assert gb.committed_gamma(str(tiny_with_tokenizer_dir), tmp_path)["gammas"] == data["gammas"]
    text = md.read_text()
    assert "(gamma*)" in text and "**" in text and "below gamma*" in text
    assert "paired over 4 anchor sequences" in text  # the best point's KL difference to gamma*, with its error
    assert png.stat().st_size > 1000


def test_unknown_criterion_is_refused_with_the_accepted_list(capsys):
    from nirvana.cli import main

    assert main(["bench", "gamma", "--criteria", "nirvana,bogus"]) == 2
    err = capsys.readouterr().err
    assert "bogus" in err and "accepted" in err and "Traceback" not in err


def test_output_paths_keep_dotted_model_names(tmp_path):
    names = [p.name for p in gb.output_paths("Qwen/Qwen2.5-7B", tmp_path)]
    assert names == ["gamma-Qwen_Qwen2.5-7B.json", "gamma-Qwen_Qwen2.5-7B.md", "gamma-Qwen_Qwen2.5-7B.png"]


def test_no_criterion_is_refused_before_any_model_loads(capsys):
    from nirvana.cli import main

    assert main(["bench", "gamma", "--criteria", ","]) == 2
    err = capsys.readouterr().err
    assert "at least one criterion" in err and "accepted" in err and "Traceback" not in err
