"""Training data for recovery: sources, the Alpaca template, packing, held-out tail, eval-split refusal."""

from __future__ import annotations

import json

import pytest
import torch

import nirvana.recovery.data as rdata
from nirvana.errors import DatasetNotFound, InvalidInput
from nirvana.recovery.config import RecoveryConfig
from nirvana.recovery.data import PROMPT_NO_INPUT, data_for, format_instruction, load_documents
from tests.support import recovery_data

ROWS = [
    {"instruction": "Name a colour.", "input": "", "output": "Blue."},
    {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"},
]


def test_alpaca_template_with_and_without_input():
    no_input, with_input = (format_instruction(r) for r in ROWS)
    assert no_input == PROMPT_NO_INPUT.format(instruction="Name a colour.", output="Blue.")
    assert "### Input:\n2 and 3\n\n### Response:\n5" in with_input and with_input.startswith("Below is an instruction")


def test_auto_offline_uses_the_calibration_pool_and_says_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    docs, info = load_documents("auto")
    assert info["dataset"] == "wikitext2:validation" and info["requested"] == "auto" and info["kind"] == "text"
    assert any("offline" in n for n in info["notes"]) and len(docs) > 1000


def test_auto_online_uses_alpaca_from_the_hub(monkeypatch):
    import datasets

    monkeypatch.setattr(rdata, "_hub_allowed", lambda: True)
    monkeypatch.setattr(datasets, "load_dataset", lambda path, split: ROWS if path == "yahma/alpaca-cleaned" else 1 / 0)
    docs, info = load_documents("auto")
    assert info["origin"] == "hub:yahma/alpaca-cleaned" and info["template"] == "alpaca"
    assert docs == [format_instruction(r) for r in ROWS]


def test_alpaca_unreachable_is_a_clear_error(monkeypatch):
    import datasets

    def offline(*a, **k):
        raise ConnectionError("no route to host")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DatasetNotFound, match=r"could not be loaded from the hub \(no route to host"):
        load_documents("alpaca")


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_local_instruction_files(tmp_path, suffix):
    path = tmp_path / f"mine{suffix}"
    path.write_text(json.dumps(ROWS) if suffix == ".json" else "\n".join(json.dumps(r) for r in ROWS))
    docs, info = load_documents(str(path))
    assert info["kind"] == "instructions" and docs[1].endswith("### Response:\n5")


def test_windows_are_packed_shuffled_and_the_heldout_tail_is_disjoint(smollm2, tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("\n".join(f"Document {i} talks about subject {i * 7 % 13} at some length." for i in range(400)))
    data = recovery_data(smollm2.tokenizer, str(path), seq_len=32, train_sequences=20, heldout_sequences=4, seed=1)
    assert data.train.shape == (20, 32) and data.heldout.shape == (4, 32)
    train_rows = {tuple(r.tolist()) for r in data.train}
    assert not train_rows & {tuple(r.tolist()) for r in data.heldout}
    again = recovery_data(smollm2.tokenizer, str(path), seq_len=32, train_sequences=20, heldout_sequences=4, seed=1)
    assert torch.equal(data.train, again.train)  # seeded
    other = recovery_data(smollm2.tokenizer, str(path), seq_len=32, train_sequences=20, heldout_sequences=4, seed=2)
    assert not torch.equal(data.train, other.train)
    assert data.info["train_tokens"] == 640 and data.info["epochs"] < 1


def test_a_budget_beyond_the_data_repeats_it_and_says_so(smollm2, tmp_path):
    path = tmp_path / "small.txt"
    path.write_text("\n".join(f"Line {i} of a small file." for i in range(40)))
    data = recovery_data(smollm2.tokenizer, str(path), seq_len=16, train_sequences=100, heldout_sequences=2)
    assert data.train.shape == (100, 16) and data.info["epochs"] > 1
    assert any("repeats" in n for n in data.info["notes"])
    with pytest.raises(InvalidInput, match="fewer than the 50 held-out"):
        recovery_data(smollm2.tokenizer, str(path), seq_len=16, train_sequences=1, heldout_sequences=50)


def test_data_for_tokenizes_to_the_configs_budget(smollm2, tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("\n".join(f"Document {i} talks about subject {i * 7 % 13} at some length." for i in range(400)))
    config = RecoveryConfig(steps=3, batch_size=4, micro_batch_size=2, seq_len=32, eval_sequences=2, seed=5)
    data = data_for(config, smollm2.tokenizer, *load_documents(str(path)))
    assert data.train.shape == (3 * 4, 32) and data.heldout.shape == (2, 32) and data.info["seed"] == 5
    same = recovery_data(smollm2.tokenizer, str(path), seq_len=32, train_sequences=12, heldout_sequences=2, seed=5)
    assert torch.equal(data.train, same.train) and torch.equal(data.heldout, same.heldout)
