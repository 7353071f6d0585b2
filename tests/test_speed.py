"""Speed/memory measurement (fields, counts, interleaving, memory tracking) and analytic FLOPs."""

from __future__ import annotations

import sys

import pytest
import torch

from nirvana.errors import InvalidInput
from nirvana.measure.flops import flops_breakdown, flops_per_token, ideal_speedup, phase_flops
from nirvana.measure.speed import PeakMemory, cpu_name, measure_speed, measure_speeds
from nirvana.models.shapes import model_shape

FAST = {"prompt_len": 8, "new_tokens": 4, "repeats": 2, "warmup": 1}


def test_speed_fields_are_present_positive_and_consistent(tiny_llama):
    s = measure_speed(tiny_llama, batch_sizes=(1, 2), **FAST)
    for key in ("device", "device_name", "torch_version", "threads", "memory_method", "dtype"):
        assert s[key], key
    assert s["device"] == "cpu" and s["threads"] == torch.get_num_threads()
    assert [r["batch_size"] for r in s["results"]] == [1, 2]
    for r in s["results"]:
        for key in ("prefill_tokens_per_s", "decode_tokens_per_s", "latency_ms_per_token", "peak_memory_bytes"):
            assert r[key] > 0, key
        assert len(r["prefill_runs"]) == len(r["decode_runs"]) == 2
        b = r["batch_size"]
        assert r["prefill_tokens_per_s"] == pytest.approx(b * 8 / r["prefill_seconds"])
        assert r["decode_tokens_per_s"] == pytest.approx(b * 3 / r["decode_seconds"])  # N - 1 decode steps
        assert r["latency_ms_per_token"] == pytest.approx(r["decode_seconds"] / 3 * 1000)
        assert r["prefill_tokens_per_cpu_s"] == pytest.approx(b * 8 / r["prefill_cpu_seconds"])
        assert r["decode_tokens_per_cpu_s"] == pytest.approx(b * 3 / r["decode_cpu_seconds"])
        weights = sum(p.numel() * 4 for p in tiny_llama.parameters()) + sum(
            b.numel() * b.element_size() for b in tiny_llama.buffers()
        )
        assert r["weights_bytes"] == weights
        assert r["peak_memory_bytes"] == r["weights_bytes"] + r["peak_extra_bytes"]


def test_eos_does_not_stop_decode_early(tiny_llama):
    with torch.no_grad():
        tiny_llama.lm_head.weight.zero_()  # every logit 0: greedy always picks token 0 ...
    tiny_llama.generation_config.eos_token_id = 0  # ... which is EOS, so plain generate stops at once
    assert tiny_llama.generate(torch.ones(1, 4, dtype=torch.long), max_new_tokens=4, do_sample=False).shape[1] == 5
    s = measure_speed(tiny_llama, batch_sizes=(1,), **FAST)  # raises if fewer than N steps came out
    assert s["results"][0]["new_tokens"] == 4


def test_models_are_measured_interleaved_on_the_same_prompts():
    from tests.tiny import tiny_model

    a, b = tiny_model("llama", seed=0), tiny_model("llama", seed=1)
    seen = []
    hooks = [
        m.get_input_embeddings().register_forward_hook(lambda mod, args, out, n=n: seen.append((n, args[0].shape[1])))
        for n, m in (("a", a), ("b", b))
    ]
    try:
        out = measure_speeds({"a": a, "b": b}, batch_sizes=(1,), prompt_len=8, new_tokens=2, repeats=2, warmup=0)
    finally:
        for h in hooks:
            h.remove()
    # Only full-prompt forwards (prefill, first step of generate): a a b b a a b b.
    order = [n for n, t in seen if t == 8]
    assert order == ["a", "a", "b", "b", "a", "a", "b", "b"]
    assert set(out) == {"a", "b"}


