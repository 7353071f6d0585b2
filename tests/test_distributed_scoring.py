"""FSDP2 scoring on CPU with gloo, two processes: the scores and kept sets of one process, and the refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from nirvana.models.shapes import model_shape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.scoring.criteria import compute_scores
from nirvana.scoring.scores import Scores
from tests.conftest import random_batch
from tests.fsdp_worker import rank_main
from tests.ray_cluster import free_port
from tests.tiny import tiny_model

ROOT = Path(__file__).resolve().parents[1]


def _spawn(*args) -> None:
    """`rank_main(rank, 2, port, *args)` in two spawned processes (gloo over loopback).

    Once in a CI run beside a busy benchmark, a rank died with SIGABRT ("terminate called without an active
    exception": a native thread, likely gloo's, still running as the process ended). Such a
    crash is retried once on a fresh port, with a warning; any other failure, or a second crash, fails."""
    try:
        mp.spawn(rank_main, args=(2, free_port(), *args), nprocs=2, join=True)
    except mp.ProcessExitedException as exc:
        if exc.signal_name != "SIGABRT":
            raise
        warnings.warn(f"a rank died with SIGABRT ({exc}); retried once", stacklevel=2)
        mp.spawn(rank_main, args=(2, free_port(), *args), nprocs=2, join=True)


# Every sharded case of this module, (family, criterion, activation checkpointing, meta-device ranks): scored in one
# spawn of two ranks (`sharded`), since each spawn costs two imports of torch and the library (~10 s here).
SCORE_CASES = [
    (family, criterion, False, False) for criterion in ("nirvana", "taylor") for family in ("llama", "qwen2")
]
CHECKPOINTED = ("llama", "nirvana", True, False)
META_CASES = [(family, "nirvana", False, True) for family in ("llama", "llama-tied", "qwen2")]
LLM_PRUNER_CASES = [
    (family, f"llm-pruner:{taylor}", False, False)
    for family, taylor in [
        ("llama", "param_first"),
        ("llama", "vectorize"),
        ("llama", "param_mix"),
        ("qwen2", "param_first"),
    ]
]
JOBS = [*SCORE_CASES, CHECKPOINTED, *META_CASES, *LLM_PRUNER_CASES]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """job -> the scores rank 0 wrote for it (every job of `JOBS` scored in one process group)."""
    out = tmp_path_factory.mktemp("sharded")
    _spawn(JOBS, str(out))
    return lambda job: torch.load(out / f"{JOBS.index(job)}.pt")


@pytest.mark.parametrize("job", SCORE_CASES, ids=lambda job: f"{job[1]}-{job[0]}")
def test_two_sharded_processes_give_the_scores_and_kept_sets_of_one(job, sharded):
    family, criterion = job[:2]
    scores = sharded(job)
    model = tiny_model(family, num_hidden_layers=4)
    single = compute_scores(model, criterion, random_batch(n=4, t=16), use_cache=False)
    torch.testing.assert_close(scores["attn"], single.attn, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(scores["mlp"], single.mlp, rtol=1e-6, atol=1e-6)
    shape = model_shape(model)
    twin = Scores({"attn": scores["attn"], "mlp": scores["mlp"]}, criterion, single.fingerprint, single.calibration)
    for sparsity in (0.2, 0.5):
        a = allocate(single, shape, Allocation(sparsity, align=1))
        b = allocate(twin, shape, Allocation(sparsity, align=1))
        assert a.layers == b.layers  # the same kept KV groups and neurons, index for index


def test_activation_checkpointing_gives_the_same_sharded_scores(sharded):
    import nirvana.scoring.distributed as distributed

    scores = sharded(CHECKPOINTED)
    single = compute_scores(
        tiny_model("llama", num_hidden_layers=4), "nirvana", random_batch(n=4, t=16), use_cache=False
    )
    torch.testing.assert_close(scores["attn"], single.attn, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(scores["mlp"], single.mlp, rtol=1e-6, atol=1e-6)
    # and the layers really recompute: one more forward per layer and micro-batch in the backward
    model = tiny_model("llama", num_hidden_layers=2)
    calls = []
    for layer in model.model.layers:
        layer.self_attn.register_forward_hook(lambda *a: calls.append(1))
    distributed.checkpoint_layers(model)
    model.eval()
    ids = random_batch(n=1, t=8).input_ids
    model(input_ids=ids, use_cache=False).logits.sum().backward()
    assert len(calls) == 2 * 2  # each layer's attention ran twice: the forward and its recompute


@pytest.mark.parametrize("job", META_CASES, ids=lambda job: job[0])
def test_ranks_built_on_the_meta_device_receive_rank_0s_weights_and_give_the_same_scores(job, sharded):
    scores = sharded(job)
    family = job[0]
    tied = family.endswith("-tied")
    model = tiny_model(family.removesuffix("-tied"), num_hidden_layers=4, tie_word_embeddings=tied)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    single = compute_scores(model, "nirvana", random_batch(n=4, t=16), use_cache=False)
    torch.testing.assert_close(scores["attn"], single.attn, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(scores["mlp"], single.mlp, rtol=1e-6, atol=1e-6)


def _cli(*argv, env=None):
    env = {**{k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}, **(env or {})}
    return subprocess.run([sys.executable, "-m", "nirvana", *argv], capture_output=True, text=True, env=env, cwd=ROOT)


def _torchrun(*argv):
    """`python -m nirvana ARGV --distributed` on two gloo ranks under torchrun."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", f"--master-port={free_port()}"]
    return subprocess.run(
        [*torchrun, "-m", "nirvana", *argv, "--distributed"],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=ROOT, timeout=600,
    )  # fmt: skip


