"""Baselines benchmark: the paper's comparison, NIRVANA beside LLM-Pruner and FLAP at the same sparsity.

    python -m nirvana bench baselines --model smollm2-135m [--threads 1] [--allow-code-execution]
        [--methods nirvana,llm-pruner,flap]   # a subset of the methods (dense is always measured)

Models: dense; at each sparsity (0.2, 0.5) NIRVANA at the analytic gamma*, NIRVANA at its KL-best
gamma (read from `benchmarks/gamma/gamma-<model>.json`, as `bench accuracy` does), LLM-Pruner,
FLAP and SliceGPT (`nirvana.methods`; SliceGPT also once at the reference's own 25% slicing, for
the record), each pruned with `nirvana.pipeline.prune` on the same calibration batch
(32 x 128 tokens of wikitext2-valid, seed 0: the pipeline's default). LLM-Pruner's default layer
range cannot reach 50% on SmolLM2 within 1% (docs/BASELINES.md), so at 0.5 it runs with
`{"attn_layers": [4, 19]}` (`METHOD_SETTINGS`, per model); every row records the method settings it used.
The loss-Taylor and Wanda-style ablations (NIRVANA's allocation with another criterion) are read
by the report from the committed quality and accuracy grids, not re-run.

One CSV row per model x measure (`benchmarks/baselines/baselines-<model>.csv`, resumable):
- `ppl`: WikiText-2 and PTB perplexity on the first `tokens` tokens (512-token windows), measured
  prefill/decode speed and peak memory (batch 1), parameters, target and achieved sparsity, added
  bias parameters and the pruning time (scoring, allocation, slicing);
- one row per zero-shot task (the seven, first `limit` examples), LAMBADA (acc and perplexity),
  gold bits per byte of MBPP (`mbpp_bpb`, the first `bpb_limit` problems; GSM8K's with
  `--gsm8k-bpb-limit`), each problem's value in `bpb-<model>.json` beside the CSV so the report pairs
  differences by problem, and MBPP and HumanEval pass@1 (only with `--allow-code-execution`, in the
  sandbox), each problem's outcome (1 passed, 0 not) in `pass-<model>.json` for the same pairing.
  `--backfill-passes` gives rows measured before outcomes were kept theirs, from the eval cache.
Then, at 20% (`lora_sparsities`), each method once more after the recovery module's default LoRA
budget (`RecoveryConfig()`: 16 steps of 16 x 128 tokens, r 8, seed 0) on the same offline
training windows (`--lora-data`, the calibration pool by default, as `bench recovery` uses):
variant "<name> + LoRA", perplexity, the seven tasks and gold BPB, nothing else changed. With
`--reconstruct-sparsities`, each matched method but SliceGPT once more with its kept weights re-solved
(`prune --reconstruct`, docs/BASELINES.md): variant "<name> + recon", the same rows, after the LoRA rows.
Every row carries the parameter counts and pruning facts of its model.
Order (so a run cut short is still useful): the `ppl` rows at the first sparsity (dense first),
then the zero-shot tasks there method by method (each method's 7-task average as early as
possible), then LAMBADA there, then gold BPB there, then the LoRA rows there; then the same at the
next sparsity; the code tasks (MBPP, HumanEval pass@1) last, or with `--code-first` right after each
sparsity's perplexity rows (for a code model, the rows the comparison is about). `--only-measures
ppl,mbpp_bpb` runs only the planned rows of those measures now (the cheap rows of a big model first);
the grid record and the report still count every planned row, and a later run fills in the rest;
`--only-methods nirvana,llm-pruner` likewise runs only those models' rows (the comparison's two first).
The markdown table (methods as rows, metrics as columns, +- standard errors) and the PNG are
rebuilt after every row (`nirvana.bench.baselines_report`).
By default every model runs on the CPU in float32 (the committed grids); `--device cuda --dtype bfloat16`
runs the same grid where an 8B model fits (its rows in `<out_dir>/bfloat16/`, never beside float32 rows).
Every method is scored (and reconstructed) on the same calibration batch, WikiText-2 validation by default;
`--calib python-code` calibrates the whole grid on code instead (its rows in `<out_dir>/calib-python-code/`,
its report paired by problem with the WikiText-2-calibrated grid beside it).
The dense model stays loaded beside each pruned copy: plan for both (`nirvana.guard.memory`).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import time
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import torch

from nirvana.accuracy.harness import run_accuracy
from nirvana.accuracy.tasks import TASKS, ZEROSHOT7
from nirvana.bench.accuracy import kl_best_gammas
from nirvana.bench.base import Benchmark, Measured
from nirvana.bench.baselines_report import LORA, MATCH_TOLERANCE, RECONSTRUCT, matched, write_report
from nirvana.bench.environment import machine_label
from nirvana.bench.per_problem import per_problem_text, read_per_problem
from nirvana.bench.quality import evaluate_ppl, text_prefix
from nirvana.bench.rows import read_rows
from nirvana.checkpoints.loading import load_model
from nirvana.data.text import load_text
from nirvana.errors import InvalidInput, NirvanaError
from nirvana.measure.speed import measure_speed
from nirvana.methods import get_method
from nirvana.models.shapes import count_block_parameters, count_parameters
from nirvana.pipeline import DEFAULT_CALIBRATION, PruneSettings, prune
from nirvana.recovery.config import RecoveryConfig
from nirvana.recovery.data import load_documents
from nirvana.recovery.run import run_recovery
from nirvana.store.atomic import atomic_write_text
from nirvana.store.paths import benchmarks_dir

DEFAULT_OUT = benchmarks_dir("baselines")
SPARSITIES = (0.2, 0.5)
DATASETS = ("wikitext2", "ptb")
METHODS = ("nirvana", "llm-pruner", "flap", "slicegpt", "tyr")
# SliceGPT once more at the reference's own slicing fraction, for the record (not matched: 14% of the blocks go).
REFERENCE_SLICING = 0.25
# Method settings per model and (method, sparsity) where the defaults do not apply (docs/BASELINES.md: LLM-Pruner's
# default layer range [4, 28) reaches 0.464 or 0.531 at 50% on SmolLM2, not 0.5 within 1%). Qwen2.5-Coder-0.5B
# (24 layers, 2 KV groups) reaches 0.2000 and 0.5000 with the default range [3, 22): no entry.
LLM_PRUNER_SETTINGS = {("llm-pruner", 0.5): {"attn_layers": [4, 19]}}
METHOD_SETTINGS = {"smollm2-135m": LLM_PRUNER_SETTINGS}

COLUMNS = (
    "model",
    "variant",
    "method",
    "sparsity",
    "gamma",
    "method_settings",
    "measure",
    "limit",
    "ppl_wikitext2",
    "ppl_ptb",
    "ppl_tokens",
    "paper_metric",
    "acc",
    "acc_stderr",
    "perplexity",
    "pass_at_1",
    "pass_at_1_stderr",
    "bpb",
    "bpb_stderr",
    "n",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "prefill_tokens_per_cpu_s",
    "decode_tokens_per_cpu_s",
    "peak_memory_bytes",
    "speed_setting",
    "params_before",
    "params_after",
    "block_params_before",
    "block_params_after",
    "target_sparsity",
    "achieved_block_sparsity",
    "achieved_block_param_sparsity",
    "added_bias_params",
    "prune_seconds",
    "lora",
    "lora_seconds",
    "score_seconds",
    "score_cached",
    "seconds",
    "generation_batch_size",  # a generating row's rows at once (its time depends on it, its completions do not)
    "resumed_completions",  # a code row resumed from its journal: completions generated by an earlier run
    "load_avg_1min",
    "finished_utc",
    "machine",
)
KEY = ("model", "variant", "measure", "limit")


@dataclass(frozen=True)
class Variant:
    """A model of the table: dense, or a method at a sparsity (gamma: NIRVANA only, None = gamma*)."""

    method: str  # "dense" or a nirvana.methods name
    sparsity: float = 0.0
    gamma: float | None = None
    gamma_label: str = ""  # NIRVANA: which gamma; a baseline: a label that replaces its sparsity in the name
    settings: str = ""  # the method's settings as JSON ("" = its defaults): a string keeps the job hashable
    lora: bool = False  # recovered with the default LoRA budget after pruning
    reconstruct: bool = False  # kept o_proj / down_proj columns re-solved by least squares (`--reconstruct`)

    @property
    def name(self) -> str:
        if self.method == "dense":
            return "dense"
        if self.has_allocation_settings:  # NIRVANA: named by its gamma
            name = f"{self.method} s={self.sparsity:g} {self.gamma_label or 'gamma*'}"
        elif self.gamma_label:  # a labelled setting of a baseline (SliceGPT at the reference's slicing)
            name = f"{self.method} {self.gamma_label}"
        else:
            name = f"{self.method} s={self.sparsity:g}"
        return name + RECONSTRUCT * self.reconstruct + LORA * self.lora

    @property
    def has_allocation_settings(self) -> bool:
        return self.method != "dense" and get_method(self.method).has_allocation_settings

    @property
    def reconstructs(self) -> bool:
        """`--reconstruct` applies to its model (not SliceGPT's rotated stream; Tyr re-solves by itself)."""
        return self.method != "dense" and not get_method(self.method).no_reconstruct

    def prune_settings(
        self, samples: int, seq_len: int, use_cache: bool, micro_batch: int = 0, calib: str = DEFAULT_CALIBRATION
    ) -> PruneSettings:
        settings = json.loads(self.settings) if self.settings else None
        return PruneSettings(
            sparsity=self.sparsity,
            calib=calib,
            micro_batch=micro_batch,
            gamma=self.gamma,
            samples=samples,
            seq_len=seq_len,
            use_cache=use_cache,
            method=self.method,
            method_settings=settings,
            reconstruct=self.reconstruct,
        )


@dataclass(frozen=True)
class BaselineJob:
    """One row: a model variant on one measure ("ppl", a task name), `limit` examples (ppl: tokens)."""

    model: str
    variant: Variant
    measure: str
    limit: int


@dataclass
class BaselinesConfig:
    model: str = "smollm2-135m"
    sparsities: tuple[float, ...] = SPARSITIES
    methods: tuple[str, ...] = METHODS  # the pruned models' methods (dense is always measured)
    tokens: int = 16384  # perplexity tokens per dataset
    window: int = 512
    limit: int = 200  # examples per zero-shot task
    lambada_limit: int = 200
    mbpp_limit: int = 10
    humaneval_limit: int = 0  # HumanEval problems (0: skip; needs --allow-code-execution)
    bpb_limit: int = 500  # mbpp_bpb problems (0: skip)
    gsm8k_bpb_limit: int = 0  # gsm8k_bpb problems (0: skip)
    batch_size: int = 8
    bpb_batch_size: int = 1  # one problem per forward after the shared few-shot prefix: no padding
    generation_batch_size: int | None = None  # rows generating at once in the code rows (None: batch_size)
    allow_code_execution: bool = False
    calib: str = DEFAULT_CALIBRATION  # the calibration text (`prune --calib`), one per grid (see ONE_PER_GRID)
    samples: int = 32  # calibration N x T, the same batch for every method
    seq_len: int = 128
    use_score_cache: bool = False  # off: every prune is scored afresh, so the pruning time is measured
    micro_batch: int = 0  # calibration sequences per scoring forward/backward (0: all; big vocabularies need 4)
    # the code tasks (MBPP, HumanEval pass@1) right after each sparsity's perplexity rows, not last: for a code
    # model they are the rows the comparison is about
    code_first: bool = False
    # run only the planned rows of these measures ("ppl", a task name); empty: all. Not part of the grid record:
    # the grid is what is planned, this is what runs now
    only_measures: tuple[str, ...] = ()
    # and only the rows of these models ("dense", a method name); empty: all. Not part of the grid record either
    only_methods: tuple[str, ...] = ()
    # and only the rows of the models at these sparsities (0: dense); empty: all. Not part of the grid record
    only_sparsities: tuple[float, ...] = ()
    lora_sparsities: tuple[float, ...] = (0.2,)  # each method again after the default LoRA budget (empty: none)
    lora_data: str = "calibration"  # recovery training documents (`recover --data`)
    # each method again with its kept weights re-solved (`prune --reconstruct`; not SliceGPT, whose rotated modules
    # have no dense output to fit): perplexity, the seven tasks, gold BPB and the code rows, as the LoRA rows
    reconstruct_sparsities: tuple[float, ...] = ()
    speed_prompt_len: int = 128
    speed_new_tokens: int = 32
    speed_repeats: int = 3
    threads: int | None = None
    # where the models run and the dense model's dtype (scores and losses accumulate in fp32 whatever it is). A
    # grid's rows are all in one dtype, kept in its grid record; the CLI puts rows of another dtype than float32 in
    # `<out_dir>/<dtype>/` so they never share a table with the float32 rows
    device: str = "cpu"
    dtype: str = "float32"
    out_dir: Path = DEFAULT_OUT
    note: str = ""
    best_gamma: dict = field(default_factory=dict)  # sparsity -> KL-best gamma of nirvana
    # NIRVANA once more at this gamma at every sparsity: for a model without a gamma benchmark whose gamma*
    # misses the target (Gemma-3-270M keeps its one KV group per layer, so only neurons can go)
    nirvana_gamma: float | None = None
    method_settings: dict | None = None  # (method, s) -> settings; None: the model's METHOD_SETTINGS entry

    def settings_for(self, method: str, sparsity: float) -> dict | None:
        table = METHOD_SETTINGS.get(self.model, {}) if self.method_settings is None else self.method_settings
        return table.get((method, sparsity))

    @property
    def csv_path(self) -> Path:
        return Path(self.out_dir) / f"baselines-{self.model.replace('/', '_')}.csv"

    @property
    def journal_dir(self) -> Path:
        """An unfinished code row's completions (`nirvana.store.journal`), beside the CSV: committed at a
        session's end, the row resumes from them on any machine; a finished row removes its journal."""
        return Path(self.out_dir) / "journals"

    @property
    def per_problem_path(self) -> Path:
        return Path(self.out_dir) / f"bpb-{self.model.replace('/', '_')}.json"

    @property
    def passes_path(self) -> Path:
        """Each code row's per-problem outcomes (1 passed, 0 not), for pass@1 differences paired by problem."""
        return Path(self.out_dir) / f"pass-{self.model.replace('/', '_')}.json"

    @property
    def code_tasks(self) -> list[tuple[str, int]]:
        """The pass@1 rows (task, problems) this grid runs: only with code execution allowed."""
        if not self.allow_code_execution:
            return []
        return [(t, n) for t, n in (("mbpp", self.mbpp_limit), ("humaneval", self.humaneval_limit)) if n]

    @property
    def gold_tasks(self) -> list[tuple[str, int]]:
        return [(t, n) for t, n in (("mbpp_bpb", self.bpb_limit), ("gsm8k_bpb", self.gsm8k_bpb_limit)) if n]


# What a run of the grid planned, beside its CSV (`baselines-<model>.grid.json`), so a reader of the CSV (the
# Evidence page) knows which rows are missing from *that* grid, not from the defaults'.
GRID_FIELDS = (
    "sparsities",
    "methods",
    "tokens",
    "limit",
    "lambada_limit",
    "mbpp_limit",
    "humaneval_limit",
    "bpb_limit",
    "gsm8k_bpb_limit",
    "lora_sparsities",
    "reconstruct_sparsities",
    "nirvana_gamma",
    "allow_code_execution",
    "dtype",
    "calib",
)
UNION_FIELDS = ("sparsities", "methods")  # runs restricted to some methods or sparsities add to the grid
# Settings every row of one grid shares, refused if a run changes them: field -> (the value grids had before the
# field was recorded, what a change would mix). The CLI gives another value than the first its own folder.
ONE_PER_GRID = {"dtype": ("float32", "precision"), "calib": (DEFAULT_CALIBRATION, "calibration text")}


def grid_folder(field_name: str, value: str) -> str:
    """The folder (under `--out-dir`) of a grid whose `field_name` is `value`, not the default: `bfloat16`,
    `calib-python-code`, `calib-my_code` for a file `/data/my_code.jsonl`."""
    if field_name == "dtype":
        return value
    stem = Path(value).stem if Path(value).suffix else value
    return "calib-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.")


