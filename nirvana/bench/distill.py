"""Distillation benchmark: which recovery gives back the most per training token?

    python -m nirvana bench distill --model smollm2-135m [--budgets 8192,16384,32768,65536] [--threads 1]

Pruned models (`ROWS`): NIRVANA, loss-Taylor (global) and Wanda-style (uniform) at 20%, NIRVANA at
50%, each pruned as `prune` does (32 x 128 WikiText-2 validation tokens, seed 0, gamma*, align 8).
Recipes (`RECIPES`), all from the same seeded training windows of the calibration pool, at every
training-token budget of `budgets` (the windows of a smaller budget are a prefix of a larger one's):
    lm-lora   next-token loss, LoRA (the recovery benchmark's reference recipe);
    kd-lora   KL to the dense model (`recover --loss kd`, temperature 1), LoRA, the same settings;
    kd-full   KL to the dense model, every decoder-layer weight trained (`--train full`), lr `full_lr`.
One CSV row per (pruned model, recipe, budget), measuring before (once per pruned model) and after:
WikiText-2 test and PTB validation perplexity on their first `tokens` tokens (512-token windows),
KL to the dense model on the training data's held-out windows (nats per token), and the seven-task
average (`acc_limit` examples per task; 0: none), with the training speed and peak RSS. A pruned model
already in the CSV (the same pruning, measured with the same texts, token budget and accuracy limit,
and the same achieved sparsity) takes its "before" figures from there instead of measuring them again
(about 10 minutes at one thread, on a machine whose evaluation cache is empty). Order: every
pruned model and recipe at the smallest budget first, so a run cut short is a comparison at equal
tokens. Resumable (`nirvana.bench.base`); the markdown and the plot (perplexity against tokens, one
panel per pruned model, one line per recipe) are rebuilt after every row.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from nirvana.bench.base import Benchmark, Measured
from nirvana.bench.distill_report import write_report
from nirvana.bench.environment import machine_label
from nirvana.bench.quality import evaluate_ppl, text_prefix
from nirvana.bench.recovery import acc7
from nirvana.bench.rows import read_rows, row_key
from nirvana.checkpoints.loading import load_model
from nirvana.data.text import load_text
from nirvana.errors import InvalidInput
from nirvana.measure.kl import DenseReference, kl_to_dense
from nirvana.pipeline import PruneSettings, prune
from nirvana.recovery.config import RecoveryConfig
from nirvana.recovery.data import data_for, load_documents
from nirvana.recovery.distill import check_teacher
from nirvana.recovery.teacher_cache import TeacherCache
from nirvana.recovery.train import recover
from nirvana.store.paths import benchmarks_dir

DEFAULT_OUT = benchmarks_dir("distill")
ROWS = (("nirvana", "global", 0.2), ("taylor", "global", 0.2), ("wanda", "uniform", 0.2), ("nirvana", "global", 0.5))
RECIPES = {"lm-lora": ("lm", "lora"), "kd-lora": ("kd", "lora"), "kd-full": ("kd", "full")}
BUDGETS = (8192, 16384, 32768, 65536)  # training tokens: 4 to 32 steps of 16 x 128
DATASETS = ("wikitext2", "ptb")
COLUMNS = (
    "model",
    "criterion",
    "allocation",
    "sparsity",
    "recipe",
    "loss",
    "train",
    "budget",
    "lr",
    "temperature",
    "seed",
    "data",
    "tokens",
    "achieved_block_sparsity",
    "ppl_wikitext2_before",
    "ppl_wikitext2_after",
    "ppl_ptb_before",
    "ppl_ptb_after",
    "kl_before",
    "kl_after",
    "acc7_before",
    "acc7_after",
    "acc7_before_stderr",
    "acc7_after_stderr",
    "acc_limit",
    "tokens_trained",
    "tokens_per_s",
    "teacher_logits",
    "train_seconds",
    "peak_rss_mb",
    "seconds",
    "finished_utc",
    "machine",
    "load_avg",
)
KEY = ("model", "criterion", "allocation", "sparsity", "recipe", "budget", "lr", "temperature", "seed", "data")
# What decides a pruned model's "before" figures: a row that matches on these measured the same model the same way.
BEFORE_KEY = ("model", "criterion", "allocation", "sparsity", "seed", "data", "tokens", "acc_limit")
MEASURES = ("ppl_wikitext2", "ppl_ptb", "kl", "acc7", "acc7_stderr")


def column(measure: str, when: str) -> str:
    """A measure's CSV column before or after recovery: `kl` -> `kl_after`, `acc7_stderr` -> `acc7_after_stderr`."""
    base, stderr = measure.removesuffix("_stderr"), measure.endswith("_stderr")
    return f"{base}_{when}" + ("_stderr" if stderr else "")


