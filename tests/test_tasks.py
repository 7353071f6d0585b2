"""lm-evaluation-harness on the in-memory model, offline, on the local task in tests/fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nirvana.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
TASK = "nirvana_tiny_qa"


@pytest.fixture
def offline_harness(tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(ROOT)  # the task YAML names its data file relative to the repository root


@pytest.fixture(scope="module")
def tiny_lm(tiny_with_tokenizer_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (
        AutoModelForCausalLM.from_pretrained(tiny_with_tokenizer_dir).eval(),
        AutoTokenizer.from_pretrained(tiny_with_tokenizer_dir),
    )


def hand_accuracy(model, tok) -> tuple[float, float]:
    """acc and acc_norm of the fixture task computed directly: argmax of summed log-likelihood (/ chars)."""
    docs = [json.loads(line) for line in (FIXTURES / f"{TASK}.jsonl").read_text().splitlines()]
    acc = acc_norm = 0
    for doc in docs:
        context = f"Question: {doc['question']}\nAnswer:"
        lls = []
        for choice in doc["choices"]:
            ctx = tok(context, add_special_tokens=False)["input_ids"]
            whole = tok(context + " " + choice, add_special_tokens=False)["input_ids"]
            cont = whole[len(ctx) :]
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([whole[:-1]])).logits[0].float(), -1)  # (len-1, V)
            lls.append(sum(logp[len(ctx) - 1 + i, t].item() for i, t in enumerate(cont)))
        acc += int(max(range(len(lls)), key=lambda i: lls[i]) == doc["label"])
        norm = [ll / len(c) for ll, c in zip(lls, doc["choices"])]
        acc_norm += int(max(range(len(norm)), key=lambda i: norm[i]) == doc["label"])
    return acc / len(docs), acc_norm / len(docs)


def test_local_task_runs_offline_and_matches_a_hand_computation(tiny_lm, offline_harness):
    import lm_eval

    from nirvana.measure.tasks import run_tasks

    model, tok = tiny_lm
    result = run_tasks(model, tok, [TASK], include_path=FIXTURES)
    task = result["tasks"][TASK]
    assert result["harness_version"] == lm_eval.__version__
    assert 0.0 <= task["acc"] <= 1.0 and 0.0 <= task["acc_norm"] <= 1.0
    assert task["samples"] == 6
    acc, acc_norm = hand_accuracy(model, tok)
    assert task["acc"] == pytest.approx(acc)
    assert task["acc_norm"] == pytest.approx(acc_norm)
    again = run_tasks(model, tok, TASK, include_path=FIXTURES)  # a comma string works too
    assert again["cache_hit"] and again["tasks"][TASK]["acc"] == task["acc"]


def test_unknown_task_names_are_refused_with_suggestions(tiny_lm, offline_harness):
    from nirvana.measure.tasks import run_tasks

    model, tok = tiny_lm
    with pytest.raises(InvalidInput, match="nirvana_tiny_qa"):
        run_tasks(model, tok, ["nirvana_tiny_q"], include_path=FIXTURES, use_cache=False)
    with pytest.raises(InvalidInput):
        run_tasks(model, tok, [], include_path=FIXTURES)
    with pytest.raises(InvalidInput):
        run_tasks(model, tok, [TASK], include_path=FIXTURES / "missing")