def measures(config: BaselinesConfig) -> tuple[str, ...]:
    """The measures `config`'s grid plans rows of, in plan order (what `--only-measures` may name)."""
    return tuple(dict.fromkeys(j.measure for j in plan_jobs(config)))


def grid_path(config: BaselinesConfig) -> Path:
    return config.csv_path.with_suffix(".grid.json")


def record_grid(config: BaselinesConfig) -> dict:
    """Write (merge into) the grid record of `config`'s CSV: the methods and sparsities of every run so far,
    the other settings of the latest run. Returns the record."""
    path = grid_path(config)
    old = json.loads(path.read_text()) if path.exists() else {}
    for name, (before, what) in ONE_PER_GRID.items():
        measured_with = old.get(name, before)  # a record from before the field was kept: its only value then
        if old and measured_with != getattr(config, name):
            flag, value = f"--{name}", getattr(config, name)
            raise InvalidInput(
                f"the rows of {config.csv_path} are measured with {flag} {measured_with}, and {flag} {value} would "
                f"put rows of another {what} in the same table; give them their own folder (--out-dir "
                f"{Path(config.out_dir) / grid_folder(name, value)}) or run with {flag} {measured_with}."
            )
    record = {name: getattr(config, name) for name in GRID_FIELDS}
    record = {k: list(v) if isinstance(v, tuple) else v for k, v in record.items()}
    for name in UNION_FIELDS:
        merged = set(old.get(name, [])) | set(record[name])
        record[name] = [m for m in METHODS if m in merged] if name == "methods" else sorted(merged)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return record


