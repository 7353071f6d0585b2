"""Zero-shot tasks through lm-evaluation-harness, on the model already in memory.

`run_tasks` wraps the model as `HFLM(pretrained=model, tokenizer=tok)` and calls the harness's
`simple_evaluate`; task names are the harness's own (`arc_easy`, `hellaswag`, ...). Local task
YAMLs are found through `include_path`. The result records the harness version and both
accuracies: `acc` picks the choice with the highest summed log-likelihood, `acc_norm` divides
that log-likelihood by the choice's length in characters first (the harness's definition). The paper
reports acc for some tasks and acc_norm for others, so both are kept.

Results are cached on disk by model fingerprint + task names + settings + harness version.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import os
import time
from functools import lru_cache
from pathlib import Path

from nirvana.errors import DatasetNotFound, InvalidInput
from nirvana.progress import Progress
from nirvana.store.evalcache import eval_cache_path, load_cached, save_cached
from nirvana.store.fingerprint import model_fingerprint

PAPER_TASKS = ("arc_easy", "arc_challenge", "winogrande", "hellaswag", "piqa", "boolq", "openbookqa")


def harness_version() -> str:
    """Installed lm-eval version, or raise InvalidInput saying how to install it."""
    try:
        return importlib.metadata.version("lm_eval")
    except importlib.metadata.PackageNotFoundError as exc:
        raise InvalidInput("zero-shot tasks need lm-evaluation-harness: pip install lm-eval==0.4.13.") from exc


def _task_manager(include_path):
    paths = [
        str(Path(p).resolve())
        for p in ([include_path] if isinstance(include_path, (str, Path)) else include_path or [])
    ]
    for p in paths:
        if not Path(p).exists():
            raise InvalidInput(f"task include path {p!r} does not exist; pass a folder of lm-eval task YAMLs.")
    return _cached_manager(tuple(paths))


@lru_cache(maxsize=4)
def _cached_manager(paths: tuple[str, ...]):
    """Indexing the harness's thousands of task YAMLs takes seconds: do it once per process and path set."""
    # here, not at the top: lm-eval is optional (zero-shot tasks only) and slow to import
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=list(paths) or None, verbosity="ERROR")


def _check_names(manager, tasks: list[str]) -> None:
    known = set(manager.all_tasks)
    unknown = [t for t in tasks if t not in known]
    if unknown:
        hints = {t: difflib.get_close_matches(t, known, n=3) for t in unknown}
        said = "; ".join(f"{t!r} (did you mean {', '.join(h)}?)" if h else repr(t) for t, h in hints.items())
        raise InvalidInput(
            f"unknown lm-eval task(s): {said}. Use names as the harness spells them, e.g. {', '.join(PAPER_TASKS)}, "
            "or pass include_path with your own task YAML."
        )


def _metrics(raw: dict) -> dict:
    """{acc, acc_stderr, acc_norm, acc_norm_stderr, ...} from one task's harness result ('acc,none' keys)."""
    out = {}
    for key, value in raw.items():
        if "," not in key or not isinstance(value, (int, float)):
            continue
        metric, filt = key.split(",", 1)
        out[metric if filt == "none" else f"{metric}[{filt}]"] = float(value)
    return out


def run_tasks(
    model,
    tokenizer,
    tasks,
    *,
    limit: int | float | None = None,
    num_fewshot: int | None = None,
    batch_size: int = 1,
    include_path=None,
    use_cache: bool = True,
    progress: Progress = None,
) -> dict:
    """Accuracies of `model` on harness tasks: {harness_version, tasks: {name: {acc, acc_norm, ...}}, ...}.

    `limit` caps the documents per task (for quick runs; then the figure is not comparable with the
    paper's). Example:
        >>> r = run_tasks(lm.model, lm.tokenizer, ["arc_easy"], limit=100)
        >>> r["tasks"]["arc_easy"]["acc"], r["harness_version"]
    """
    tasks = [t.strip() for t in ([tasks] if isinstance(tasks, str) else list(tasks)) for t in t.split(",")]
    tasks = [t for t in tasks if t]
    if not tasks:
        raise InvalidInput(f"no task given; use lm-eval task names such as {', '.join(PAPER_TASKS)}.")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInput(f"batch_size must be a positive integer, got {batch_size!r}.")
    version = harness_version()
    fingerprint = model_fingerprint(model)
    path = eval_cache_path("tasks", fingerprint, sorted(tasks), limit, num_fewshot, version, str(include_path))
    cached = load_cached(path) if use_cache else None
    if cached is not None:
        cached["cache_hit"] = True
        return cached
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # here, not at the top: lm-eval is optional (zero-shot tasks only) and slow to import
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    manager = _task_manager(include_path)
    _check_names(manager, tasks)
    if progress:
        progress(0.0, f"lm-eval {version}: {', '.join(tasks)}")
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
    start = time.perf_counter()
    was_training = model.training
    model.eval()
    try:
        out = simple_evaluate(
            model=lm,
            tasks=tasks,
            num_fewshot=num_fewshot,
            limit=limit,
            task_manager=manager,
            log_samples=False,
            bootstrap_iters=1000,
        )
    except (ConnectionError, FileNotFoundError) as exc:
        raise DatasetNotFound(
            f"lm-eval could not load the data of {', '.join(tasks)} ({type(exc).__name__}: {exc}). "
            "The standard tasks download from the Hugging Face hub; connect to it, or use a local task YAML."
        ) from exc
    except Exception as exc:
        if "offline" in str(exc).lower() or "hub" in str(exc).lower() or "couldn't" in str(exc).lower():
            raise DatasetNotFound(
                f"lm-eval could not load the data of {', '.join(tasks)}: {str(exc).splitlines()[0][:200]}. "
                "The standard tasks download from the Hugging Face hub; connect to it, or use a local task YAML."
            ) from exc
        raise
    finally:
        model.train(was_training)
    results = {}
    for name in tasks:
        metrics = _metrics(out["results"].get(name, {}))
        n = out.get("n-samples", {}).get(name, {})
        results[name] = {**metrics, "samples": n.get("effective"), "samples_total": n.get("original")}
    result = {
        "harness": "lm-evaluation-harness",
        "harness_version": version,
        "tasks": results,
        "limit": limit,
        "num_fewshot": num_fewshot,
        "metrics_note": "acc: argmax of summed log-likelihood; acc_norm: log-likelihood divided by the choice's length "
        "in characters (harness definition). The paper mixes both; compare like with like.",
        "seconds": round(time.perf_counter() - start, 3),
        "fingerprint": fingerprint,
        "cache_hit": False,
    }
    if use_cache:
        save_cached(path, result)
    if progress:
        progress(1.0, "tasks done")
    return result
