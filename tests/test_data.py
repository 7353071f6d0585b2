"""Dataset names resolve to the right text; files are checked; failures name every place tried."""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

import pytest
import torch

from nirvana.data.calibration import calibration_batch, load_npy
from nirvana.data.text import load_text
from nirvana.errors import DatasetNotFound, InvalidInput


def test_shared_data_resolves(monkeypatch):
    wiki = load_text("wikitext2")
    assert wiki.split == "test" and wiki.origin.endswith("wiki.test.raw") and len(wiki.documents) > 2000
    assert load_text("ptb").split == "validation" and load_text("ptb:test").origin.endswith("ptb.test.txt")
    assert load_text("wikitext2-valid").origin.endswith("wiki.valid.tokens")


def test_embedded_corpus_needs_nothing():
    text = load_text("pydoc")
    assert text.origin == "embedded:pydoc_data.topics" and len(text.joined()) > 100_000


def test_python_code_corpus_is_the_stdlib_source(smollm2, monkeypatch, tmp_path):
    """`python-code` is the interpreter's own top-level modules, each a whole parseable file, in name order; a
    calibration batch drawn from it is real code and the same for the same seed; an interpreter without its
    sources gets a message that says what to pass instead."""
    text = load_text("python-code")
    modules = sorted(Path(os.__file__).parent.glob("*.py"))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert text.origin == f"embedded:{version} stdlib ({len(text.documents)} modules)" and len(text.documents) > 100
    assert text.documents[0] == modules[0].read_text(encoding="utf-8").strip()
    assert Path(os.__file__).read_text(encoding="utf-8").strip() in text.documents  # os.py itself
    for doc in text.documents[:20]:
        ast.parse(doc)  # whole modules, not lines
    tok = smollm2.tokenizer
    a, b = (calibration_batch(tok, "python-code", samples=4, seq_len=64, seed=3) for _ in range(2))
    assert torch.equal(a.input_ids, b.input_ids) and a.source == "python-code"
    assert "def " in tok.decode(
        calibration_batch(tok, "python-code", samples=64, seq_len=64, seed=0).input_ids.flatten()
    )
    empty = tmp_path / "lib"
    empty.mkdir()
    monkeypatch.setattr(os, "__file__", str(empty / "os.py"))
    with pytest.raises(DatasetNotFound, match="holds no readable"):
        load_text("python-code")


def test_missing_data_names_every_place_tried_or_falls_back_visibly(monkeypatch, tmp_path):
    monkeypatch.setenv("NIRVANA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetNotFound) as info:
        load_text("wikitext2")
    assert str(tmp_path / "wikitext-2-raw" / "wiki.test.raw") in str(info.value)
    assert "hub dataset wikitext" in str(info.value)
    fallback = load_text("wikitext2", fallback=True)
    assert fallback.name == "pydoc" and "could not be found" in fallback.fallback_reason


def test_text_and_jsonl_files(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_text("first line\n\nsecond line\n")
    assert load_text(str(txt)).documents == ["first line", "second line"]
    jsonl = tmp_path / "b.jsonl"
    jsonl.write_text(json.dumps({"text": "hello"}) + "\n" + json.dumps({"text": "world"}) + "\n")
    assert load_text(str(jsonl)).documents == ["hello", "world"]


@pytest.mark.parametrize(
    "content, match",
    [
        (b"", "holds no text"),
        (b"  \n\n ", "holds no text"),
        (b"\x00\x01\x02abc", "looks binary"),
        (b"\xff\xfe\xfa", "not UTF-8"),
    ],
)
def test_bad_files_are_rejected(tmp_path, content, match):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(DatasetNotFound, match=match):
        load_text(str(path))


def test_unknown_dataset_lists_the_accepted_names():
    with pytest.raises(DatasetNotFound, match=r"accepted: .*python-code.*wikitext2"):
        load_text("imagenet")


def test_calibration_batch_is_seeded_and_sized(smollm2, tmp_path):
    tok = smollm2.tokenizer
    a = calibration_batch(tok, "wikitext2-valid", samples=4, seq_len=64, seed=1)
    b = calibration_batch(tok, "wikitext2-valid", samples=4, seq_len=64, seed=1)
    c = calibration_batch(tok, "wikitext2-valid", samples=4, seq_len=64, seed=2)
    assert a.input_ids.shape == (4, 64) and a.hash == b.hash != c.hash
    with pytest.raises(InvalidInput, match="seq_len T must be"):
        calibration_batch(tok, "pydoc", samples=4, seq_len=0)
    short = tmp_path / "short.txt"
    short.write_text("only a few words here\n")
    with pytest.raises(InvalidInput, match="no document of at least"):
        calibration_batch(tok, str(short), samples=4, seq_len=64)


def test_npy_calibration(tmp_path):
    import numpy as np

    np.save(tmp_path / "ids.npy", np.arange(12).reshape(3, 4))
    batch = load_npy(tmp_path / "ids.npy")
    assert batch.input_ids.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    np.save(tmp_path / "f.npy", np.ones((2, 2), dtype=np.float32))
    with pytest.raises(InvalidInput, match="integer array"):
        load_npy(tmp_path / "f.npy")


def test_unset_data_dir_finds_the_shared_folder_beside_the_checkout(monkeypatch, tmp_path):
    from nirvana.data import text as data

    monkeypatch.delenv("NIRVANA_DATA_DIR", raising=False)
    monkeypatch.setattr(data, "SIBLING_DATA_DIR", tmp_path)
    assert data.data_dir() == tmp_path
    monkeypatch.setattr(data, "SIBLING_DATA_DIR", tmp_path / "absent")
    assert data.data_dir() is None
    monkeypatch.setenv("NIRVANA_DATA_DIR", str(tmp_path / "explicit"))
    assert data.data_dir() == tmp_path / "explicit"
