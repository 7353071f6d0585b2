"""The Accuracy tab's logic: time estimates, memoised dense/pruned runs, the comparison charts (their
tables are the library's `nirvana.measure.compare.accuracy_rows` and `bpb_rows`).

Runs `nirvana.accuracy.harness.run_accuracy` (lm-eval's own tasks; local files offline) on the
dense and the pruned model. Accuracy-like tasks (%, higher is better) and gold bits per byte
(bits/byte, lower is better, differences paired by problem) get separate charts and tables.
Estimates come from the examples per second the committed benchmarks measured for the loaded model
(`benchmarks/accuracy/` and `benchmarks/baselines/`, dense rows, per task); a task or model they lack is
guessed from the benchmarked model nearest in parameter count, scaled by parameters, and the caption says
so. Code and chain-of-thought tasks generate as many rows at once as the model's committed step-cost
benchmark (`benchmarks/generation/step-cost-<model>.md`) found cheapest per row.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import plotly.graph_objects as go

from nirvana import charts
from nirvana.accuracy import sandbox
from nirvana.accuracy.harness import run_accuracy
from nirvana.accuracy.sandbox import ISOLATED, isolation
from nirvana.accuracy.tasks import PAPER_METRIC, TASKS, ZEROSHOT7, resolve_tasks
from nirvana.bench.accuracy_report import summarize
from nirvana.bench.rows import number, read_rows
from nirvana.measure.compare import paper_value
from nirvana.store.keys import content_key
from nirvana.store.paths import benchmarks_dir
from ui.resources import hold_device, memo

BENCH_DIR = benchmarks_dir("accuracy")  # the committed accuracy benchmark
BASELINES_DIR = benchmarks_dir("baselines")  # the committed baselines benchmark (its dense rows time each task)
GENERATION_DIR = benchmarks_dir("generation")  # the committed step-cost benchmark
FALLBACK_ROWS_PER_S = 1.5  # forward rows per second when no benchmark was measured (2-core CPU, SmolLM2)
CACHE_READ_S = 1.0  # a benchmark row done faster read its result from the eval cache: it times nothing
DEFAULT_GENERATION_ROWS = 8  # run_accuracy's default, for a model without a step-cost benchmark
MAX_GENERATION_ROWS = 32  # the KV cache of 32 long HumanEval rows of the 1.5B model is ~2 GB in fp32
CHOICES = [*ZEROSHOT7, "lambada_openai", "mbpp", "humaneval", "gsm8k", "mbpp_bpb", "humaneval_bpb", "gsm8k_bpb"]


def _file_stem(model_name: str) -> str:
    return model_name.replace("/", "_")


def measured_rates(
    model_name: str = "smollm2-135m", bench_dir: Path = BENCH_DIR, baselines_dir: Path = BASELINES_DIR
) -> dict[str, float]:
    """{task: median examples/s of the dense model's rows} in the committed accuracy and baselines benchmarks;
    {} when neither measured `model_name`. A baselines row's rate is its examples this run made (less the
    completions it resumed from a journal) over its seconds; rows done in under `CACHE_READ_S` were cache reads."""
    rates: dict[str, list[float]] = {}
    stem = _file_stem(model_name)
    for path, task_column in (
        (Path(bench_dir) / f"accuracy-{stem}.csv", "task"),
        (Path(baselines_dir) / f"baselines-{stem}.csv", "measure"),
    ):
        for row in _dense_rows(path):
            examples = (number(row.get("n")) or 0) - (number(row.get("resumed_completions")) or 0)
            seconds = number(row.get("seconds")) or 0
            if row.get(task_column) in TASKS and examples > 0 and seconds >= CACHE_READ_S:
                rates.setdefault(row[task_column], []).append(examples / seconds)
    return {t: statistics.median(v) for t, v in rates.items()}


def _dense_rows(path: Path) -> list[dict]:
    return [row for row in read_rows(path) if row.get("variant") == "dense"]


def benchmarked_params(baselines_dir: Path = BASELINES_DIR) -> dict[str, int]:
    """{model name: parameters of its dense model} for every model the baselines benchmark measured."""
    out = {}
    for path in sorted(Path(baselines_dir).glob("baselines-*.csv")):
        params = next((number(r.get("params_before")) for r in _dense_rows(path) if r.get("params_before")), None)
        if params:
            out[path.stem.removeprefix("baselines-")] = int(params)
    return out


def estimate_rates(
    model_name: str, params: int, bench_dir: Path = BENCH_DIR, baselines_dir: Path = BASELINES_DIR
) -> tuple[dict[str, float], str]:
    """({task: examples/s}, where they come from) for the time estimate of `model_name` (`params` parameters).

    The model's own measured rates; tasks (or a model) the benchmarks lack take the rates of the benchmarked model
    nearest in parameter count, scaled by the ratio of parameters (a rough guess, and the text says so)."""
    own = measured_rates(model_name, bench_dir, baselines_dir)
    others = {m: p for m, p in benchmarked_params(baselines_dir).items() if m != model_name}
    near = min(others, key=lambda m: abs(math.log(others[m] / params)), default=None) if params > 0 else None
    guessed = {}
    if near is not None:
        scale = others[near] / params
        guessed = {t: r * scale for t, r in measured_rates(near, bench_dir, baselines_dir).items() if t not in own}
    where = "the committed CPU benchmarks (2-core machine)"
    if own and not guessed:
        return own, f"from the examples/s {where} measured for {model_name}"
    if guessed:
        size = f"{others[near] / 1e6:,.0f}M → {params / 1e6:,.0f}M parameters"
        scaled = f"{near}'s examples/s scaled by parameter count ({size}), a rough guess"
        if own:
            return {**guessed, **own}, (
                f"from the examples/s {where} measured for {model_name}; for tasks they did not time, {scaled}"
            )
        return guessed, f"no benchmark of this model: {scaled}"
    return own, "no benchmark to go by: a conservative guess per forward row"


def generation_rows(model_name: str, generation_dir: Path = GENERATION_DIR) -> tuple[int, str]:
    """(rows generating at once in code and chain-of-thought tasks, why) for `model_name`: the row count with the
    lowest seconds per row (at most `MAX_GENERATION_ROWS`) in the latest machine's run of its committed step-cost
    benchmark; `DEFAULT_GENERATION_ROWS` without one. The completions do not depend on it, only the time."""
    path = Path(generation_dir) / f"step-cost-{_file_stem(model_name)}.jsonl"
    records = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    records = [
        r for r in records if number(r.get("seconds_per_row")) and 0 < int(r.get("rows", 0)) <= MAX_GENERATION_ROWS
    ]
    if not records:
        return DEFAULT_GENERATION_ROWS, "the default: no step-cost benchmark of this model"
    machine = records[-1].get("machine")
    best = min((r for r in records if r.get("machine") == machine), key=lambda r: float(r["seconds_per_row"]))
    return int(best["rows"]), (
        f"the cheapest per row ({float(best['seconds_per_row']):.3f} s) in "
        f"benchmarks/generation/{path.name.removesuffix('.jsonl')}.md ({machine})"
    )


def estimate_eval_seconds(tasks: list[str], limit: int, rates: dict[str, float], models: int = 2) -> float:
    """Seconds for `models` models (dense + pruned) on `tasks` at `limit` examples each."""
    total = 0.0
    for t in resolve_tasks(tasks):
        rate = rates.get(t) or FALLBACK_ROWS_PER_S / TASKS[t].requests_per_doc
        total += limit / rate
    return total * models


def is_code(task: str) -> bool:
    """Whether the task runs the model's generated code (MBPP, HumanEval): only behind the opt-in."""
    return TASKS[task].kind == "code"


