"""LoRA recovery on tiny random models of every family: merge equivalence, save/load, widths,
zero steps, loss goes down, fp32 adapters on a bf16 base, stop and NaN handling."""

from __future__ import annotations

import itertools
import json
import threading

import pytest
import torch
from conftest import random_batch

from nirvana.checkpoints.pruned import load_pruned
from nirvana.errors import InvalidInput
from nirvana.models.shapes import model_shape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.slicing import apply_plan
from nirvana.recovery.config import RecoveryConfig
from nirvana.recovery.data import RecoveryData
from nirvana.recovery.save import load_recovery_record, save_recovered
from nirvana.recovery.train import recover, target_module_names
from nirvana.scoring.criteria import compute_scores
from tests.tiny import TINY_FAMILIES, tiny_model

FAST = dict(r=4, alpha=8, batch_size=4, micro_batch_size=2, seq_len=16, eval_every=2, eval_sequences=2)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny matmuls gain nothing from threads, and on a shared CPU extra threads only wait."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pruned_tiny(family="llama", sparsity=0.5, **overrides):
    """Per-layer widths differ (global allocation, align 1) so LoRA sees ragged layers."""
    # sdpa, as load_pruned rebuilds, so save -> load compares like with like (gemma2 has no sdpa).
    model = tiny_model(family, attn_implementation="eager" if family == "gemma2" else "sdpa", **overrides)
    scores = compute_scores(model, "nirvana", random_batch(vocab=model.config.vocab_size), use_cache=False)
    plan = allocate(scores, model_shape(model), Allocation(sparsity, align=1))
    return apply_plan(model, plan), plan


def tiny_data(vocab=64, n=16, t=16, seed=0) -> RecoveryData:
    ids = torch.randint(0, vocab, (n + 2, t), generator=torch.Generator().manual_seed(seed))
    return RecoveryData(ids[:n], ids[n:], {"source": "random-ids", "kind": "text"})