def recorded_config(csv_path: Path, model: str) -> BaselinesConfig:
    """The grid the CSV at `csv_path` was planned as (its grid record), else the defaults for `model`."""
    path = Path(csv_path).with_suffix(".grid.json")
    record = json.loads(path.read_text()) if path.exists() else {}
    tuples = {
        k: tuple(v)
        for k, v in record.items()
        if k in ("sparsities", "methods", "lora_sparsities", "reconstruct_sparsities")
    }
    fields_ = {k: v for k, v in record.items() if k in GRID_FIELDS} | tuples
    sparsities = fields_.get("sparsities", SPARSITIES)
    best = best_gammas(model, sparsities, fields_.get("calib", DEFAULT_CALIBRATION))
    return BaselinesConfig(model=model, out_dir=Path(csv_path).parent, best_gamma=best, **fields_)


def variants_for(sparsity: float, config: BaselinesConfig) -> list[Variant]:
    """The pruned models at `sparsity`, most informative first: NIRVANA gamma*, LLM-Pruner, FLAP, KL-best."""
    out = [Variant("nirvana", sparsity)]
    for m in METHODS[1:]:
        settings = config.settings_for(m, sparsity)
        out.append(Variant(m, sparsity, settings=json.dumps(settings, sort_keys=True) if settings else ""))
    if sparsity in config.best_gamma:
        g = config.best_gamma[sparsity]
        out.append(Variant("nirvana", sparsity, g, f"gamma={g:g} (KL-best)"))
    if config.nirvana_gamma is not None:
        g = config.nirvana_gamma
        out.append(Variant("nirvana", sparsity, g, f"gamma={g:g}"))
    if sparsity == config.sparsities[0]:
        reference = json.dumps({"slicing": REFERENCE_SLICING})
        out.append(Variant("slicegpt", sparsity, None, f"slicing={REFERENCE_SLICING:g} (reference)", reference))
    return [v for v in out if v.method in config.methods]


