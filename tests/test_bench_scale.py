"""`bench scale` on a tiny model: in-process and on a local Ray cluster, the same rows, the document and its report."""

from __future__ import annotations

from nirvana.bench.scale import ScaleConfig, markdown, run_scale_bench, write_outputs


def test_the_scale_benchmark_times_equal_grids_in_process_and_on_ray(tiny_with_tokenizer_dir, tmp_path):
    config = ScaleConfig(
        model=str(tiny_with_tokenizer_dir), criteria=("magnitude", "nirvana"), sparsities=(0.5,), tokens=64, window=32,
        workers=(1,), repeats=1, out=tmp_path,
    )  # fmt: skip
    result = run_scale_bench(config, log=lambda m: None)
    assert [r["where"] for r in result["runs"]] == ["in-process", "ray, 1 worker"]
    assert all(r["rows"] == 3 and r["same_rows_as_in_process"] for r in result["runs"])
    assert set(result["median_wall_s"]) == {"in-process", "ray, 1 worker"} and "ray_overhead_per_row_s" in result
    assert len(result["load_average_before"]) == 3 and result["cpu_count"] >= 1
    json_path, md_path = write_outputs(result, tmp_path)
    assert json_path.exists() and md_path.read_text() == markdown(result)
    assert "| 1 | ray, 1 worker | 1 | 3 |" in md_path.read_text()
