"""Recovery by distillation from the dense model (issue 25): the KD loss by hand, zero at the teacher,
KD lowers the KL to the teacher, full fine-tuning keeps widths and reloads, LoRA-KD merged equals
unmerged, and the `recover --loss kd` command with its refusals."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from conftest import random_batch
from test_recovery import FAST, _one_thread, logits, pruned_tiny, tiny_data, widths  # noqa: F401 (autouse fixture)

from nirvana.checkpoints.pruned import load_pruned
from nirvana.cli import main
from nirvana.errors import InvalidInput
from nirvana.recovery.config import RecoveryConfig
from nirvana.recovery.distill import Objective, check_teacher, kd_loss
from nirvana.recovery.save import save_recovered
from nirvana.recovery.train import recover
from tests.tiny import tiny_model


def test_kd_loss_by_hand():
    s = torch.tensor([[[1.0, 0.0, -1.0], [0.5, 0.5, 0.0]]])  # [1, 2 positions, V 3]
    t = torch.tensor([[[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]]])
    for tau in (1.0, 2.0):
        total = 0.0
        for pos in range(2):
            ps = [math.exp(x / tau) for x in s[0, pos].tolist()]
            pt = [math.exp(x / tau) for x in t[0, pos].tolist()]
            ps, pt = [x / sum(ps) for x in ps], [x / sum(pt) for x in pt]
            total += sum(b * math.log(b / a) for a, b in zip(ps, pt))
        assert kd_loss(s, t, tau).item() == pytest.approx(tau**2 * total / 2, rel=1e-6)


def test_a_student_equal_to_its_teacher_has_zero_loss_and_no_gradient():
    teacher = tiny_model("llama")
    student = copy.deepcopy(teacher)
    ids = random_batch(vocab=64, n=2, t=12).input_ids
    loss, parts = Objective("kd", teacher)(student, ids)
    assert loss.item() == pytest.approx(0.0, abs=1e-6) and parts == {"kd": pytest.approx(0.0, abs=1e-6)}
    loss.backward()
    assert max(p.grad.abs().max().item() for p in student.parameters() if p.grad is not None) < 1e-5
    mixed, parts = Objective("mix", teacher, kd_weight=0.25)(student, ids)
    assert mixed.item() == pytest.approx(0.75 * parts["lm"] + 0.25 * parts["kd"], rel=1e-6)


def test_kd_steps_lower_the_kl_to_the_teacher_and_lora_kd_merged_equals_unmerged():
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    from nirvana.recovery.data import RecoveryData

    teacher = tiny_model("llama", attn_implementation="sdpa")
    with torch.no_grad():  # a random tiny model is near uniform: a peaked teacher gives KD something to match
        teacher.lm_head.weight.mul_(30.0)
    pruned, _ = pruned_tiny("llama")  # the same seeded tiny model, pruned 50%
    check_teacher(teacher, pruned)
    ids = random_batch(vocab=64, n=4, t=16, seed=5).input_ids
    data = RecoveryData(ids, ids[:2], {"source": "random-ids", "kind": "text"})  # KL measured on trained windows
    config = RecoveryConfig(**FAST, steps=8, lr=2e-2, dropout=0.0, loss="kd", temperature=2.0)
    result = recover(pruned, data, config, keep_adapter=True, teacher=teacher, teacher_name="tiny")
    assert result.complete and [k for k in result.train_parts[0][1]] == ["kd"]
    kl = [v for _, v in result.heldout_kl]
    assert kl[-1] < kl[0], kl
    summary = result.summary()
    assert summary["teacher"] == "tiny" and summary["heldout_kl_after"] == kl[-1] and summary["config"]["loss"] == "kd"
    unmerged = get_peft_model(
        pruned, LoraConfig(**{k: getattr(result.lora_config, k) for k in ("r", "lora_alpha", "target_modules")})
    )
    set_peft_model_state_dict(unmerged, result.adapter_state)
    ids = random_batch(vocab=64, n=2, t=12, seed=3).input_ids
    torch.testing.assert_close(logits(result.model, ids), logits(unmerged.eval(), ids), rtol=1e-4, atol=1e-4)


def test_full_fine_tuning_keeps_the_widths_and_saves_and_reloads(tmp_path, smollm2):
    vocab = len(smollm2.tokenizer)
    teacher = tiny_model("qwen2", vocab_size=vocab, attn_implementation="sdpa")
    pruned, plan = pruned_tiny("qwen2", vocab_size=vocab)
    config = RecoveryConfig(**FAST, steps=3, lr=1e-3, loss="mix", train="full")
    result = recover(pruned, tiny_data(vocab=vocab, n=4), config, teacher=teacher)
    assert result.complete and result.adapter_state is None and widths(result.model) == widths(pruned)
    assert set(result.train_parts[-1][1]) == {"lm", "kd"}
    ids = random_batch(vocab=vocab, n=2, t=10).input_ids
    assert not torch.allclose(logits(result.model, ids), logits(pruned, ids))  # the weights themselves moved
    embed = pruned.get_input_embeddings().weight
    assert torch.equal(result.model.get_input_embeddings().weight, embed)  # embeddings are not trained
    out = save_recovered(result, smollm2.tokenizer, plan, tmp_path / "full")
    torch.testing.assert_close(logits(load_pruned(out).model, ids), logits(result.model, ids), rtol=0, atol=0)


def test_distillation_needs_a_teacher_with_the_same_vocabulary_that_is_not_pruned():
    pruned, plan = pruned_tiny("llama")
    with pytest.raises(InvalidInput, match="distills from a teacher"):
        recover(pruned, tiny_data(), RecoveryConfig(**FAST, steps=1, loss="kd"))
    with pytest.raises(InvalidInput, match="itself a pruned model"):
        check_teacher(pruned, pruned)
    with pytest.raises(InvalidInput, match="vocabulary has 80 tokens"):
        check_teacher(tiny_model("llama", vocab_size=80), pruned)
    with pytest.raises(InvalidInput, match="is not the model this student was pruned from"):
        check_teacher(tiny_model("llama", num_hidden_layers=3), pruned, plan)
    check_teacher(tiny_model("llama", num_hidden_layers=3), pruned, plan, verify=False)  # another dtype: unchecked


KD = ["--batch-size", "2", "--micro-batch", "1", "--seq-len", "16", "--r", "4", "--eval-every", "1", "--threads", "1"]


def test_recover_loss_kd_from_the_command_line(capsys, pruned_tiny_dir, tiny_with_tokenizer_dir, corpus, tmp_path):
    out = tmp_path / "kd"
    argv = ["recover", "--model", str(pruned_tiny_dir), "--steps", "2", "--data", str(corpus), *KD]
    assert main([*argv, "--loss", "kd", "--teacher", str(tiny_with_tokenizer_dir), "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["loss"] == "kd" and summary["train"] == "lora"
    assert summary["heldout_kl_after"] < summary["heldout_kl_before"]
    record = json.loads((out / "recovery.json").read_text())
    assert record["teacher"] == str(tiny_with_tokenizer_dir) and record["config"]["temperature"] == 1.0


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--loss", "kd"], ["does not say which it came from", "--teacher"]),  # its report names no model
        (["--loss", "kd", "--teacher", "PRUNED"], ["itself a pruned model"]),
        (["--loss", "kd", "--temperature", "0"], ["temperature must be a number in (0, 100]"]),
        (["--loss", "mix", "--kd-weight", "1.5"], ["kd_weight must be a number in [0.0, 1.0]"]),
        (["--loss", "ce"], ["unknown recovery loss 'ce'", "kd (distillation"]),
        (["--train", "all"], ["unknown train mode 'all'"]),
        (["--train", "full", "--save-adapter"], ["--save-adapter writes LoRA adapters"]),
    ],
)
def test_bad_distillation_settings_exit_2_and_write_nothing(capsys, pruned_tiny_dir, corpus, tmp_path, extra, needles):
    out = tmp_path / "kd"
    extra = [str(pruned_tiny_dir) if e == "PRUNED" else e for e in extra]
    argv = ["recover", "--model", str(pruned_tiny_dir), "--steps", "1", "--data", str(corpus), *KD, *extra]
    code = main([*argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert all(n in err.replace("\n", " ") for n in needles), err
    assert not out.exists()


def test_the_memory_estimate_counts_the_adapters_the_teacher_and_full_fine_tuning(monkeypatch):
    import nirvana.guard.memory as memory
    from nirvana.errors import OutOfMemory
    from nirvana.models.architectures import decoder_layers, layer_projections
    from nirvana.recovery.memory import recovery_memory, trainable_parameters

    pruned, _ = pruned_tiny("llama")
    lora = RecoveryConfig(**FAST)
    adapters = sum(
        4 * (lin.in_features + lin.out_features)
        for p in layer_projections(pruned)
        for lin in p.named_linears().values()
    )
    assert trainable_parameters(pruned, lora) == adapters  # r = 4 on every projection of the ragged layers
    full = RecoveryConfig(**FAST, train="full")
    assert trainable_parameters(pruned, full) == sum(
        p.numel() for layer in decoder_layers(pruned) for p in layer.parameters()
    )
    lm = recovery_memory(pruned, lora)
    teacher = tiny_model("llama")
    kd_loaded = recovery_memory(pruned, RecoveryConfig(**FAST, loss="kd"), teacher=teacher)
    kd_before = recovery_memory(pruned, RecoveryConfig(**FAST, loss="kd"), teacher_config=teacher.config)
    assert "teacher weights" not in kd_loaded.components and kd_loaded.components["teacher logits"] > 0
    assert kd_before.components["teacher weights"] == memory.estimate_load(teacher.config).total
    assert lm.total < kd_loaded.total < kd_before.total
    assert lm.components["trainable: gradients, AdamW moments, last good copy"] == 4 * adapters * 4
    # recover refuses before copying or training when the estimate cannot fit
    before = copy.deepcopy(pruned.state_dict())
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 1024)
    with pytest.raises(OutOfMemory, match="recovery training needs about"):
        recover(pruned, tiny_data(), lora)
    assert all(torch.equal(v, pruned.state_dict()[k]) for k, v in before.items())
