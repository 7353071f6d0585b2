"""Memory planning: estimates from the config, the pre-flight check, and the OOM guard."""

from __future__ import annotations

import pytest
import torch

from nirvana.data.calibration import CalibrationBatch
from nirvana.errors import OutOfMemory
from nirvana.guard import memory
from nirvana.models.shapes import count_block_parameters, count_parameters
from nirvana.scoring.criteria import compute_scores
from tests.tiny import tiny_model


def test_arch_sizes_match_the_built_model():
    model = tiny_model("llama")
    sizes = memory.ArchSizes.from_config(model.config)
    assert sizes.block_weights == count_block_parameters(model)
    assert sizes.total_params == count_parameters(model)


def test_llama_31_8b_parameter_count_known_answer():
    from transformers import LlamaConfig

    from nirvana.bench.gpu import LLAMA_31_8B

    sizes = memory.ArchSizes.from_config(LlamaConfig(**LLAMA_31_8B))
    assert sizes.total_params == 8_030_261_248  # Llama-3.1-8B's published parameter count


def test_scoring_estimate_components():
    config = tiny_model("llama").config
    sizes = memory.ArchSizes.from_config(config)
    auto = memory.estimate_scoring(config, samples=8, seq_len=16, method="autograd")
    hooks = memory.estimate_scoring(config, samples=8, seq_len=16, method="hooks")
    hooks_mb = memory.estimate_scoring(config, samples=8, seq_len=16, micro_batch=2, method="hooks")
    assert auto.components["weight grads"] == sizes.block_weights * 4
    assert "weight grads" not in hooks.components and hooks.total < auto.total
    assert hooks_mb.components["dW accumulators (fp32)"] == sizes.block_weights * 4
    assert hooks_mb.components["logits"] * 4 == hooks.components["logits"]  # logits scale with the micro-batch
    assert auto.components["logits"] == 8 * 16 * sizes.vocab_size * 4 * 3


@pytest.mark.parametrize("attention, scores", [("eager", 3), ("sdpa", 0)])
def test_forward_by_layer_known_answer(attention, scores):
    # per token: six hidden widths of residual stream, beside the larger of the attention (four query widths,
    # k and v, and three [Hq, T] score copies unless the kernel is fused) and the MLP (gate, up, product)
    config = tiny_model("llama", attn_implementation=attention).config
    a = memory.ArchSizes.from_config(config)
    est = memory.estimate_forward_by_layer(config, samples=8, seq_len=16, micro_batch=2)
    attn = 4 * a.num_heads * a.head_dim + 2 * a.num_kv_heads * a.head_dim + scores * a.num_heads * 16
    per_token = 6 * a.hidden_size + max(attn, 3 * a.intermediate_size)
    assert est.total == 2 * 16 * per_token * 4
    # a wide MLP dominates whatever the attention kernel
    wide = tiny_model("llama", attn_implementation=attention, intermediate_size=4096).config
    mlp_only = memory.estimate_forward_by_layer(wide, samples=2, seq_len=16)
    assert mlp_only.total == 2 * 16 * (6 * a.hidden_size + 3 * 4096) * 4


