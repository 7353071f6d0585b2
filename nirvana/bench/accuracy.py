"""Accuracy benchmark: the paper's seven zero-shot tasks, LAMBADA and MBPP for dense and pruned models.

    python -m nirvana bench accuracy --model smollm2-135m [--limit 200] [--mbpp-limit 10]

Models: dense; nirvana, taylor, wanda (global and uniform allocation), magnitude and random at
sparsity 0.2 and 0.5 with the analytic gamma*; nirvana at its KL-best gamma per sparsity, read
from `benchmarks/gamma/gamma-<model>.json`. Pruned models are built with the library's steps:
`candidate_batch` (32 x 128 tokens of wikitext2-valid, seed 0, drawn away from the KL anchor, as
in the quality and gamma benchmarks) -> `compute_scores` -> `MethodChoice.slice` (allocate + slice).

Tasks run through `nirvana.accuracy.harness.run_accuracy` on the local data (`--source local`),
the first `--limit` examples of each. Rows (one per model x task) are written to
`benchmarks/accuracy/accuracy-<model>.csv` as they finish (`nirvana.bench.base`); a rerun skips rows
already present.
Order: dense, NIRVANA and loss-Taylor at 0.2 with all seven tasks each (their 7-task averages
first), then the other 0.2 models task by task (so a run cut short still compares every method on
the tasks it reached), then the 0.5 models, then LAMBADA, then MBPP (generation is the slowest), then
gold bits per byte (`mbpp_bpb` on `--bpb-limit` problems, `gsm8k_bpb` on `--gsm8k-bpb-limit`) of
dense, then NIRVANA and loss-Taylor (gamma*) sparsity by sparsity, one problem per forward batch; each
problem's value goes to `bpb-<model>.json` beside the CSV, so differences can be paired by problem.
The markdown report and plot (`nirvana.bench.accuracy_report`) are rebuilt after every row.
MBPP runs only with `--allow-code-execution` (or HF_ALLOW_CODE_EVAL=1), in the sandbox.
A CSV written before a column existed is rewritten once under the new header (its rows kept).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from nirvana.accuracy.harness import run_accuracy
from nirvana.accuracy.tasks import BPB_TASKS, ZEROSHOT7
from nirvana.bench.accuracy_report import write_report
from nirvana.bench.base import Benchmark, Measured
from nirvana.bench.environment import machine_label
from nirvana.bench.methods import METHOD_COLUMNS, NIRVANA, MethodChoice, settings_json
from nirvana.bench.per_problem import per_problem_text
from nirvana.bench.rows import read_rows, row_key
from nirvana.checkpoints.loading import load_model
from nirvana.errors import NirvanaError, OutOfMemory
from nirvana.models.shapes import count_parameters, model_shape
from nirvana.scoring.criteria import CRITERIA
from nirvana.search.calibration import AnchorSpec, anchor_batch, candidate_batch
from nirvana.store.paths import benchmarks_dir

DEFAULT_OUT = benchmarks_dir("accuracy")  # the checkout's benchmarks/accuracy; ./benchmarks/accuracy when installed
GAMMA_DIR = benchmarks_dir("gamma")
SPARSITIES = (0.2, 0.5)
COLUMNS = (
    "model",
    "variant",
    "criterion",
    "method",
    "method_settings",
    "allocation",
    "sparsity",
    "gamma",
    "task",
    "paper_metric",
    "acc",
    "acc_stderr",
    "acc_norm",
    "acc_norm_stderr",
    "perplexity",
    "pass_at_1",
    "pass_at_1_stderr",
    "bpb",
    "bpb_stderr",
    "n",
    "limit",
    "source",
    "split",
    "harness_version",
    "params_after",
    "achieved_block_sparsity",
    "batch_size",
    "generation_batch_size",  # a generating row's rows at once (its time depends on it, its completions do not)
    "seconds",
    "examples_per_s",
    "load_avg_1min",
    "finished_utc",
    "machine",
)
KEY = ("model", "variant", "task", "limit", *METHOD_COLUMNS)


@dataclass(frozen=True)
class Variant:
    criterion: str  # "dense" or a CRITERIA name
    allocation: str = "-"
    sparsity: float = 0.0
    gamma: float | None = None  # None: the analytic gamma*
    gamma_label: str = ""
    method: MethodChoice = NIRVANA  # a baseline: criterion is its name, allocation "method"

    @property
    def name(self) -> str:
        if self.criterion == "dense":
            return "dense"
        if not self.method.has_allocation_settings:  # its settings tell rows of two configurations apart
            defaults = self.method.settings == settings_json(self.method.method)
            return f"{self.method.method} s={self.sparsity:g}" + ("" if defaults else f" {self.method.settings}")
        if self.allocation == "uniform":  # the same share of every layer: gamma plays no part
            return f"{self.criterion} uniform s={self.sparsity:g}"
        return f"{self.criterion} s={self.sparsity:g} {self.gamma_label or 'gamma*'}"


@dataclass(frozen=True)
class AccuracyJob:
    """One row: a model variant on one task, the first `limit` examples."""

    model: str  # registry name, Hugging Face id or local folder
    variant: Variant
    task: str
    limit: int


@dataclass
class AccuracyConfig:
    model: str = "smollm2-135m"
    sparsities: tuple[float, ...] = SPARSITIES
    limit: int = 200
    lambada_limit: int = 200
    mbpp_limit: int = 10
    bpb_limit: int = 500  # mbpp_bpb problems (0: skip)
    gsm8k_bpb_limit: int = 500  # gsm8k_bpb problems (0: skip)
    batch_size: int = 8
    bpb_batch_size: int = 1  # one problem per forward: no padding, and on CPU no slower per token
    generation_batch_size: int | None = None  # rows generating at once in the MBPP rows (None: batch_size)
    allow_code_execution: bool = False
    out_dir: Path = DEFAULT_OUT
    note: str = ""
    best_gamma: dict = field(default_factory=dict)  # sparsity -> KL-best gamma of nirvana
    # The pruned models' method: NIRVANA's criteria grid, or one baseline at every sparsity (nirvana.bench.methods).
    method: str = "nirvana"
    method_settings: dict | None = None

    @property
    def csv_path(self) -> Path:
        return Path(self.out_dir) / f"accuracy-{self.model.replace('/', '_')}.csv"

    @property
    def per_problem_path(self) -> Path:
        return Path(self.out_dir) / f"bpb-{self.model.replace('/', '_')}.json"


def kl_best_gammas(model: str, criterion: str = "nirvana", gamma_dir: Path = GAMMA_DIR) -> dict[float, float]:
    """{sparsity: gamma with the lowest KL} from the committed gamma benchmark ({} when absent)."""
    path = Path(gamma_dir) / f"gamma-{model.replace('/', '_')}.json"
    try:
        points = json.loads(path.read_text())["criteria"][criterion]["points"]
    except (OSError, KeyError, ValueError):
        return {}
    best: dict[float, tuple[float, float]] = {}
    for p in points:
        s, kl = float(p["sparsity"]), float(p["kl"])
        if s not in best or kl < best[s][1]:
            best[s] = (float(p["gamma"]), kl)
    return {s: g for s, (g, _) in best.items()}


def variants_for(sparsity: float, best_gamma: dict) -> list[Variant]:
    out = [Variant(c, "global", sparsity) for c in ("nirvana", "taylor", "wanda")]
    out += [Variant("wanda", "uniform", sparsity)]
    out += [Variant(c, "global", sparsity) for c in ("magnitude", "random")]
    if sparsity in best_gamma:
        g = best_gamma[sparsity]
        out.append(Variant("nirvana", "global", sparsity, g, f"gamma={g:g} (KL-best)"))
    return out


def plan_jobs(config: AccuracyConfig) -> list[AccuracyJob]:
    """The rows in priority order (see the module docstring); a baseline method: dense and its models."""
    dense = Variant("dense")
    choice = MethodChoice.of(config.method, config.method_settings)
    if not choice.has_allocation_settings:
        return _method_jobs(
            config, [dense] + [Variant(choice.method, "method", s, method=choice) for s in config.sparsities]
        )
    blocks = [[dense, *variants_for(config.sparsities[0], config.best_gamma)]]
    blocks += [variants_for(s, config.best_gamma) for s in config.sparsities[1:]]
    # Dense, NIRVANA and loss-Taylor (the perplexity winner) at the first sparsity, all seven tasks each:
    # the 7-task averages that answer "does NIRVANA win?" come first; then every other model task by task.
    headline = blocks[0][:3]
    job = partial(AccuracyJob, config.model)
    jobs = [job(v, t, config.limit) for v in headline for t in ZEROSHOT7]
    for block in blocks:
        jobs += [job(v, t, config.limit) for t in ZEROSHOT7 for v in block if v not in headline]
    everyone = [v for block in blocks for v in block]
    if config.lambada_limit:
        jobs += [job(v, "lambada_openai", config.lambada_limit) for v in everyone]
    if config.mbpp_limit and config.allow_code_execution:
        jobs += [job(v, "mbpp", config.mbpp_limit) for v in everyone]
    # gold BPB: dense, then NIRVANA and loss-Taylor (gamma*) sparsity by sparsity, MBPP before GSM8K in each,
    # so a run cut short still has both tasks compared at the first sparsity
    gold = [(t, n) for t, n in (("mbpp_bpb", config.bpb_limit), ("gsm8k_bpb", config.gsm8k_bpb_limit)) if n]
    jobs += [job(dense, t, n) for t, n in gold]
    for s in config.sparsities:
        jobs += [job(Variant(c, "global", s), t, n) for t, n in gold for c in ("nirvana", "taylor")]
    return jobs


def _method_jobs(config: AccuracyConfig, models: list[Variant]) -> list[AccuracyJob]:
    """A baseline's grid: the seven tasks model by model, then LAMBADA, MBPP and the gold bits per byte."""
    job = partial(AccuracyJob, config.model)
    jobs = [job(v, t, config.limit) for v in models for t in ZEROSHOT7]
    if config.lambada_limit:
        jobs += [job(v, "lambada_openai", config.lambada_limit) for v in models]
    if config.mbpp_limit and config.allow_code_execution:
        jobs += [job(v, "mbpp", config.mbpp_limit) for v in models]
    gold = [(t, n) for t, n in (("mbpp_bpb", config.bpb_limit), ("gsm8k_bpb", config.gsm8k_bpb_limit)) if n]
    return jobs + [job(v, t, n) for v in models for t, n in gold]


