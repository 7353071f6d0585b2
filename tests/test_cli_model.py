"""`info` and `generate` on a tiny model: flags reach the loader; prompts reach the model as the library builds them."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import GenerationMixin

from nirvana.cli import main
from nirvana.measure.generation import generate
from tests.tiny_gguf import BOS_ID


def test_max_memory_reaches_the_loader(tiny_tokenizer_dir, capsys):
    """A 1 KB cap on the CPU leaves no room for any layer: accelerate offloads every weight (meta device)."""
    base = ["info", "--model", str(tiny_tokenizer_dir), "--device", "cpu", "--json"]
    assert main(base) == 0
    assert json.loads(capsys.readouterr().out)["device"] == "cpu"
    assert main([*base, "--max-memory", "cpu=1KB"]) == 0
    assert json.loads(capsys.readouterr().out)["device"] == "meta"


@pytest.fixture
def prompts_seen(monkeypatch):
    """The input ids of every `model.generate` call."""
    seen: list[list[int]] = []
    real = GenerationMixin.generate

    def spy(self, *args, **kwargs):
        seen.append(kwargs["input_ids"][0].tolist())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(GenerationMixin, "generate", spy)
    return seen


@pytest.mark.parametrize("chat", [True, False])
def test_generate_cli_tokenizes_like_the_library(tiny_tokenizer_dir, capsys, prompts_seen, chat):
    """The chat template writes its own BOS: the CLI must not add a second one (nor drop it in plain mode)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    flags = ["--chat"] if chat else []
    argv = ["generate", "--model", str(tiny_tokenizer_dir), "--prompt", "hello", "--max-new-tokens", "3", *flags]
    assert main(argv) == 0
    out = capsys.readouterr().out
    ids = prompts_seen[-1]
    assert ids[0] == BOS_ID and ids.count(BOS_ID) == 1, ids
    model = AutoModelForCausalLM.from_pretrained(tiny_tokenizer_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    row = generate(model, tokenizer, ["hello"], max_new_tokens=3, chat=chat)[0]
    assert prompts_seen[-1] == ids  # same ids as the library's own call
    assert out == f"hello {row['output']}\n"