@pytest.mark.parametrize("kwargs", [{"batch_sizes": ()}, {"batch_sizes": (0,)}, {"new_tokens": 1}, {"repeats": 0}])
def test_bad_settings_are_refused(tiny_llama, kwargs):
    with pytest.raises(InvalidInput):
        measure_speed(tiny_llama, **{**FAST, **kwargs})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RSS peak via /proc")
def test_cpu_peak_memory_sees_a_64_mib_allocation():
    with PeakMemory(torch.device("cpu")) as mem:
        x = torch.ones(16 * 2**20)  # 64 MiB, touched
        del x
    assert mem.extra >= 60 * 2**20
    assert mem.peak >= mem.extra


def test_cpu_name_is_known():
    assert cpu_name() and cpu_name() != "unknown CPU"


def test_flops_per_token_by_hand(tiny_llama):
    shape = model_shape(tiny_llama)  # L 2, D 32, Hq 4, Hkv 2, d 8, I 48, V 64
    per_layer = 32 * 32 + 32 * 16 + 32 * 16 + 32 * 32 + 3 * 32 * 48
    assert flops_per_token(shape, context=10) == 2 * 2 * per_layer + 2 * 64 * 32 + 4 * 10 * 8 * (4 + 4)
    # Projections + lm_head are 2 FLOPs per weight of every Linear in the model.
    linear_weights = sum(m.weight.numel() for m in tiny_llama.modules() if isinstance(m, torch.nn.Linear))
    parts = flops_breakdown(shape, context=0)
    assert parts["projections"] + parts["lm_head"] == 2 * linear_weights
    assert flops_breakdown(tiny_llama, context=10) == flops_breakdown(shape, context=10)  # the modules agree


def test_flops_of_a_sliced_residual_stream_count_its_real_widths():
    """SliceGPT keeps every head and neuron, so a shape would count it dense: the model's modules do not."""
    from tests.test_methods_slicegpt import slicegpt_prune, tiny

    model = tiny("llama")
    ids = torch.randint(0, model.config.vocab_size, (4, 32), generator=torch.Generator().manual_seed(0))
    _, sliced = slicegpt_prune(model, 0.3, ids)
    assert model_shape(sliced).block_weights == model_shape(model).block_weights  # units all kept
    matrices = sum(p.numel() for layer in sliced.model.layers for p in layer.parameters() if p.dim() == 2)
    parts = flops_breakdown(sliced, context=0)
    assert parts["projections"] == 2 * matrices  # seven projections and two shortcuts per layer
    assert parts["lm_head"] == 2 * sliced.lm_head.weight.numel()
    assert (
        ideal_speedup(model, sliced) > 1.05
        and phase_flops(sliced, 8, 4)["prefill"] < phase_flops(model, 8, 4)["prefill"]
    )


def test_ideal_speedup_of_a_pruned_model(tiny_llama):
    from nirvana.pruning.allocation import Allocation, allocate
    from nirvana.pruning.slicing import apply_plan
    from nirvana.scoring.criteria import compute_scores

    plan = allocate(
        compute_scores(tiny_llama, "random", use_cache=False), model_shape(tiny_llama), Allocation(0.5, align=1)
    )
    pruned = model_shape(apply_plan(tiny_llama, plan))
    dense = model_shape(tiny_llama)
    assert ideal_speedup(dense, dense) == 1.0
    assert ideal_speedup(dense, pruned) > 1.2
    # lm_head is not pruned, so the ideal is below the block-weight ratio.
    assert ideal_speedup(dense, pruned, context=0) < dense.block_weights / pruned.block_weights
    d, p = phase_flops(dense, 8, 4), phase_flops(pruned, 8, 4)
    assert d["prefill"] > p["prefill"] and d["decode"] > p["decode"]
    # Decode runs the unpruned lm_head for every token, prefill once per sequence: prefill's ideal is higher.
    assert d["prefill"] / p["prefill"] > d["decode"] / p["decode"]