def plan_jobs(config: BaselinesConfig) -> list[BaselineJob]:
    """The rows in priority order (see the module docstring)."""
    job = partial(BaselineJob, config.model)
    dense = Variant("dense")
    jobs: list[BaselineJob] = []
    everyone: list[Variant] = []
    for i, s in enumerate(config.sparsities):
        pruned = variants_for(s, config)
        block = [dense, *pruned] if i == 0 else pruned
        everyone += block
        jobs += [job(v, "ppl", config.tokens) for v in block]
        if config.code_first:
            jobs += [job(v, task, n) for task, n in config.code_tasks for v in block]
        # dense last among the tasks: its zero-shot figures are also in the committed accuracy grid
        tasks_order = [*pruned, dense] if i == 0 else pruned
        jobs += [job(v, t, config.limit) for v in tasks_order for t in ZEROSHOT7]
        if config.lambada_limit:
            jobs += [job(v, "lambada_openai", config.lambada_limit) for v in block]
        jobs += [job(v, task, n) for task, n in config.gold_tasks for v in block]
        if s in config.lora_sparsities:
            # the matched models only: SliceGPT at the reference's slicing is there for the record
            recovered = [replace(v, lora=True) for v in pruned if v.has_allocation_settings or not v.gamma_label]
            everyone += recovered
            jobs += [job(v, "ppl", config.tokens) for v in recovered]
            jobs += [job(v, t, config.limit) for v in recovered for t in ZEROSHOT7]
            jobs += [job(v, task, n) for task, n in config.gold_tasks for v in recovered]
        if s in config.reconstruct_sparsities:
            fitted = [replace(v, reconstruct=True) for v in pruned if not v.gamma_label and v.reconstructs]
            everyone += fitted
            jobs += [job(v, "ppl", config.tokens) for v in fitted]
            jobs += [job(v, t, config.limit) for v in fitted for t in ZEROSHOT7]
            jobs += [job(v, task, n) for task, n in config.gold_tasks for v in fitted]
    if not config.code_first:
        jobs += [job(v, task, n) for task, n in config.code_tasks for v in everyone]
    else:  # the recovered and reconstructed models' code rows, after everything else
        later = [v for v in everyone if v.lora or v.reconstruct]
        jobs += [job(v, task, n) for task, n in config.code_tasks for v in later]
    return jobs