@dataclass(frozen=True)
class DistillJob:
    criterion: str
    allocation: str
    sparsity: float
    recipe: str
    budget: int


@dataclass
class DistillConfig:
    model: str = "smollm2-135m"
    rows: tuple[tuple[str, str, float], ...] = ROWS
    recipes: tuple[str, ...] = tuple(RECIPES)
    budgets: tuple[int, ...] = BUDGETS
    data: str = "calibration"
    seed: int = 0
    lr: float = 1e-4  # LoRA (the reference recipe)
    full_lr: float = 2e-5  # full fine-tuning moves every weight: a smaller step than the adapters'
    temperature: float = 1.0
    tokens: int = 16384  # perplexity tokens per dataset
    window: int = 512
    kl_sequences: int = 8  # held-out windows of the training data for KL to dense
    acc_limit: int = 200  # examples per zero-shot task (0: no accuracy)
    acc_batch_size: int = 8
    threads: int | None = None
    out_dir: Path = DEFAULT_OUT
    note: str = ""
    recovery: dict = field(default_factory=dict)  # RecoveryConfig overrides (batch, seq_len, r, ...)
    # A folder for the dense teacher's logits (fp32, exact: the figures do not change): every distillation row of
    # a budget trains on the same windows, so after the first the teacher's forward is read, not run.
    teacher_cache: str = ""

    def __post_init__(self) -> None:
        unknown = [r for r in self.recipes if r not in RECIPES]
        if unknown:
            raise InvalidInput(f"unknown recipe {unknown[0]!r}; accepted: {', '.join(RECIPES)}.")
        if not self.budgets or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in self.budgets):
            raise InvalidInput(f"--budgets must be positive numbers of training tokens, got {list(self.budgets)}.")

    @property
    def csv_path(self) -> Path:
        return Path(self.out_dir) / f"distill-{self.model.replace('/', '_')}.csv"

    def recovery_config(self, recipe: str, budget: int) -> RecoveryConfig:
        loss, train = RECIPES[recipe]
        lr = self.full_lr if train == "full" else self.lr
        settings = {"eval_every": 0, **self.recovery}
        return RecoveryConfig(
            tokens=budget, seed=self.seed, lr=lr, loss=loss, train=train, temperature=self.temperature, **settings
        )

    def key(self, job: DistillJob) -> dict:
        return {
            "model": self.model,
            "criterion": job.criterion,
            "allocation": job.allocation,
            "sparsity": job.sparsity,
            "recipe": job.recipe,
            "budget": job.budget,
            "lr": self.recovery_config(job.recipe, job.budget).lr,
            "temperature": self.temperature,
            "seed": self.seed,
            "data": self.data,
        }


def plan_jobs(config: DistillConfig) -> list[DistillJob]:
    """Every pruned model and recipe at the smallest budget first, then the next budget."""
    return [
        DistillJob(c, a, s, recipe, budget)
        for budget in sorted(config.budgets)
        for c, a, s in config.rows
        for recipe in config.recipes
    ]


class DistillBench(Benchmark):
    name = "distill"
    columns, key_columns = COLUMNS, KEY
    report_each_row = True

    def jobs(self, config: DistillConfig) -> list[DistillJob]:
        return plan_jobs(config)

    def key(self, config: DistillConfig, job: DistillJob) -> tuple[str, ...]:
        return row_key(config.key(job), KEY)

    def label(self, job: DistillJob) -> str:
        return f"{job.criterion} {job.sparsity:g} {job.recipe} {job.budget}"

    def worker(self, config: DistillConfig, log) -> DistillWorker:
        return DistillWorker(config, log)

    def report(self, rows: list[dict], config: DistillConfig) -> Path:
        return write_report(rows, config)


DISTILL = DistillBench()


def teacher_logits(cache: dict | None) -> str:
    """How a distillation row got its teacher's logits: "computed", or from the cache ("read 70 of 70")."""
    if not cache:
        return "computed"
    return f"read {cache['hits']} of {cache['hits'] + cache['misses']}"