def test_score_distributed_under_torchrun_writes_the_single_process_scores_from_rank_0(
    tiny_with_tokenizer_dir, tmp_path
):
    """`score` under torchrun, with LLM-Pruner's settings (NIRVANA's scores go through `prune` below)."""
    method = ["--method", "llm-pruner", "--method-settings", '{"taylor": "param_mix"}']
    flags = ["--model", str(tiny_with_tokenizer_dir), "--samples", "4", "--seq-len", "16", "--no-cache", *method]
    single = _cli("score", *flags, "--out", str(tmp_path / "single.safetensors"), env={"OMP_NUM_THREADS": "1"})
    assert single.returncode == 0, single.stderr
    out = tmp_path / "sharded.safetensors"
    result = _torchrun("score", *flags, "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    a, b = Scores.load(tmp_path / "single.safetensors"), Scores.load(out)
    torch.testing.assert_close(b.attn, a.attn, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b.mlp, a.mlp, rtol=1e-5, atol=1e-6)
    assert a.fingerprint == b.fingerprint and b.meta["distributed"]["world_size"] == 2
    assert a.criterion == b.criterion and a.meta.get("method_settings") == b.meta.get("method_settings")
    assert result.stdout.count('"scores"') == 1  # rank 0 alone wrote and printed


def test_prune_distributed_writes_the_single_process_plan_from_rank_0(tiny_with_tokenizer_dir, tmp_path):
    flags = ["--model", str(tiny_with_tokenizer_dir), "--samples", "4", "--seq-len", "16", "--no-cache"]
    flags += ["--sparsity", "0.5", "--align", "1"]
    single = _cli("prune", *flags, "--out", str(tmp_path / "single"), env={"OMP_NUM_THREADS": "1"})
    assert single.returncode == 0, single.stderr
    result = _torchrun("prune", *flags, "--out", str(tmp_path / "sharded"))
    assert result.returncode == 0, result.stderr[-3000:]
    a, b = (json.loads((tmp_path / name / "plan.json").read_text()) for name in ("single", "sharded"))
    assert a["layers"] == b["layers"]  # the same kept KV groups and neurons
    assert (tmp_path / "sharded" / "model").is_dir()
    sharded = Scores.load(tmp_path / "sharded" / "scores.safetensors")  # NIRVANA's, from the two ranks
    assert sharded.criterion == "nirvana" and sharded.meta["distributed"]["world_size"] == 2


def test_distributed_without_torchrun_is_refused_with_exit_2_and_nothing_written(tiny_with_tokenizer_dir, tmp_path):
    out = tmp_path / "scores.safetensors"
    result = _cli("score", "--model", str(tiny_with_tokenizer_dir), "--distributed", "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert "torchrun --nproc-per-node" in result.stderr and "--distributed" in result.stderr
    assert not out.exists()


def test_a_world_larger_than_the_layers_is_refused():
    from nirvana.errors import InvalidInput
    from nirvana.scoring.distributed import check_world

    model = tiny_model("llama")  # 2 layers
    with pytest.raises(InvalidInput, match="world size 3 is larger than the model's 2 decoder layers"):
        check_world(model, "nirvana", 6, 3)
    with pytest.raises(InvalidInput, match="does not split evenly over 2 ranks"):
        check_world(model, "nirvana", 5, 2)
    with pytest.raises(InvalidInput, match="needs none"):
        check_world(model, "magnitude", 4, 2)


@pytest.mark.parametrize("job", LLM_PRUNER_CASES, ids=lambda job: f"{job[0]}-{job[1].split(':')[1]}")
def test_llm_pruner_sharded_gives_the_scores_of_one_process(job, sharded):
    """LLM-Pruner's Taylor importance under FSDP2: the same salience, channel sums (|sum| for vectorize) and
    groups; the second-order variants' per-example squared gradients included."""
    from nirvana.methods.llm_pruner import LLMPrunerConfig
    from nirvana.methods.llm_pruner.importance import taylor_scores

    scores = sharded(job)
    family, taylor = job[0], job[1].split(":")[1]
    model = tiny_model(family, num_hidden_layers=4).eval()
    attn, mlp, _ = taylor_scores(model, random_batch(n=4, t=16), LLMPrunerConfig(taylor=taylor), micro_batch=1)
    torch.testing.assert_close(scores["attn"], attn, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(scores["mlp"], mlp, rtol=1e-5, atol=1e-6)


def test_a_method_without_a_backward_pass_is_refused_under_torchrun(tiny_with_tokenizer_dir, tmp_path):
    out = tmp_path / "scores.safetensors"
    refused = _cli(
        "score", "--model", str(tiny_with_tokenizer_dir), "--method", "flap", "--distributed", "--out", str(out),
        env={**{k: "x" for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"},
    )  # fmt: skip
    assert refused.returncode == 2 and "method 'flap' has none to shard" in refused.stderr, refused.stderr
    assert not out.exists()


def test_a_model_built_without_weights_is_on_the_meta_device_and_a_pruned_one_is_refused(
    tiny_with_tokenizer_dir, tmp_path
):
    from nirvana.checkpoints.loading import load_model
    from nirvana.errors import InvalidInput
    from nirvana.scoring.distributed import is_meta

    lm = load_model(str(tiny_with_tokenizer_dir), dtype="float32", device="cpu", weights=False)
    assert is_meta(lm.model) and lm.tokenizer is not None
    assert model_shape(lm.model) == model_shape(load_model(str(tiny_with_tokenizer_dir), device="cpu").model)
    (tmp_path / "plan.json").write_text("{}")
    with pytest.raises(InvalidInput, match="only a dense model is built without its weights"):
        load_model(str(tmp_path), weights=False)