class BaselinesBench(Benchmark):
    """The grid on the shared runner (`nirvana.bench.base`); the report is rebuilt after every row."""

    name = "baselines"
    columns, key_columns = COLUMNS, KEY
    skip_errors = (NirvanaError,)  # one row that cannot run (memory on a shared machine) must not end the grid
    report_each_row = True

    def jobs(self, config: BaselinesConfig) -> list[BaselineJob]:
        return [
            j
            for j in plan_jobs(config)
            if (not config.only_measures or j.measure in config.only_measures)
            and (not config.only_methods or j.variant.method in config.only_methods)
            and (not config.only_sparsities or j.variant.sparsity in config.only_sparsities)
        ]

    def key(self, config: BaselinesConfig, job: BaselineJob) -> tuple[str, ...]:
        return (job.model, job.variant.name, job.measure, str(job.limit))

    def label(self, job: BaselineJob) -> str:
        return f"{job.variant.name} {job.measure}"

    def worker(self, config: BaselinesConfig, log) -> BaselinesWorker:
        return BaselinesWorker(config, log)

    def report(self, rows: list[dict], config: BaselinesConfig):
        return write_report(rows, config)


BASELINES = BaselinesBench()


class BaselinesWorker:
    """Loads the dense model and the perplexity texts once; the last pruned model is kept for the next row."""

    def __init__(self, config: BaselinesConfig, log):
        if config.threads is not None:
            if config.threads < 1:
                raise InvalidInput(f"--threads must be a positive integer, got {config.threads}.")
            torch.set_num_threads(config.threads)
        self.config, self.log = config, log
        self.lm = load_model(config.model, dtype=config.dtype, device=config.device)
        self._texts: dict[str, object] = {}
        self.machine = machine_label()
        self._current: tuple[Variant, object, dict] | None = None
        self._documents = None  # recovery training documents, loaded on the first LoRA row

    def texts(self, name: str):
        if name not in self._texts:
            self._texts[name] = text_prefix(load_text(name), self.lm.tokenizer, self.config.tokens)
        return self._texts[name]

    def model(self, variant: Variant):
        """(model, facts) for `variant`: parameters, sparsity and pruning time, counted on the sliced model."""
        if variant.method == "dense":
            n = count_parameters(self.lm.model)
            blocks = count_block_parameters(self.lm.model)
            facts = {
                "params_before": n,
                "params_after": n,
                "block_params_before": blocks,
                "block_params_after": blocks,
                "target_sparsity": 0.0,
                "achieved_block_sparsity": 0.0,
                "achieved_block_param_sparsity": 0.0,
                "added_bias_params": 0,
            }
            return self.lm.model, facts
        if self._current is not None and self._current[0] == variant:
            return self._current[1], self._current[2]
        self._current = None
        c = self.config
        t = time.perf_counter()
        result = prune(self.lm, variant.prune_settings(c.samples, c.seq_len, c.use_score_cache, c.micro_batch, c.calib))
        seconds = time.perf_counter() - t
        r = result.report
        facts = {k: r[k] for k in ("params_before", "params_after", "block_params_before", "block_params_after")}
        facts.update(
            gamma=round(r["gamma"], 4) if r.get("gamma") is not None else "",
            method_settings=json.dumps(r.get("method_settings") or {}, sort_keys=True),
            target_sparsity=r["target_sparsity"],
            achieved_block_sparsity=round(r["achieved_block_sparsity"], 4),
            achieved_block_param_sparsity=round(r["achieved_block_param_sparsity"], 4),
            added_bias_params=r["added_bias_params"],
            prune_seconds=round(seconds, 1),
            score_seconds=r["timings"].get("score"),
            score_cached=c.use_score_cache,
        )
        self.log(f"{variant.name}: pruned in {seconds:.0f} s, achieved {facts['achieved_block_sparsity']}")
        model = result.model
        if variant.lora:
            model, facts = self.recovered(model, facts)
        self._current = (variant, model, facts)
        return model, facts

    def recovered(self, pruned, facts: dict):
        """`pruned` after the recovery module's default LoRA budget, merged; the facts gain what it cost."""
        rc = RecoveryConfig()
        if self._documents is None:
            self._documents = load_documents(self.config.lora_data)
        t = time.perf_counter()
        result = run_recovery(pruned, self.lm.tokenizer, rc, self._documents, inplace=True)
        if not result.complete:
            raise NirvanaError(f"LoRA recovery did not finish ({result.message}); the row is not written.")
        s = result.summary()
        self.log(f"  LoRA: {s['tokens_trained']} tokens in {s['train_seconds']:.0f} s")
        budget = f"{rc.total_steps} steps x {rc.batch_size}x{rc.seq_len}"
        lora = f"r{rc.r} a{rc.alpha:g} lr{rc.lr:g} {budget} ({self.config.lora_data})"
        return result.model, {**facts, "lora": lora, "lora_seconds": round(time.perf_counter() - t, 1)}

    def run(self, job: BaselineJob) -> Measured:
        model, facts = self.model(job.variant)
        t = time.perf_counter()
        measured = self.perplexity_and_speed(model) if job.measure == "ppl" else self.task(model, job)
        row = {
            "model": job.model,
            "variant": job.variant.name,
            "method": job.variant.method,
            "sparsity": job.variant.sparsity,
            "measure": job.measure,
            "limit": job.limit,
            "method_settings": "",
            **facts,
            **measured,
            "seconds": round(time.perf_counter() - t, 1),
            "load_avg_1min": round(os.getloadavg()[0], 2),
            "finished_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
            "machine": self.machine,
        }
        files = {}
        # each problem's gold BPB or code outcome, beside the CSV, for differences paired by problem
        for key, path in (("bpb_per_example", self.config.per_problem_path), ("passed", self.config.passes_path)):
            values = row.pop(key, None)
            if values is not None:
                files[path.name] = per_problem_text(path, job.variant.name, job.measure, job.limit, values)
        shown = {k: row.get(k) for k in ("ppl_wikitext2", "ppl_ptb", "acc", "perplexity", "pass_at_1", "bpb")}
        text = ", ".join(f"{k} {v}" for k, v in shown.items() if v not in (None, ""))
        return Measured(row, f"{job.variant.name} {job.measure}: {text} ({row['seconds']} s)", files)

    def perplexity_and_speed(self, model) -> dict:
        c, tok = self.config, self.lm.tokenizer
        out: dict = {}
        for name in DATASETS:
            ppl, tokens = evaluate_ppl(model, tok, self.texts(name), c.tokens, c.window)
            out[f"ppl_{name}"], out["ppl_tokens"] = round(ppl, 3), tokens
        speed = measure_speed(
            model,
            batch_sizes=(1,),
            prompt_len=c.speed_prompt_len,
            new_tokens=c.speed_new_tokens,
            repeats=c.speed_repeats,
        )
        point = speed["results"][0]
        out.update(
            prefill_tokens_per_s=round(point["prefill_tokens_per_s"], 1),
            decode_tokens_per_s=round(point["decode_tokens_per_s"], 2),
            # process CPU time: with one thread the work itself, steadier than wall time on a shared machine
            prefill_tokens_per_cpu_s=round(point["prefill_tokens_per_cpu_s"], 1),
            decode_tokens_per_cpu_s=round(point["decode_tokens_per_cpu_s"], 2),
            peak_memory_bytes=point["peak_memory_bytes"],
            speed_setting=f"batch 1, {c.speed_prompt_len}+{c.speed_new_tokens} tokens, median of {c.speed_repeats}",
        )
        return out

    def task(self, model, job: BaselineJob) -> dict:
        c = self.config
        gold = TASKS[job.measure].kind == "bpb"
        result = run_accuracy(
            model,
            self.lm.tokenizer,
            [job.measure],
            limit=job.limit,
            batch_size=c.bpb_batch_size if gold else c.batch_size,
            generation_batch_size=c.generation_batch_size,
            source="local",
            allow_code_execution=c.allow_code_execution,
            journal_dir=c.journal_dir,
        )
        r = result["tasks"][job.measure]
        metric = r.get("paper_metric") or "acc"
        out = {
            "paper_metric": r.get("paper_metric") or "",
            "acc": r.get(metric),
            "acc_stderr": r.get(f"{metric}_stderr"),
            "perplexity": r.get("perplexity"),
            "pass_at_1": r.get("pass@1"),
            "pass_at_1_stderr": r.get("pass@1_stderr"),
            "bpb": r.get("bpb"),
            "bpb_stderr": r.get("bpb_stderr"),
            "n": r.get("n"),
        }
        if gold:
            out["bpb_per_example"] = r["bpb_per_example"]
        if TASKS[job.measure].kind == "code":
            out["passed"] = r.get("passed")
            out["resumed_completions"] = r.get("resumed_completions", "")  # their time is not in `seconds`
            out["generation_batch_size"] = r.get("generation_batch_size", "")
        return out

    def backfill_passes(self, rows: list[dict]) -> list[str]:
        """Per-problem outcomes of code `rows` measured before they were kept: each row's model is built again and
        its completions, from this machine's eval cache, replayed in the sandbox (nothing generates). Returns one
        line per row: written, or why not (not cached here; the replay disagrees with the row's pass@1)."""
        c = self.config
        variants = {j.variant.name: j.variant for j in plan_jobs(c)}
        lines = []
        for r in rows:
            task, name, limit = r["measure"], r["variant"], int(r["limit"])
            if name not in variants:
                lines.append(f"{name} {task}: not in this grid's plan (pass the grid's --methods and --sparsities)")
                continue
            model, _ = self.model(variants[name])
            got = run_accuracy(
                model,
                self.lm.tokenizer,
                [task],
                limit=limit,
                source="local",
                allow_code_execution=True,
                cached_only=True,
            )["tasks"].get(task)
            if got is None:
                lines.append(
                    f"{name} {task}: its completions are not in this machine's eval cache (measured elsewhere?); "
                    "the row keeps its pass@1 without per-problem outcomes"
                )
            elif got.get("passed") is None or not math.isclose(
                sum(got["passed"]) / len(got["passed"]), float(r["pass_at_1"])
            ):
                lines.append(f"{name} {task}: not written ({got.get('passed_note') or 'pass@1 differs from the row'})")
            else:
                text = per_problem_text(c.passes_path, name, task, limit, got["passed"])
                atomic_write_text(c.passes_path, text)
                lines.append(f"{name} {task}: {sum(got['passed'])} of {len(got['passed'])} passed, written")
        return lines