def widths(model):
    shape = model_shape(model)
    return list(shape.num_kv_heads), list(shape.intermediate)


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_merged_equals_unmerged_and_keeps_widths(family):
    from peft import LoraConfig, get_peft_model

    pruned, _ = pruned_tiny(family)
    before = widths(pruned)
    assert len(set(before[1])) > 1, "the test needs layers of different widths"
    result = recover(pruned, tiny_data(), RecoveryConfig(**FAST, steps=3, lr=1e-2), keep_adapter=True)
    assert result.complete and result.steps_done == 3
    assert widths(result.model) == before
    assert all(type(m) is torch.nn.Linear for m in result.model.modules() if "proj" in type(m).__name__.lower())
    # Rebuild the unmerged peft model from the kept adapter and compare logits with the merged one.
    config = result.lora_config
    unmerged = get_peft_model(
        pruned, LoraConfig(**{k: getattr(config, k) for k in ("r", "lora_alpha", "target_modules")})
    )
    from peft import set_peft_model_state_dict

    set_peft_model_state_dict(unmerged, result.adapter_state)
    unmerged.eval()
    ids = random_batch(vocab=64, n=2, t=12, seed=3).input_ids
    torch.testing.assert_close(logits(result.model, ids), logits(unmerged, ids), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(logits(result.model, ids), logits(pruned_tiny(family)[0], ids)), (
        "training changed nothing"
    )


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_merge_save_load_equals_merged(family, tmp_path, smollm2):
    pruned, plan = pruned_tiny(family, vocab_size=len(smollm2.tokenizer))
    data = tiny_data(vocab=len(smollm2.tokenizer))
    result = recover(pruned, data, RecoveryConfig(**FAST, steps=2, lr=1e-2), keep_adapter=True)
    out = save_recovered(result, smollm2.tokenizer, plan, tmp_path / "rec", adapter=True, base_model="tiny")
    assert sorted(p.name for p in out.iterdir()) == ["adapter", "model", "plan.json", "recovery.json", "report.json"]
    loaded = load_pruned(out)
    assert widths(loaded.model) == widths(pruned)
    ids = random_batch(vocab=100, n=2, t=10).input_ids
    torch.testing.assert_close(logits(loaded.model, ids), logits(result.model, ids), rtol=0, atol=0)
    record = load_recovery_record(out)
    assert record["status"] == "complete" and record["steps_done"] == 2 and record["data"]["source"] == "random-ids"
    assert record["config"]["r"] == 4 and record["tokens_trained"] == 2 * 4 * 16
    assert json.loads((out / "report.json").read_text())["recovery"]["steps_done"] == 2
    assert not list(tmp_path.glob(".*")), "no temporary folder is left behind"


def test_adapter_only_save_reloads_with_peft(tmp_path, smollm2):
    from peft import PeftModel

    pruned, plan = pruned_tiny("qwen2", vocab_size=len(smollm2.tokenizer))
    result = recover(pruned, tiny_data(vocab=100), RecoveryConfig(**FAST, steps=2, lr=1e-2), keep_adapter=True)
    out = save_recovered(result, smollm2.tokenizer, plan, tmp_path / "rec", adapter=True)
    assert {p.name for p in (out / "adapter").iterdir()} == {"adapter_config.json", "adapter_model.safetensors"}
    again = PeftModel.from_pretrained(pruned, out / "adapter").eval()
    ids = random_batch(vocab=100, n=2, t=10).input_ids
    torch.testing.assert_close(logits(again, ids), logits(result.model, ids), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_zero_steps_is_identity(family):
    pruned, _ = pruned_tiny(family)
    result = recover(pruned, tiny_data(), RecoveryConfig(**FAST, steps=0))
    assert result.complete and result.steps_done == 0 and result.tokens_trained == 0
    original, merged = pruned.state_dict(), result.model.state_dict()
    assert original.keys() == merged.keys()
    for key in original:
        assert torch.equal(original[key], merged[key]), key
    assert [p.requires_grad for p in pruned.parameters()] == [p.requires_grad for p in result.model.parameters()]


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_a_few_steps_lower_the_training_loss(family):
    pruned, _ = pruned_tiny(family)
    data = tiny_data(n=4)  # one fixed batch, seen every step
    result = recover(pruned, data, RecoveryConfig(**FAST, steps=8, lr=2e-2, dropout=0.0))
    losses = [loss for _, loss in result.train_loss]
    assert len(losses) == 8 and losses[-1] < losses[0] - 0.01, losses
    assert sum(b < a for a, b in itertools.pairwise(losses)) >= 6, losses  # going down, not noise
    assert result.heldout_loss[0][0] == 0 and result.heldout_loss[-1][0] == 8


def test_input_model_is_untouched():
    pruned, _ = pruned_tiny("llama")
    before = {k: v.clone() for k, v in pruned.state_dict().items()}
    recover(pruned, tiny_data(), RecoveryConfig(**FAST, steps=2, lr=1e-2))
    assert all(torch.equal(before[k], v) for k, v in pruned.state_dict().items())
    assert not any("lora" in n for n, _ in pruned.named_modules())


def test_fp32_adapters_and_optimizer_on_a_bf16_base(monkeypatch):
    pruned, _ = pruned_tiny("llama")
    pruned = pruned.to(torch.bfloat16)
    seen = {}
    real_adamw = torch.optim.AdamW

    class Spy(real_adamw):
        def step(self, *a, **k):
            out = super().step(*a, **k)
            seen["params"] = {p.dtype for g in self.param_groups for p in g["params"]}
            seen["state"] = {v.dtype for s in self.state.values() for v in s.values() if v.dim() > 0}
            return out

    monkeypatch.setattr(torch.optim, "AdamW", Spy)
    result = recover(pruned, tiny_data(), RecoveryConfig(**FAST, steps=2, lr=1e-2))
    assert seen["params"] == {torch.float32} and seen["state"] == {torch.float32}
    assert result.complete and all(torch.isfinite(torch.tensor(v)) for _, v in result.train_loss)
    assert {p.dtype for p in result.model.parameters()} == {torch.bfloat16}  # merged back into the bf16 base
    assert widths(result.model) == widths(pruned)


def test_gradient_checkpointing_gives_the_same_training():
    pruned, _ = pruned_tiny("llama")
    cfg = dict(**FAST, steps=2, lr=1e-2, dropout=0.0)
    plain = recover(pruned, tiny_data(), RecoveryConfig(**cfg))
    ckpt = recover(pruned, tiny_data(), RecoveryConfig(**cfg, gradient_checkpointing=True))
    for (_, a), (_, b) in zip(plain.train_loss, ckpt.train_loss):
        assert a == pytest.approx(b, rel=1e-4)
    assert not ckpt.model.is_gradient_checkpointing


def test_stop_mid_run_keeps_last_whole_step_and_saves_nothing(tmp_path, smollm2):
    pruned, plan = pruned_tiny("llama", vocab_size=len(smollm2.tokenizer))
    stop = threading.Event()
    steps = []

    def progress(info):
        steps.append(info)
        if info.step == 2:
            stop.set()

    result = recover(
        pruned, tiny_data(vocab=100), RecoveryConfig(**FAST, steps=6, lr=1e-2), progress=progress, should_stop=stop
    )
    assert result.status == "stopped" and result.steps_done == 2 and "step 2 of 6" in result.message
    assert steps[-1].heldout_loss is not None  # evaluated at the stop
    with pytest.raises(InvalidInput, match="did not finish"):
        save_recovered(result, smollm2.tokenizer, plan, tmp_path / "rec")
    assert list(tmp_path.iterdir()) == []
    out = save_recovered(result, smollm2.tokenizer, plan, tmp_path / "partial", allow_partial=True)
    assert load_recovery_record(out)["status"] == "stopped"


def test_a_crash_while_saving_leaves_no_folder(tmp_path, smollm2, monkeypatch):
    import nirvana.recovery.save as save_mod

    pruned, plan = pruned_tiny("llama", vocab_size=len(smollm2.tokenizer))
    result = recover(pruned, tiny_data(vocab=100), RecoveryConfig(**FAST, steps=1, lr=1e-2))

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(save_mod, "_write_records", boom)
    with pytest.raises(OSError):
        save_recovered(result, smollm2.tokenizer, plan, tmp_path / "rec")
    assert list(tmp_path.iterdir()) == []


def test_nan_loss_stops_and_keeps_the_last_good_state():
    pruned, _ = pruned_tiny("llama")
    calls = {"n": 0}

    def poison(module, args, output):
        calls["n"] += 1
        if calls["n"] > 1 + 2 * 2:  # held-out eval (1 chunk) + two good steps of two micro-batches
            return output * float("nan")
        return output

    clean = recover(pruned, tiny_data(), RecoveryConfig(**{**FAST, "eval_every": 0}, steps=2, lr=1e-2, dropout=0.0))
    handle = pruned.lm_head.register_forward_hook(poison)
    try:
        result = recover(
            pruned, tiny_data(), RecoveryConfig(**{**FAST, "eval_every": 0}, steps=5, lr=1e-2, dropout=0.0)
        )
    finally:
        handle.remove()
    result.model.lm_head._forward_hooks.clear()  # the trained copy was deep-copied with the hook
    assert result.status == "nan" and result.steps_done == 2
    assert "nan" in result.message and "last good state" in result.message
    ids = random_batch(vocab=64, n=2, t=12, seed=3).input_ids
    torch.testing.assert_close(logits(result.model, ids), logits(clean.model, ids))


def test_rank_above_a_layer_width_is_refused():
    pruned, _ = pruned_tiny("llama")  # head_dim 8: one kept KV group -> k_proj has 8 output rows
    with pytest.raises(InvalidInput, match=r"r=16 is larger than layer \d's k_proj"):
        target_module_names(pruned, RecoveryConfig(r=16))
    assert len(target_module_names(pruned, RecoveryConfig(r=8))) == 2 * 7
    assert len(target_module_names(pruned, RecoveryConfig(r=8, target_modules=("q_proj", "down_proj")))) == 4


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(steps=0), None),
        (dict(steps=-1), "steps"),
        (dict(steps=2.5), "steps"),
        (dict(lr=0), "lr"),
        (dict(lr=-1e-4), "lr"),
        (dict(lr=5.0), "lr"),
        (dict(lr=float("nan")), "lr"),
        (dict(r=0), "r must"),
        (dict(dropout=1.5), "dropout"),
        (dict(batch_size=16, micro_batch_size=5), "multiple"),
        (dict(target_modules=("q_proj", "lm_head")), "target_modules"),
        (dict(tokens=-5), "tokens"),
    ],
)
def test_config_validation(kwargs, match):
    if match is None:
        assert RecoveryConfig(**kwargs).total_steps == 0
        return
    with pytest.raises(InvalidInput, match=match):
        RecoveryConfig(**kwargs)


def test_config_defaults_budget_and_round_trip():
    cfg = RecoveryConfig()
    assert (cfg.r, cfg.alpha, cfg.dropout, cfg.lr, cfg.batch_size) == (8, 16, 0.05, 1e-4, 16)
    assert cfg.target_modules == ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert RecoveryConfig(tokens=65_536, batch_size=16, seq_len=128).total_steps == 32
    assert RecoveryConfig(tokens=1, batch_size=16, seq_len=128).total_steps == 1
    assert RecoveryConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(InvalidInput, match="unknown recovery settings"):
        RecoveryConfig.from_dict({"rank": 8})
