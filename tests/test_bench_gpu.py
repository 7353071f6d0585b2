"""`python -m nirvana bench gpu --tiny`: the full benchmark pipeline at a tiny size on CPU."""

from __future__ import annotations

import json

import pytest

from nirvana.bench import gpu
from nirvana.cli import build_parser
from nirvana.cli.bench_cmds import cmd_gpu

FIELDS = {
    "variant",
    "target_sparsity",
    "params",
    "block_params",
    "batch_size",
    "prefill_tokens_per_s",
    "prefill_ktokens_per_s",
    "prefill_latency_ms",
    "decode_tokens_per_s",
    "decode_latency_ms_per_step",
    "weights_bytes",
    "peak_memory_bytes",
    "weights_gb",
    "peak_memory_gb",
    "prefill_speedup",
    "memory_ratio",
}


def test_bench_gpu_tiny_prints_and_writes_the_json(tmp_path, capsys):
    from nirvana.cli import main

    assert main(["bench", "gpu", "--tiny", "--repeats", "1", "--new-tokens", "2", "--out", str(tmp_path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads((tmp_path / "tiny-cpu.json").read_text())
    assert printed == written
    assert printed["paper_reference"]["pruned50_ktokens_per_s"] == 19.50
    rows = {r["variant"]: r for r in printed["results"]}
    assert list(rows) == ["dense", "pruned-20", "pruned-50"]
    for row in rows.values():
        assert row.keys() >= FIELDS
        assert row["batch_size"] == 32 and row["prefill_tokens_per_s"] > 0 and row["peak_memory_bytes"] > 0
    dense, p20, p50 = rows["dense"], rows["pruned-20"], rows["pruned-50"]
    # Real allocation and slicing: fewer block weights, by roughly the target (align 8 rounds kept neurons up).
    assert dense["block_params"] > p20["block_params"] > p50["block_params"]
    assert 0.1 < p20["achieved_block_sparsity"] <= 0.2 + 1e-9
    assert 0.4 < p50["achieved_block_sparsity"] <= 0.5 + 1e-9
    assert p50["weights_bytes"] < dense["weights_bytes"]
    assert dense["prefill_speedup"] == 1.0 and dense["memory_ratio"] == 1.0
    for row in (p20, p50):  # every speed-up beside its FLOPs ideal, with the verdict on it
        assert row["decode_ideal"] > 1 and row["prefill_ideal"] > 1
        assert {row["prefill_verdict"], row["decode_verdict"]} <= {"ok", "noisy", "disturbed"}


def test_full_benchmark_needs_a_gpu_here(tmp_path):
    import torch

    from nirvana.errors import InvalidInput

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the full benchmark would run")
    with pytest.raises(InvalidInput, match="--tiny"):
        cmd_gpu(build_parser().parse_args(["bench", "gpu", "--device", "cpu", "--out", str(tmp_path)]))


def test_tiny_config_keeps_the_8b_layout():
    big, tiny = gpu.LLAMA_31_8B, gpu.TINY
    assert (
        big["num_attention_heads"] // big["num_key_value_heads"]
        == tiny["num_attention_heads"] // tiny["num_key_value_heads"]
    )  # g = 4
    assert big["intermediate_size"] / big["hidden_size"] == tiny["intermediate_size"] / tiny["hidden_size"]  # 3.5
    assert big["rope_parameters"]["rope_theta"] == 500000.0 and big["vocab_size"] == 128256


def test_full_size_allocation_on_meta_weights():
    """The 8B benchmark's build and allocation path at full size, with weights on `meta` (no memory)."""
    import torch

    from nirvana.models.shapes import model_shape
    from nirvana.pruning.allocation import Allocation, allocate
    from nirvana.scoring.criteria import compute_scores

    model = gpu.build_model(gpu.LLAMA_31_8B, torch.bfloat16, "meta")
    shape = model_shape(model)
    assert shape.total_params == 8_030_261_248
    scores = compute_scores(model, "random", seed=0, use_cache=False)
    for sparsity in gpu.SPARSITIES:
        stats = allocate(scores, shape, Allocation(sparsity, align=8)).stats
        # exactly n units go and alignment only spares neurons: never above the target, barely below
        assert sparsity - 0.005 < stats["achieved_block_sparsity"] <= sparsity


def test_the_paper_figures_have_one_source():
    """The paper's numbers live in nirvana/assets/paper_reference.json only; the benchmark reads them from there."""
    import ast
    from pathlib import Path

    import nirvana
    from nirvana.reference import paper_reference

    ref = paper_reference()
    figures = {
        float(v)
        for row in ref["speed"] + ref["accuracy"]
        for k, v in row.items()
        if k not in {"sparsity", "batch_size"} and isinstance(v, float)
    }
    assert {12.41, 19.5, 17.95, 11.27} <= figures
    written = {f"{v:.2f}" for v in figures}
    repeated = []
    for path in Path(nirvana.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, float) and node.value in figures:
                repeated.append(f"{path.name}:{node.lineno}: {node.value}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                repeated += [f"{path.name}:{node.lineno}: {w!r} in text" for w in written if w in node.value]
    assert not repeated, repeated
    speed = {row["metric"]: row for row in ref["speed"]}
    a100 = gpu.paper_a100()
    assert (a100["dense_ktokens_per_s"], a100["pruned50_ktokens_per_s"]) == (speed["throughput"]["dense"], 19.5)
    assert (a100["dense_memory_gb"], a100["pruned50_memory_gb"]) == (speed["memory"]["dense"], 11.27)