def test_sharded_estimate_per_rank_with_checkpointing_and_llm_pruners_squared_gradients():
    from transformers import LlamaConfig

    from nirvana.bench.gpu import LLAMA_31_8B
    from nirvana.methods.llm_pruner import LLMPrunerConfig
    from nirvana.methods.llm_pruner.memory import llm_pruner_memory

    config = LlamaConfig(**LLAMA_31_8B)
    sizes = memory.ArchSizes.from_config(config)
    kw = dict(samples=32, seq_len=2048, micro_batch=1, dtype=torch.bfloat16)
    one = memory.estimate_scoring(config, **kw)
    eight = memory.estimate_scoring(config, **kw, world_size=8)
    ckpt = memory.estimate_scoring(config, **kw, world_size=8, checkpoint=True)
    assert eight.components["weight grads"] * 8 == one.components["weight grads"]
    assert eight.components["activations"] == one.components["activations"]  # a micro-batch of one either way
    per_layer = 2048 * (one.components["activations"] // 2048 // sizes.num_layers)
    inputs = 2048 * sizes.num_layers * sizes.hidden_size * 2
    assert ckpt.components["activations"] == inputs + per_layer < eight.components["activations"] / 10
    mix = llm_pruner_memory(config, LLMPrunerConfig(taylor="param_mix"), **kw, world_size=8)
    assert mix.components["squared gradients (fp32)"] == sizes.block_weights * 4 // 8


def test_check_fits_raises_with_numbers_and_options(monkeypatch):
    est = memory.MemoryEstimate("scoring", "cpu", {"logits": 10 * memory.GIB})
    assert memory.check_fits(est, available=20 * memory.GIB) is est
    with pytest.raises(OutOfMemory, match=r"10\.00 GiB.*only 5\.00 GiB.*micro-batch.*8-bit"):
        memory.check_fits(est, available=5 * memory.GIB)
    monkeypatch.setenv(memory.SKIP_ENV, "1")
    assert memory.check_fits(est, available=5 * memory.GIB) is est


def test_scoring_a_batch_that_cannot_fit_gives_the_memory_message(monkeypatch):
    """Acceptance 4: a huge N*T asked for at once is refused before any forward. (The LM loss is taken a
    vocabulary chunk at a time, so its logits no longer make it huge: the machine is made small instead.)"""
    model = tiny_model("llama", vocab_size=200_000)
    ids = torch.zeros((64, 2048), dtype=torch.long)
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 2 * 2**30)
    monkeypatch.setattr(model, "forward", lambda *a, **k: pytest.fail("ran a forward pass"))
    with pytest.raises(OutOfMemory, match="GiB") as info:
        compute_scores(model, "taylor", CalibrationBatch(ids, "zeros", 0), micro_batch=64, use_cache=False)
    assert "micro-batch of" in str(info.value)  # a concrete micro-batch that would fit


def test_the_default_micro_batch_comes_from_the_memory_plan(monkeypatch):
    """micro_batch=0: on a CPU, 256 tokens worth of sequences, halved while the plan does not fit."""
    model = tiny_model("llama", vocab_size=200_000)
    plan = dict(method="autograd", backward=True, chunked_logits=True)
    assert memory.choose_micro_batch(model, 32, 128, **plan) == 2  # 256 tokens
    assert memory.choose_micro_batch(model, 32, 2048, **plan) == 1
    assert memory.choose_micro_batch(model, 3, 16, **plan) == 3  # never more than the batch
    free = memory.estimate_scoring(model.config, samples=64, seq_len=64, micro_batch=2, **plan).total
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": int(free / 0.8) + 1)
    assert memory.choose_micro_batch(model, 64, 64, **plan) == 2  # 4 wanted, 2 is what fits 80% of the free memory
    assert memory.estimate_scoring(model.config, samples=64, seq_len=64, micro_batch=4, **plan).total > 0.8 * (
        free / 0.8
    )


def test_oom_guard_turns_allocator_errors_into_out_of_memory():
    with pytest.raises(OutOfMemory, match="scoring ran out of cuda memory"), memory.oom_guard("scoring", "cuda"):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    with pytest.raises(OutOfMemory, match="cpu"), memory.oom_guard("slicing"):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp] DefaultCPUAllocator: can't allocate memory")
    with pytest.raises(ValueError), memory.oom_guard("scoring"):  # anything else passes through untouched
        raise ValueError("not memory")

    @memory.oom_guard("evaluation")
    def step():
        raise MemoryError()

    with pytest.raises(OutOfMemory, match="evaluation"):
        step()


def test_load_model_checks_weights_fit_first(tiny_with_tokenizer_dir, monkeypatch):
    from nirvana.checkpoints.loading import load_model

    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 1000)
    with pytest.raises(OutOfMemory, match="loading needs about"):
        load_model(str(tiny_with_tokenizer_dir), device="cpu")
