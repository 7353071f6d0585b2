"""The teacher-logit cache of distillation (issue 25): a cached run equals one that computes the logits, a
second run on the same windows never runs the teacher, a half cache is half the size, the size is checked
against the disk before training, a cut-short file is computed again, and the command line's refusals."""

from __future__ import annotations

import json
from collections import namedtuple

import pytest
import torch
from conftest import random_batch
from test_recovery import FAST, _one_thread, pruned_tiny, tiny_data  # noqa: F401 (autouse fixture)
from test_recovery_distill import KD

import nirvana.recovery.teacher_cache as teacher_cache
from nirvana.cli import main
from nirvana.errors import InvalidInput
from nirvana.recovery.config import RecoveryConfig
from nirvana.recovery.teacher_cache import TeacherCache
from nirvana.recovery.train import micro_batches, recover
from tests.tiny import tiny_model

CONFIG = RecoveryConfig(**FAST, steps=3, lr=1e-2, dropout=0.0, loss="kd")


def _teacher():
    teacher = tiny_model("llama", attn_implementation="sdpa")
    with torch.no_grad():
        teacher.lm_head.weight.mul_(10.0)  # peaked: a KL that training moves
    return teacher


def _forbid_forward(teacher):
    def boom(*args, **kwargs):
        raise AssertionError("the teacher ran although its logits were cached")

    teacher.forward = boom


def test_a_cached_run_equals_an_uncached_one_and_a_second_run_never_runs_the_teacher(tmp_path):
    teacher, (pruned, _), data = _teacher(), pruned_tiny("llama"), tiny_data()
    plain = recover(pruned, data, CONFIG, teacher=teacher)
    first = recover(pruned, data, CONFIG, teacher=teacher, teacher_cache=TeacherCache(tmp_path, teacher))
    assert first.train_loss == plain.train_loss and first.heldout_kl == plain.heldout_kl  # fp32: exact
    distinct = {TeacherCache(tmp_path, teacher).key(b): b for b in micro_batches(data, CONFIG)}
    record = first.summary()["teacher_cache"]
    assert record["batches"] == len(distinct) == len(list(tmp_path.glob("*.safetensors")))
    assert record["present_before"] == 0 and record["misses"] == len(distinct)
    assert record["bytes_total"] == record["bytes_written"] == sum(b.numel() * 64 * 4 for b in distinct.values())
    _forbid_forward(teacher)
    second = recover(pruned, data, CONFIG, teacher=teacher, teacher_cache=TeacherCache(tmp_path, teacher))
    assert second.train_loss == plain.train_loss and second.heldout_kl == plain.heldout_kl
    record = second.summary()["teacher_cache"]
    assert record["misses"] == 0 and record["bytes_written"] == 0 and record["present_before"] == record["batches"]
    assert record["hits"] > record["batches"]  # the held-out windows are read at every evaluation


def test_with_the_next_token_loss_only_the_held_out_windows_are_cached(tmp_path):
    teacher, (pruned, _), data = _teacher(), pruned_tiny("llama"), tiny_data()
    lm = RecoveryConfig(**FAST, steps=3, lr=1e-2, loss="lm")  # the teacher only measures the held-out KL
    result = recover(pruned, data, lm, teacher=teacher, teacher_cache=TeacherCache(tmp_path, teacher))
    held = len(data.heldout.split(lm.micro_batch_size))
    assert result.teacher_cache["batches"] == result.teacher_cache["misses"] == held == len(micro_batches(data, lm))
    assert not list(tmp_path.glob("*.tmp"))


def test_another_teacher_or_other_windows_miss(tmp_path):
    teacher = _teacher()
    ids = random_batch(vocab=64, n=2, t=8).input_ids
    cache = TeacherCache(tmp_path, teacher)
    other = TeacherCache(tmp_path, tiny_model("llama", num_hidden_layers=3))
    assert cache.key(ids) != other.key(ids) != cache.key(ids.flip(0))
    assert cache.key(ids) != TeacherCache(tmp_path, teacher, "float16").key(ids)
    assert cache.key(ids) == TeacherCache(tmp_path, teacher).key(ids.clone())