def committed_accuracy(model: str, out_dir: Path = DEFAULT_OUT) -> list[dict] | None:
    """Rows of the committed accuracy benchmark of `model`, or None when there is none."""
    path = Path(out_dir) / f"accuracy-{model.replace('/', '_')}.csv"
    rows = read_rows(path)
    return rows or None


class AccuracyBench(Benchmark):
    """The grid on the shared runner (`nirvana.bench.base`); the report is rebuilt after every row."""

    name = "accuracy"
    columns, key_columns = COLUMNS, KEY
    # One row that cannot run (memory on a shared machine) must not end the grid.
    skip_errors = (NirvanaError,)
    report_each_row = True

    def jobs(self, config: AccuracyConfig) -> list[AccuracyJob]:
        return plan_jobs(config)

    def key(self, config: AccuracyConfig, job: AccuracyJob) -> tuple[str, ...]:
        cells = job.variant.method.cells() if job.variant.criterion != "dense" else {}
        return row_key(
            {"model": job.model, "variant": job.variant.name, "task": job.task, "limit": job.limit, **cells}, KEY
        )

    def label(self, job: AccuracyJob) -> str:
        return f"{job.variant.name} {job.task}"

    def worker(self, config: AccuracyConfig, log) -> AccuracyWorker:
        return AccuracyWorker(config, log)

    def report(self, rows: list[dict], config: AccuracyConfig):
        return write_report(rows, config)