def generates(task: str) -> bool:
    """Whether the task generates text (code, chain of thought): its time depends on the rows at once."""
    return TASKS[task].kind in ("code", "generate")


def code_notice(allow_unsandboxed: bool = False) -> str:
    """What MBPP and HumanEval will execute, and how (shown next to the opt-in): the isolation that is active."""
    iso = isolation(allow_unsandboxed)
    lim = iso["limits"]
    how = (
        "Each program runs in two bubblewrap sandboxes (the generated code in one, the tests in the other): "
        "own user, pid and network namespaces, never root on the host, read-only system files and no installed "
        "packages, one private size-capped /tmp as the only writable place, no new processes or sockets"
        if iso["isolation"] == ISOLATED
        else f"**No OS isolation is available here** ({iso['reason']}): generated code does not run unless you "
        "tick 'run without a sandbox' below, and then it runs as plain processes of the app's user (of an "
        "unprivileged sandbox uid when the app runs as root)"
    )
    return (
        "MBPP and HumanEval score the model's generated Python by running it against each problem's tests "
        "(MBPP's three `assert`s, HumanEval's `check` function). "
        f"{how}; limits: {lim['timeout_s']:g} s wall clock, {lim['cpu_s']} s CPU, {lim['memory_mb']} MB memory, "
        f"{lim['file_mb']} MB files. Nothing runs inside the app process. `{iso['line']}`"
    )