def backfill_passes(config: BaselinesConfig, log) -> list[str]:
    """`bench baselines --backfill-passes`: the code rows of the CSV without per-problem outcomes in
    `config.passes_path` get them from this machine's eval cache (`BaselinesWorker.backfill_passes`)."""
    have = read_per_problem(config.passes_path)
    code = {name for name, spec in TASKS.items() if spec.kind == "code"}
    rows = [
        r
        for r in read_rows(config.csv_path)
        if r["measure"] in code
        and r.get("pass_at_1") not in (None, "")
        and r["measure"] not in have.get(r["variant"], {})
    ]
    if not rows:
        return ["every code row already has its per-problem outcomes"]
    return BaselinesWorker(config, log).backfill_passes(rows)


def best_gammas(model: str, sparsities, calib: str = DEFAULT_CALIBRATION) -> dict[float, float]:
    """The KL-best gammas of NIRVANA on `model` at `sparsities` (from the committed gamma benchmark), for a grid
    calibrated on `calib`: none but on the default text, the one the gamma benchmark searched on."""
    if calib != DEFAULT_CALIBRATION:
        return {}
    return {s: g for s, g in kl_best_gammas(model).items() if s in sparsities}


__all__ = [
    "BASELINES",
    "MATCH_TOLERANCE",
    "BaselineJob",
    "BaselinesConfig",
    "Variant",
    "backfill_passes",
    "best_gammas",
    "matched",
    "record_grid",
    "recorded_config",
]