ACCURACY = AccuracyBench()


class AccuracyWorker:
    """Loads the model once, scores each criterion once, and builds pruned models on demand."""

    def __init__(self, config: AccuracyConfig, log):

        self.config, self.log = config, log
        self.lm = load_model(config.model, dtype="float32")
        self.shape = model_shape(self.lm.model)
        self.anchor = anchor_batch(self.lm.tokenizer, AnchorSpec())
        self.machine = machine_label()
        self._scores: dict[tuple, object] = {}
        self._current: tuple[Variant, object, dict] | None = None
        choice = MethodChoice.of(config.method, config.method_settings)
        for s in config.sparsities:  # a baseline's refusals (layer range, biases, reachable target) come first
            choice.check(self.lm.model, s)

    def run(self, job: AccuracyJob) -> Measured:
        model, facts = self.model(job.variant)
        result = run_accuracy(
            model,
            self.lm.tokenizer,
            [job.task],
            limit=job.limit,
            batch_size=self.config.bpb_batch_size if job.task in BPB_TASKS else self.config.batch_size,
            generation_batch_size=self.config.generation_batch_size,
            source="local",
            allow_code_execution=self.config.allow_code_execution,
        )
        row = _row(self.config, job, result, facts, self.machine)
        files = {}
        if job.task in BPB_TASKS:  # each problem's value, beside the CSV, for differences paired by problem
            path = self.config.per_problem_path
            values = result["tasks"][job.task]["bpb_per_example"]
            files[path.name] = per_problem_text(path, job.variant.name, job.task, job.limit, values)
        metric = row["paper_metric"] or {"mbpp": "pass_at_1", "mbpp_bpb": "bpb", "gsm8k_bpb": "bpb"}.get(
            job.task, "acc"
        )
        message = (
            f"{job.variant.name} {job.task}: {metric} {row.get(metric)} (n={row['n']}, "
            f"{row['seconds']} s, {row['examples_per_s']} ex/s)"
        )
        return Measured(row, message, files)

    def scores(self, criterion: str, method: MethodChoice = NIRVANA):

        key = (criterion, method)
        if key not in self._scores:
            batch = None
            if not method.has_allocation_settings or CRITERIA[criterion].needs_data:
                batch = candidate_batch(
                    self.lm.tokenizer, self.anchor, source=AnchorSpec().source, samples=32, seq_len=128, seed=0
                )
            t = time.perf_counter()
            try:
                self._scores[key] = method.source(self.lm, method.scoring(criterion), batch)
            except OutOfMemory as exc:  # the machine is shared: micro-batches of 8 need ~1/4 of the memory
                self.log(f"{criterion} scores: {str(exc)[:80]}...; retrying with micro-batches of 8")
                self._scores[key] = method.source(self.lm, method.scoring(criterion, micro_batch=8), batch)
            self.log(f"{criterion} scores: {time.perf_counter() - t:.0f} s")
        return self._scores[key]

    def model(self, variant: Variant):
        """(model, facts) for `variant`; the last pruned model is kept for the next row."""

        if variant.criterion == "dense":
            return self.lm.model, {"params_after": count_parameters(self.lm.model), "achieved_block_sparsity": 0.0}
        if self._current is not None and self._current[0] == variant:
            return self._current[1], self._current[2]
        self._current = None
        scores = self.scores(variant.criterion, variant.method)
        allocation = {"gamma": variant.gamma, "allocation": variant.allocation}
        plan, pruned = variant.method.slice(self.lm.model, scores, variant.sparsity, self.shape, **allocation)
        gamma = variant.method.gamma_cell(plan)
        facts = {
            "gamma": gamma,
            "params_after": count_parameters(pruned),
            "achieved_block_sparsity": round(plan.stats["achieved_block_sparsity"], 4),
        }
        self._current = (variant, pruned, facts)
        return pruned, facts