def sandbox_available() -> bool:
    """Whether generated code gets OS isolation here (else the app asks for an explicit, labelled risk)."""
    return sandbox.probe().active


def run(
    model,
    tokenizer,
    model_key: str,
    tasks: list[str],
    limit: int,
    allow_code: bool,
    progress=None,
    allow_unsandboxed: bool = False,
    generation_rows: int | None = None,
) -> dict:
    """`run_accuracy` memoised by model key and settings (the library also caches on disk). `generation_rows`
    changes only the time, so it is not in the key."""
    key = content_key("accuracy", model_key, sorted(tasks), limit, allow_code, allow_unsandboxed)

    def compute():
        with hold_device(model, progress):
            return run_accuracy(
                model,
                tokenizer,
                tasks,
                limit=limit,
                allow_code_execution=allow_code,
                allow_unsandboxed=allow_unsandboxed,
                progress=progress,
                generation_batch_size=generation_rows,
            )

    return memo("accuracy").get_or_compute(key, compute)


def _is_bpb(task: str) -> bool:
    return TASKS[task].kind == "bpb"


def chart(dense: dict, pruned: dict) -> go.Figure:
    """Grouped bars, dense vs pruned, per task (its paper metric) and the 7-task average, ± 1 standard error."""
    fig = go.Figure()
    for label, result, color in (("dense", dense, "#4c78a8"), ("pruned", pruned, "#f58518")):
        xs, ys, es = [], [], []
        for task, row in result["tasks"].items():
            v, se, metric = paper_value(row, task)
            if v is not None and not _is_bpb(task):
                xs.append(f"{task}<br>({metric})")
                ys.append(100 * v)
                es.append(100 * (se or 0))
        if result.get("average"):
            xs.append("7-task average")
            ys.append(100 * result["average"]["value"])
            es.append(100 * (result["average"]["stderr"] or 0))
        fig.add_bar(x=xs, y=ys, name=label, marker_color=color, error_y={"type": "data", "array": es})
    return _grouped(fig, "Dense vs pruned accuracy (paper's metric per task, ± 1 s.e.)", "accuracy (%)", 440)


