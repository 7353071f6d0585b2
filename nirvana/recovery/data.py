"""Training text for LoRA recovery: where it comes from, tokenized into `[N, T]` windows.

Sources, one string each (`--data`):
- `auto` (default): the reference's instruction set (`alpaca`) when the hub is reachable, else
  the calibration pool (`calibration`, WikiText-2 validation), which is disjoint from the
  perplexity test split. What was used is recorded in `RecoveryData.info`.
- `alpaca`: `yahma/alpaca-cleaned` from the hub, formatted with the Alpaca prompt template.
- a dataset name that `nirvana.data.text.load_text` knows (`wikitext2-valid`, `pydoc`, ...).
- a local file: `.json` (a list of objects) or `.jsonl` (one object per line) with
  `instruction` [+ `input`] [+ `output`] fields (Alpaca template) or a `text` field (plain),
  or plain text (`.txt`, `.md`, `.raw`, `.tokens`: one document per line).

Evaluation splits (WikiText-2 test, PTB validation and test, LAMBADA test) are refused, by name,
by path and by content, so recovery never trains on what `eval --ppl` then measures.
Texts are packed: documents joined (instructions each end with EOS), cut into T-token windows;
the held-out windows are the tail of the stream, the training windows are shuffled with the seed.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import torch

from nirvana.checkpoints.options import hub_reachable
from nirvana.data.text import DATASETS, data_dir, load_text, parse_name
from nirvana.data.tokens import corpus_ids
from nirvana.errors import DatasetNotFound, InvalidInput
from nirvana.guard.safety import TEXT_ROOTS_ENV, check_local_path
from nirvana.recovery.config import RecoveryConfig

CALIBRATION = "wikitext2-valid"
ALPACA_HUB_ID = "yahma/alpaca-cleaned"
SOURCES = ("auto", "alpaca", "calibration")
PLAIN_SUFFIXES = (".txt", ".text", ".md", ".raw", ".tokens")
INSTRUCTION_SUFFIXES = (".json", ".jsonl")
# (name, split) pairs that `eval --ppl` measures: never train on them.
EVAL_SPLITS = (("wikitext2", "test"), ("ptb", "validation"), ("ptb", "test"), ("lambada", "test"))
MAX_FILE_BYTES = 512 * 1024 * 1024

# The Alpaca prompt template (tatsu-lab/stanford_alpaca, used by alpaca-lora and LLM-Pruner).
PROMPT_WITH_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n{output}"
)
PROMPT_NO_INPUT = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Response:\n{output}"
)


@dataclass
class RecoveryData:
    """Token windows for training and held-out loss, and a record of where they came from."""

    train: torch.Tensor  # [N_train, T] int64
    heldout: torch.Tensor  # [N_heldout, T] int64
    info: dict = field(default_factory=dict)  # source, kind, origin, documents, tokens, template, notes

    @property
    def seq_len(self) -> int:
        return int(self.train.shape[1])


def format_instruction(row: dict) -> str:
    """One Alpaca-style example as the prompt template + response."""
    instruction = str(row.get("instruction", "")).strip()
    extra = str(row.get("input", "") or "").strip()
    output = str(row.get("output", "") or "").strip()
    template = PROMPT_WITH_INPUT if extra else PROMPT_NO_INPUT
    return template.format(instruction=instruction, input=extra, output=output)


def load_documents(source: str = "auto") -> tuple[list[str], dict]:
    """Resolve `source` to documents and an info record; refuse evaluation splits.

    Returns (documents, info) where info has `source`, `kind` ("instructions" or "text"),
    `origin` (a path, `hub:<id>` or a local dataset file) and `notes`.
    """
    if source is None or not str(source).strip():
        raise DatasetNotFound(_accepted("no training data given"))
    source = str(source).strip()
    notes: list[str] = []
    if source == "auto":
        if _hub_allowed():
            try:
                docs, info = _alpaca()
                return docs, {**info, "requested": "auto"}
            except DatasetNotFound as exc:
                notes.append(f"alpaca unavailable ({exc}); used the calibration pool")
        else:
            notes.append("the hub is offline (HF_HUB_OFFLINE / no network): used the calibration pool, not Alpaca")
        source_name = CALIBRATION
    elif source == "calibration":
        source_name = CALIBRATION
    elif source in ("alpaca", ALPACA_HUB_ID):
        return _alpaca()
    else:
        source_name = source
    path = Path(source_name).expanduser()
    if path.suffix or path.exists() or os.sep in source_name:
        docs, info = _from_file(path)
    else:
        _refuse_eval_name(source_name)
        text = load_text(source_name)
        docs, info = text.documents, {"kind": "text", "origin": text.origin, "dataset": text.label}
        _refuse_eval_path(Path(text.origin))
    info = {"source": source_name, "requested": source, **info, "notes": notes + info.get("notes", [])}
    return docs, info


def data_for(config: RecoveryConfig, tokenizer, docs: list[str], info: dict) -> RecoveryData:
    """Documents from `load_documents`, tokenized to `config`'s budget: total_steps x batch_size
    training windows of seq_len tokens and eval_sequences held out, in config.seed's order. The CLI,
    the app and the benchmark all build their training data here."""
    return tokenize_documents(
        tokenizer,
        docs,
        info,
        seq_len=config.seq_len,
        train_sequences=max(1, config.total_steps * config.batch_size),
        heldout_sequences=config.eval_sequences,
        seed=config.seed,
    )


def tokenize_documents(
    tokenizer, docs: list[str], info: dict, *, seq_len: int, train_sequences: int, heldout_sequences: int, seed: int = 0
) -> RecoveryData:
    """Tokenize documents resolved by `load_documents` into shuffled training windows and a disjoint
    held-out tail. Only as much text as the budget needs is tokenized; a budget larger than the data
    repeats it (epochs > 1, recorded), each epoch in a new seeded order."""
    docs = list(docs)
    if info["kind"] == "instructions":
        random.Random(seed).shuffle(docs)  # independent examples: any order; plain text keeps its order
    eos = tokenizer.eos_token_id
    need = (train_sequences + heldout_sequences) * seq_len
    stream: list[int] = []
    used = 0
    for start in range(0, len(docs), 256):
        chunk = docs[start : start + 256]
        if info["kind"] == "instructions":
            for ids in corpus_ids(tokenizer, chunk):
                stream.extend(ids + ([eos] if eos is not None else []))
        else:
            stream.extend(corpus_ids(tokenizer, "\n\n".join(chunk) + "\n\n"))
        used = start + len(chunk)
        if len(stream) >= need:
            break
    windows = len(stream) // seq_len
    if windows < heldout_sequences + 1:
        raise InvalidInput(
            f"the training data ({info.get('origin')}) has {len(stream)} tokens: fewer than the {heldout_sequences} "
            f"held-out + 1 training windows of {seq_len} tokens it needs; use more text or a smaller --seq-len."
        )
    ids = torch.tensor(stream[: windows * seq_len], dtype=torch.long).view(windows, seq_len)  # [W, T]
    heldout, pool = ids[windows - heldout_sequences :], ids[: windows - heldout_sequences]
    order: list[int] = []
    rng = random.Random(seed)
    epochs = 0
    while len(order) < train_sequences:
        perm = list(range(len(pool)))
        rng.shuffle(perm)
        order.extend(perm)
        epochs += 1
    train = pool[torch.tensor(order[:train_sequences], dtype=torch.long)]
    info = {
        **info,
        "documents_used": used,
        "documents_total": len(docs),
        "tokens_available": int(pool.numel()),
        "train_tokens": int(train.numel()),
        "heldout_tokens": int(heldout.numel()),
        "epochs": round(train_sequences / len(pool), 3),
        "seq_len": seq_len,
        "seed": seed,
    }
    if epochs > 1:
        repeat = f"the budget is {info['epochs']}x the {len(pool)} training windows available: the data repeats"
        info["notes"] = [*info.get("notes", []), repeat]
    return RecoveryData(train, heldout, info)


def _hub_allowed() -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0") or os.environ.get("HF_DATASETS_OFFLINE", "0") not in (
        "",
        "0",
    ):
        return False
    return hub_reachable()


def _alpaca() -> tuple[list[str], dict]:
    try:
        # here, not at the top: datasets is slow to import and only needed for hub datasets
        import datasets  # optional heavy dependency, only for the hub path

        rows = datasets.load_dataset(ALPACA_HUB_ID, split="train")
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise DatasetNotFound(
            f"the instruction set {ALPACA_HUB_ID} could not be loaded from the hub ({first}). Connect to the hub, "
            "or pass a local .json/.jsonl of instructions, a text file, or 'calibration'."
        ) from exc
    docs = [format_instruction(r) for r in rows]
    return docs, {
        "source": "alpaca",
        "kind": "instructions",
        "origin": f"hub:{ALPACA_HUB_ID}",
        "template": "alpaca",
        "notes": [],
    }


def _from_file(path: Path) -> tuple[list[str], dict]:
    suffix = path.suffix.lower()
    if not path.exists():
        raise DatasetNotFound(_accepted(f"training data file {str(path)!r} does not exist"))
    if path.is_dir():
        raise DatasetNotFound(_accepted(f"{str(path)!r} is a directory, not a file"))
    check_local_path(path, TEXT_ROOTS_ENV, "text file")  # under NIRVANA_TEXT_ROOTS when it is set
    if suffix not in PLAIN_SUFFIXES + INSTRUCTION_SUFFIXES:
        raise DatasetNotFound(_accepted(f"{str(path)!r} has an unknown format ({suffix or 'no suffix'})"))
    _refuse_eval_path(path)
    if path.stat().st_size > MAX_FILE_BYTES:
        raise DatasetNotFound(f"{str(path)!r} is larger than {MAX_FILE_BYTES >> 20} MiB; pass a smaller file.")
    raw = path.read_bytes()
    if b"\x00" in raw[:65536]:
        raise DatasetNotFound(_accepted(f"{str(path)!r} looks binary (it contains NUL bytes)"))
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetNotFound(_accepted(f"{str(path)!r} is not UTF-8 text ({exc.reason} at byte {exc.start})")) from exc
    if not content.strip():
        raise DatasetNotFound(_accepted(f"{str(path)!r} is empty"))
    if suffix in PLAIN_SUFFIXES:
        docs = [line.strip() for line in content.splitlines() if line.strip()]
        info = {"kind": "text", "origin": str(path)}
    else:
        rows = _json_rows(path, content, suffix)
        docs, info = _rows_to_docs(path, rows)
    _refuse_eval_content(path, docs)
    return docs, info


def _json_rows(path: Path, content: str, suffix: str) -> list:
    if suffix == ".json":
        try:
            rows = json.loads(content)
        except json.JSONDecodeError as exc:
            raise DatasetNotFound(_accepted(f"{str(path)!r} is not valid JSON ({exc.msg}, line {exc.lineno})")) from exc
        if isinstance(rows, dict) and isinstance(rows.get("data"), list):
            rows = rows["data"]
        if not isinstance(rows, list):
            raise DatasetNotFound(_accepted(f"{str(path)!r} holds a JSON {type(rows).__name__}, not a list of objects"))
        return rows
    rows = []
    for i, line in enumerate(content.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetNotFound(_accepted(f"{str(path)!r} line {i} is not JSON ({exc.msg})")) from exc
    return rows


def _rows_to_docs(path: Path, rows: list) -> tuple[list[str], dict]:
    if not rows:
        raise DatasetNotFound(_accepted(f"{str(path)!r} holds no examples"))
    docs, kinds = [], set()
    for i, row in enumerate(rows, 1):
        if isinstance(row, dict) and isinstance(row.get("instruction"), str) and row["instruction"].strip():
            docs.append(format_instruction(row))
            kinds.add("instructions")
        elif isinstance(row, dict) and isinstance(row.get("text"), str):
            if row["text"].strip():
                docs.append(row["text"].strip())
            kinds.add("text")
        else:
            keys = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise DatasetNotFound(
                _accepted(f"{str(path)!r} example {i} has neither a string 'instruction' nor a 'text' field ({keys})")
            )
    if not docs:
        raise DatasetNotFound(_accepted(f"{str(path)!r} holds only empty texts"))
    kind = "instructions" if kinds == {"instructions"} else "text"
    return docs, {"kind": kind, "origin": str(path), "template": "alpaca" if kind == "instructions" else None}


def _eval_files() -> list[Path]:
    root = data_dir()
    if root is None:
        return []
    return [root / DATASETS[s].local for s in EVAL_SPLITS if s in DATASETS and DATASETS[s].local]


def _refuse_eval_name(name: str) -> None:
    base, split = parse_name(name)
    if (base, split) in EVAL_SPLITS:
        raise InvalidInput(
            f"{name!r} is an evaluation split ({base}:{split}): `eval --ppl` measures it, so training on it would "
            f"report a perplexity on text the model has seen. Use 'calibration' ({CALIBRATION}, disjoint from "
            "the test split), 'alpaca', or your own file."
        )


def _refuse_eval_path(path: Path) -> None:
    try:
        resolved = path.resolve()
        hits = [f for f in _eval_files() if f.exists() and f.resolve() == resolved]
    except OSError:
        hits = []
    if hits:
        raise InvalidInput(
            f"{str(path)!r} is an evaluation split's file: `eval --ppl` measures it, so it cannot be training data. "
            f"Use 'calibration' ({CALIBRATION}), 'alpaca', or another file."
        )


def _refuse_eval_content(path: Path, docs: list[str]) -> None:
    """Refuse a file whose long lines are mostly lines of an evaluation split (a copy under another name)."""
    probe = [d for d in docs[:2000] if len(d) >= 40][:500]
    if len(probe) < 5:
        return
    for eval_file in _eval_files():
        if not eval_file.exists():
            continue
        lines = {line.strip() for line in eval_file.read_text(encoding="utf-8", errors="replace").splitlines()}
        shared = sum(d in lines for d in probe)
        if shared / len(probe) > 0.2:
            raise InvalidInput(
                f"{str(path)!r} overlaps the evaluation file {eval_file.name}: {shared} of {len(probe)} sampled lines "
                "are in it. Training on evaluation text makes the perplexity meaningless; use other text."
            )


def _accepted(what: str) -> str:
    return (
        f"{what}. Accepted training data: 'auto', 'alpaca' ({ALPACA_HUB_ID} from the hub), 'calibration' "
        f"({CALIBRATION}), a dataset name, a .json/.jsonl file of instructions ('instruction' [+ 'input'] + "
        "'output' fields) or texts ('text' field), or a UTF-8 text file (.txt, .md: one document per line)."
    )