def _row(config, job: AccuracyJob, result: dict, facts: dict, machine: str) -> dict:
    variant, task, limit = job.variant, job.task, job.limit
    r = result["tasks"][task]
    return {
        "model": job.model,
        "variant": variant.name,
        "criterion": variant.criterion,
        **(variant.method.cells() if variant.criterion != "dense" else {}),
        "allocation": variant.allocation,
        "sparsity": variant.sparsity,
        "gamma": facts.get("gamma", ""),
        "task": task,
        "paper_metric": r.get("paper_metric") or "",
        **{k: r.get(k) for k in ("acc", "acc_stderr", "acc_norm", "acc_norm_stderr", "perplexity")},
        "pass_at_1": r.get("pass@1"),
        "pass_at_1_stderr": r.get("pass@1_stderr"),
        "bpb": r.get("bpb"),
        "bpb_stderr": r.get("bpb_stderr"),
        "n": r.get("n"),
        "limit": limit,
        "source": r.get("data"),
        "split": r.get("split"),
        "harness_version": r.get("harness_version"),
        "params_after": facts.get("params_after"),
        "achieved_block_sparsity": facts.get("achieved_block_sparsity"),
        "batch_size": config.bpb_batch_size if task in BPB_TASKS else config.batch_size,
        "generation_batch_size": r.get("generation_batch_size", ""),
        "seconds": r.get("seconds"),
        "examples_per_s": r.get("examples_per_s"),
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "finished_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine,
    }