def bpb_chart(dense: dict, pruned: dict) -> go.Figure:
    """Grouped bars, dense vs pruned gold bits per byte per task, ± 1 standard error (lower is better)."""
    fig = go.Figure()
    for label, result, color in (("dense", dense, "#4c78a8"), ("pruned", pruned, "#f58518")):
        tasks = [t for t, row in result["tasks"].items() if _is_bpb(t) and row.get("bpb") is not None]
        fig.add_bar(
            x=tasks,
            y=[result["tasks"][t]["bpb"] for t in tasks],
            error_y={"type": "data", "array": [result["tasks"][t].get("bpb_stderr") or 0 for t in tasks]},
            name=label,
            marker_color=color,
        )
    return _grouped(
        fig,
        "Gold-answer bits per byte, dense vs pruned (lower is better, ± 1 s.e.)",
        "bits per byte of the reference answer",
        380,
    )


def _grouped(fig: go.Figure, title: str, yaxis_title: str, height: int) -> go.Figure:
    """The accuracy bar charts' shared layout: grouped bars, the legend where every chart has it (`charts.LEGEND`:
    at the right, below the title; above the plot it sat on the title)."""
    fig.update_layout(
        title={"text": title, "x": 0.01},
        barmode="group",
        yaxis_title=yaxis_title,
        height=height,
        margin={"t": 50, "b": 10},
        legend=charts.LEGEND,
    )
    return fig


def has_bpb(result: dict) -> bool:
    return any(_is_bpb(t) for t in result["tasks"])


def has_accuracy(result: dict) -> bool:
    return any(not _is_bpb(t) for t in result["tasks"])


def evidence_table(rows: list[dict]) -> list[dict]:
    """The committed benchmark, one row per model variant: paper metric per task, 7-task average, Δ vs dense."""
    summary = summarize(rows)
    dense = next((v for v in summary if v["variant"] == "dense"), {})
    out = []
    for v in summary:
        row = {"model": v["variant"]}
        for t in ZEROSHOT7:
            value = v["tasks"].get(t, (None, None, 0))
            row[t] = None if value[0] is None else round(100 * value[0], 1)
        avg = v.get("average")
        row["7-task avg %"] = None if avg is None else round(100 * avg, 1)
        row["± avg"] = None if v.get("average_se") is None else round(100 * v["average_se"], 1)
        base = dense.get("average")
        row["Δ vs dense"] = None if avg is None or base is None or v is dense else round(100 * (avg - base), 1)
        if "lambada" in v:
            row["LAMBADA acc %"] = None if v["lambada"][0] is None else round(100 * v["lambada"][0], 1)
        if "mbpp" in v:
            row["MBPP pass@1 %"] = None if v["mbpp"][0] is None else round(100 * v["mbpp"][0], 1)
        for task, (value, *_rest) in v.get("bpb", {}).items():  # lower is better
            row[f"{task} (bits/byte, lower is better)"] = None if value is None else round(value, 4)
        out.append(row)
    return out


def evidence_chart(rows: list[dict]) -> go.Figure:
    """Per task, every model variant's paper metric ± 1 standard error (grouped bars).

    Criterion by colour (a shade of its own per variant: no colour repeats) and sparsity by bar pattern,
    so 15 variants stay apart (`charts.series_styles`)."""
    fig = go.Figure()
    variants = summarize(rows)
    family = [(v["criterion"] or v["variant"], v["sparsity"]) for v in variants]
    colors = {**charts.CRITERION_COLORS, "dense": "#333333"}
    for v, style in zip(variants, charts.series_styles(family, colors)):
        tasks = [t for t in ZEROSHOT7 if t in v["tasks"] and v["tasks"][t][0] is not None]
        fig.add_bar(
            x=[f"{t} ({PAPER_METRIC[t]})" for t in tasks],
            y=[100 * v["tasks"][t][0] for t in tasks],
            error_y={"type": "data", "array": [100 * (v["tasks"][t][1] or 0) for t in tasks]},
            name=v["variant"],
            marker={"color": style["color"], "pattern": {"shape": style["pattern"]}},
        )
    return _grouped(fig, "Zero-shot accuracy per task, every model (paper's metric, ± 1 s.e.)", "accuracy (%)", 460)