def test_a_half_cache_is_half_the_size_and_reads_back_what_it_returned(tmp_path):
    teacher = _teacher()
    ids = random_batch(vocab=64, n=2, t=8).input_ids
    compute = lambda: teacher(input_ids=ids).logits.detach()
    full, half = TeacherCache(tmp_path / "f", teacher), TeacherCache(tmp_path / "h", teacher, "float16")
    exact, rounded = full.get(ids, compute), half.get(ids, compute)
    torch.testing.assert_close(exact, compute(), rtol=0, atol=0)
    torch.testing.assert_close(rounded, exact, rtol=2e-3, atol=2e-3)
    assert half.bytes_written * 2 == full.bytes_written == ids.numel() * 64 * 4
    _forbid_forward(teacher)
    assert torch.equal(half.get(ids, compute), rounded)  # the first run saw what a later one reads


def test_a_cut_short_file_is_computed_again(tmp_path):
    teacher = _teacher()
    ids = random_batch(vocab=64, n=2, t=8).input_ids
    cache = TeacherCache(tmp_path, teacher)
    cache.path(ids).write_bytes(b"not a safetensors file")
    compute = lambda: teacher(input_ids=ids).logits.detach()
    torch.testing.assert_close(cache.get(ids, compute), compute(), rtol=0, atol=0)
    assert cache.misses == 1 and TeacherCache(tmp_path, teacher).get(ids, compute).shape == (2, 8, 64)


def test_a_cache_that_cannot_fit_on_its_disk_is_refused_before_training(tmp_path, monkeypatch):
    teacher, (pruned, _), data = _teacher(), pruned_tiny("llama"), tiny_data()
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(teacher_cache.shutil, "disk_usage", lambda path: usage(2**40, 2**40, 2**20))
    before = {k: v.clone() for k, v in pruned.state_dict().items()}
    with pytest.raises(InvalidInput, match=r"needs 0\.00 GiB more in .* and its disk has 0\.00 GiB free"):
        recover(pruned, data, CONFIG, teacher=teacher, teacher_cache=TeacherCache(tmp_path / "c", teacher))
    assert not (tmp_path / "c").exists() and all(torch.equal(v, pruned.state_dict()[k]) for k, v in before.items())
    with pytest.raises(InvalidInput, match="unknown teacher-cache dtype 'int8'"):
        TeacherCache(tmp_path, teacher, "int8")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInput, match="is a file"):
        TeacherCache(tmp_path / "file", teacher)


def test_recover_teacher_cache_from_the_cli(
    capsys, monkeypatch, pruned_tiny_dir, tiny_with_tokenizer_dir, corpus, tmp_path
):
    cache, plans = tmp_path / "logits", []
    plan = TeacherCache.plan
    monkeypatch.setattr(TeacherCache, "plan", lambda self, batches: plans.append(1) or plan(self, batches))
    argv = ["recover", "--model", str(pruned_tiny_dir), "--steps", "2", "--data", str(corpus), *KD, "--loss", "kd"]
    argv += ["--teacher", str(tiny_with_tokenizer_dir), "--teacher-cache", str(cache)]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    captured = capsys.readouterr()
    first = json.loads(captured.out)
    assert f"teacher-logit cache {cache} (float32)" in captured.err and "0 already there" in captured.err
    assert captured.err.count("teacher-logit cache ") == len(plans) == 1  # planned once, said once
    assert first["teacher_cache"]["misses"] == first["teacher_cache"]["batches"] > 0
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["teacher_cache"]["misses"] == 0 and second["heldout_kl_after"] == first["heldout_kl_after"]
    record = json.loads((tmp_path / "b" / "recovery.json").read_text())
    assert record["teacher_cache"]["directory"] == str(cache)


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--loss", "lm", "--teacher-cache", "C"], ["--loss lm has no teacher"]),
        (["--loss", "kd", "--teacher-cache", "C", "--teacher-cache-dtype", "int8"], ["is not one of float32"]),
        (["--loss", "kd", "--teacher-cache", "FILE"], ["is a file"]),
    ],
)
def test_bad_teacher_cache_settings_exit_2_and_write_nothing(capsys, pruned_tiny_dir, corpus, tmp_path, extra, needles):
    (tmp_path / "file").write_text("x")
    extra = [str(tmp_path / "file") if e == "FILE" else str(tmp_path / "c") if e == "C" else e for e in extra]
    out = tmp_path / "kd"
    argv = ["recover", "--model", str(pruned_tiny_dir), "--steps", "1", "--data", str(corpus), *KD, *extra]
    code = main([*argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert all(n in err.replace("\n", " ") for n in needles), err
    assert not out.exists() and not (tmp_path / "c").exists()
