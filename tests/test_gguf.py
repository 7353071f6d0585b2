"""A `.gguf` path other than the embedded model: converted once, then it loads, prunes, saves, reloads and
generates like a model folder."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from nirvana.checkpoints import gguf_cache
from nirvana.checkpoints.loading import load_model
from nirvana.checkpoints.pruned import load_pruned
from nirvana.cli import main
from nirvana.errors import CorruptCheckpoint, NirvanaError, OutOfMemory
from tests.tiny import tiny_model
from tests.tiny_gguf import FAMILIES, VOCAB, write_gguf

IDS = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("family", FAMILIES)
def test_gguf_loads_with_the_weights_it_was_written_from(tmp_path, family):
    model = tiny_model(family, vocab_size=VOCAB)
    path = write_gguf(model, tmp_path / f"{family}.gguf")
    lm = load_model(str(path), device="cpu")
    assert lm.source == "gguf" and lm.name == str(path)
    assert getattr(lm.model, "hf_quantizer", None) is None  # a plain model: save_pretrained works
    with torch.no_grad():
        torch.testing.assert_close(lm.model(IDS).logits, model(IDS).logits)


def test_gguf_is_converted_once_and_keyed_by_content(tiny_gguf, tmp_path, monkeypatch):
    path, _ = tiny_gguf
    first = load_model(str(path), device="cpu")
    folder = gguf_cache.converted_dir(path)
    assert (folder / "model.safetensors").exists() and folder.is_relative_to(gguf_cache.cache_dir())

    def no_second_conversion(*args, **kwargs):
        raise AssertionError("converted twice")

    monkeypatch.setattr(gguf_cache, "convert_gguf", no_second_conversion)
    again = load_model(str(path), device="cpu")
    with torch.no_grad():
        assert torch.equal(again.model(IDS).logits, first.model(IDS).logits)
    copy = tmp_path / "renamed.gguf"
    copy.write_bytes(path.read_bytes())
    assert gguf_cache.converted_dir(copy).name.endswith(folder.name.rsplit("-", 1)[1])  # same content, same key
    other = tmp_path / "other.gguf"
    write_gguf(tiny_model("qwen2", seed=1, vocab_size=VOCAB), other)
    assert gguf_cache.file_key(other) != gguf_cache.file_key(path)


def test_a_damaged_gguf_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00")  # the magic, then nothing
    with pytest.raises(CorruptCheckpoint, match=r"bad\.gguf"):
        load_model(str(bad), device="cpu")
    assert main(["info", "--model", str(bad)]) == 2


def test_a_child_process_converts_to_the_same_folder_and_its_errors_cross_over(tiny_gguf, tmp_path, monkeypatch):
    # files above ISOLATE_ABOVE convert in a child, so the de-quantization's freed heap never reaches the
    # process that then scores; the result is the same safetensors, and its errors are the same errors
    path, _ = tiny_gguf
    here = gguf_cache.convert_gguf(path, tmp_path / "here", isolate=False)
    child = gguf_cache.convert_gguf(path, tmp_path / "child", isolate=True)
    a, b = load_model(str(here), device="cpu"), load_model(str(child), device="cpu")
    with torch.no_grad():
        assert torch.equal(a.model(IDS).logits, b.model(IDS).logits)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00")
    with pytest.raises(CorruptCheckpoint, match=r"bad\.gguf"):
        gguf_cache.convert_gguf(bad, tmp_path / "bad", isolate=True)
    assert not (tmp_path / "bad").exists()
    monkeypatch.setattr(gguf_cache, "ISOLATE_ABOVE", 0)  # any file is "large": the default isolates it
    calls = []
    monkeypatch.setattr(gguf_cache, "_convert_in_child", lambda *args: calls.append(args))
    gguf_cache.convert_gguf(path, tmp_path / "default")
    assert calls == [(path, tmp_path / "default")]


def test_a_child_that_dies_is_a_clear_error(tmp_path, monkeypatch):
    def killed(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, -9, stdout="", stderr="")

    monkeypatch.setattr(gguf_cache.subprocess, "run", killed)
    with pytest.raises(OutOfMemory, match=r"was killed \(SIGKILL\).*out-of-memory killer.*Nothing was cached"):
        gguf_cache.convert_gguf(tmp_path / "big.gguf", tmp_path / "out", isolate=True)

    def crashed(cmd, **kwargs):
        bars = "Converting GGUF tensors:  40%|####      | 2/5\rConverting GGUF tensors:  60%|######    | 3/5"
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr=f"{bars}\nRuntimeError: disk full\n")

    def segfault(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, -11, stdout="", stderr="")

    monkeypatch.setattr(gguf_cache.subprocess, "run", segfault)
    with pytest.raises(NirvanaError, match=r"child process \(exit status -11\).*memory for the fp32 model"):
        gguf_cache.convert_gguf(tmp_path / "big.gguf", tmp_path / "out", isolate=True)

    monkeypatch.setattr(gguf_cache.subprocess, "run", crashed)
    with pytest.raises(NirvanaError, match=r"child process \(RuntimeError: disk full\)"):
        gguf_cache.convert_gguf(tmp_path / "big.gguf", tmp_path / "out", isolate=True)


def _prune(model: str, out, capsys) -> dict:
    argv = ["prune", "--model", model, "--sparsity", "0.3", "--samples", "2", "--seq-len", "16", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads((out / "report.json").read_text())


def test_gguf_prunes_saves_reloads_and_generates_like_a_folder(tiny_gguf, tiny_tokenizer_dir, tmp_path, capsys):
    path, _ = tiny_gguf
    from_gguf = _prune(str(path), tmp_path / "from-gguf", capsys)
    from_folder = _prune(str(tiny_tokenizer_dir), tmp_path / "from-folder", capsys)
    for key in ("kept_neurons", "kept_kv_groups", "params_after", "achieved_block_sparsity"):
        assert from_gguf[key] == from_folder[key], key
    a, b = load_pruned(tmp_path / "from-gguf"), load_pruned(tmp_path / "from-folder")
    with torch.no_grad():
        torch.testing.assert_close(a.model(IDS).logits, b.model(IDS).logits)
    capsys.readouterr()
    argv = ["generate", "--model", str(tmp_path / "from-gguf"), "--prompt", "the", "--max-new-tokens", "3"]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("the ")
