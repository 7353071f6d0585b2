"""One recovery run, written once: settings checked, data, train, merge, save, records.

The CLI's `recover` (and `prune --recover-steps`) call `recover_and_save`; the app's Recover tab
calls `run_recovery` in its background thread (its Stop button is `should_stop`) and saves later,
on request, with `save_recovered`. Both record the run's `brief_summary`; they keep only their
printing and their widgets.

    result = run_recovery(lm.model, lm.tokenizer, RecoveryConfig(steps=16), "calibration")
    summary = recover_and_save(lm.model, lm.tokenizer, lm.plan, config, "calibration", "out/p50r")
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch.nn as nn

from nirvana.errors import TrainingDiverged
from nirvana.recovery.config import RecoveryConfig
from nirvana.recovery.data import data_for, load_documents
from nirvana.recovery.save import save_recovered
from nirvana.recovery.teacher_cache import TeacherCache
from nirvana.recovery.train import (
    RecoveryResult,
    RecoveryStep,
    StopFlag,
    recover,
    target_module_names,
)

Documents = str | tuple[list[str], dict]  # a data source for `load_documents`, or what it returned
Log = Callable[[str], None] | None

# The few figures of a run, flat (the runs list shows scalars): what the CLI prints and both record.
_BRIEF = ("status", "steps_done", "tokens_trained", "tokens_per_second", "train_seconds", "seconds")
_DATA = ("source", "origin", "kind", "train_tokens", "epochs", "notes")


def run_recovery(
    model: nn.Module,
    tokenizer,
    config: RecoveryConfig,
    documents: Documents = "auto",
    *,
    progress: Callable[[RecoveryStep], None] | None = None,
    log: Log = None,
    should_stop: StopFlag = None,
    inplace: bool = False,
    teacher: nn.Module | None = None,
    teacher_name: str | None = None,
    teacher_cache: TeacherCache | None = None,
) -> RecoveryResult:
    """Check `config.r` against every layer's width, tokenize `documents` to the budget, train and merge.
    `teacher` (checked with `distill.check_teacher` by the caller): the dense model `config.loss` distills from;
    `teacher_cache`: its logits on disk (the size is said, and checked against free space, before training).

    `progress` gets every `RecoveryStep`; `log` the data lines (notes, origin, tokens);
    `should_stop` (a `threading.Event` or a callable) is polled between micro-batches and keeps
    the last whole step. The model is trained on a copy unless `inplace=True`. The adapter is
    kept on the result (for an adapter-only save). A diverged run comes back with status "nan".
    """
    say = log or (lambda message: None)
    if config.train == "lora":
        target_module_names(model, config)  # a bad r fails before tokenizing
    docs, info = load_documents(documents) if isinstance(documents, str) else documents
    say("tokenizing the training data")
    data = data_for(config, tokenizer, docs, info)
    for note in data.info.get("notes", []):
        say(f"NOTE: {note}")
    say(f"training data: {data.info['origin']} ({data.info['kind']}, {data.info['train_tokens']} tokens)")
    if teacher is not None:
        say(f"teacher: {teacher_name or 'the dense model'} (loss {config.loss}, temperature {config.temperature:g})")
    return recover(
        model,
        data,
        config,
        progress=progress,
        should_stop=should_stop,
        inplace=inplace,
        keep_adapter=config.train == "lora",
        teacher=teacher,
        teacher_name=teacher_name,
        teacher_cache=teacher_cache,
        log=log,
    )


def recover_and_save(
    model: nn.Module,
    tokenizer,
    plan,
    config: RecoveryConfig,
    documents: Documents,
    out: str | Path,
    *,
    base_report: dict | None = None,
    base_model: str | None = None,
    adapter: bool = False,
    progress: Callable[[RecoveryStep], None] | None = None,
    log: Log = None,
    should_stop: StopFlag = None,
    inplace: bool = False,
    teacher: nn.Module | None = None,
    teacher_name: str | None = None,
    teacher_cache: TeacherCache | None = None,
) -> dict:
    """`run_recovery`, then the folder `save_recovered` writes; returns `saved_summary`.

    A diverged run raises `TrainingDiverged` and a stopped one `InvalidInput`: nothing is saved.
    """
    result = run_recovery(
        model,
        tokenizer,
        config,
        documents,
        progress=progress,
        log=log,
        should_stop=should_stop,
        inplace=inplace,
        teacher=teacher,
        teacher_name=teacher_name,
        teacher_cache=teacher_cache,
    )
    if result.status == "nan":
        raise TrainingDiverged(result.message + " Nothing was saved.")
    save_recovered(result, tokenizer, plan, out, base_report=base_report, base_model=base_model, adapter=adapter)
    return saved_summary(result, out)


def brief_summary(result: RecoveryResult) -> dict:
    """What a run did, flat: status, steps, tokens, speed, times, held-out loss before and after, the
    data's origin, peak memory and threads (the app's run record; the CLI's JSON adds the data and folder)."""
    s = result.summary()
    return {k: s[k] for k in _BRIEF} | {
        "heldout_loss_before": s["heldout_before"],
        "heldout_loss_after": s["heldout_after"],
        "loss": s["config"]["loss"],
        "train": s["config"]["train"],
        "heldout_kl_before": s["heldout_kl_before"],
        "heldout_kl_after": s["heldout_kl_after"],
        "data": s["data"].get("origin"),
        "peak_rss_mb": s["peak_rss_mb"],
        "threads": s["threads"],
    }


def saved_summary(result: RecoveryResult, directory: str | Path) -> dict:
    """`brief_summary` with the data record and the folder: the `recover` command's JSON."""
    s = result.summary()
    cache = {"teacher_cache": s["teacher_cache"]} if s["teacher_cache"] else {}
    return (
        brief_summary(result)
        | {
            "data": {k: s["data"].get(k) for k in _DATA},
            "out": str(Path(directory).resolve()),
        }
        | cache
    )