class DistillWorker:
    """The dense model (also the teacher), texts, training windows and the KL reference every row shares."""

    def __init__(self, config: DistillConfig, log):
        if config.threads:
            torch.set_num_threads(config.threads)
        self.config, self.log = config, log
        self.lm = lm = load_model(config.model, dtype="float32", device="cpu")
        self.texts = {n: text_prefix(load_text(n), lm.tokenizer, config.tokens) for n in DATASETS}
        largest = config.recovery_config(config.recipes[0], max(config.budgets))
        docs, info = load_documents(config.data)
        self.data = data_for(largest, lm.tokenizer, docs, info)  # every budget cycles through these windows
        self.reference = DenseReference(lm.model, self.data.heldout[: config.kl_sequences])
        self.machine = machine_label()
        self.pruned: dict[tuple, tuple] = {}  # (criterion, allocation, sparsity) -> (model, plan, before)
        self.cache = TeacherCache(config.teacher_cache, lm.model) if config.teacher_cache else None

    def measure(self, model) -> dict:
        c, tok = self.config, self.lm.tokenizer
        out = {f"ppl_{n}": round(evaluate_ppl(model, tok, self.texts[n], c.tokens, c.window)[0], 3) for n in DATASETS}
        out["kl"] = round(kl_to_dense(model, self.reference), 5)
        if c.acc_limit:
            out["acc7"], out["acc7_stderr"] = acc7(model, tok, c, self.log, "acc7")
        return out

    def pruned_model(self, job: DistillJob):
        key = (job.criterion, job.allocation, job.sparsity)
        if key not in self.pruned:
            settings = PruneSettings(sparsity=job.sparsity, criterion=job.criterion, allocation=job.allocation)
            result = prune(self.lm, settings)  # a sliced copy; the dense model is every row's teacher
            check_teacher(self.lm.model, result.model, result.plan)
            before = self.recorded_before(job, result.plan) or self.measure(result.model)
            self.pruned = {key: (result.model, result.plan, before)}  # one pruned model kept
        return self.pruned[key]

    def recorded_before(self, job: DistillJob, plan) -> dict | None:
        """The "before" figures of this pruned model from a row already in the CSV, or None."""
        c = self.config
        want = {**c.key(job), "tokens": c.tokens, "acc_limit": c.acc_limit or ""}
        sparsity = round(plan.stats["achieved_block_sparsity"], 4)
        names = [m for m in MEASURES if c.acc_limit or not m.startswith("acc7")]
        for row in read_rows(c.csv_path):
            same = row_key(row, BEFORE_KEY) == row_key(want, BEFORE_KEY)
            if not same or float(row["achieved_block_sparsity"]) != sparsity:
                continue
            try:
                before = {m: float(row[column(m, "before")]) for m in names}
            except (KeyError, TypeError, ValueError):  # a row without them: measure
                continue
            self.log(f"  {DISTILL.label(job)}: before from the row of {row['recipe']} {row['budget']} in {c.csv_path}")
            return before
        return None

    def run(self, job: DistillJob) -> Measured:
        c, t0 = self.config, time.perf_counter()
        model, plan, before = self.pruned_model(job)
        rc = c.recovery_config(job.recipe, job.budget)
        label = DISTILL.label(job)
        result = recover(
            model,
            self.data,
            rc,
            teacher=self.lm.model if rc.loss != "lm" else None,
            teacher_name=c.model,
            progress=lambda s: self.log(f"  {label}: {s.message}"),
            teacher_cache=self.cache if rc.loss != "lm" else None,
        )
        if not result.complete:
            return Measured(None, f"{label}: {result.message}; row not written")
        after = self.measure(result.model)
        row = {**c.key(job), "loss": rc.loss, "train": rc.train, "tokens": c.tokens, "machine": self.machine}
        row["achieved_block_sparsity"] = round(plan.stats["achieved_block_sparsity"], 4)
        for when, measured in (("before", before), ("after", after)):
            row.update({column(name, when): value for name, value in measured.items()})
        s = result.summary()
        row.update(
            acc_limit=c.acc_limit or "",
            tokens_trained=s["tokens_trained"],
            tokens_per_s=s["tokens_per_second"],
            teacher_logits=teacher_logits(s["teacher_cache"]) if rc.loss != "lm" else "",
            train_seconds=s["train_seconds"],
            peak_rss_mb=s["peak_rss_mb"],
            seconds=round(time.perf_counter() - t0, 1),
            finished_utc=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
            load_avg="/".join(f"{x:.1f}" for x in os.getloadavg()),
        )
        message = (
            f"{label}: wt2 {row['ppl_wikitext2_before']} -> {row['ppl_wikitext2_after']}, KL {row['kl_before']} -> "
            f"{row['kl_after']} ({row['seconds']} s, {row['tokens_per_s']} tok/s)"
        )
        return Measured(row, message)
