"""Recovery benchmark: does a short LoRA fine-tune rank the criteria as pruning alone does?

    python -m nirvana bench recovery --model smollm2-135m [--steps 16] [--tokens 16384]

Rows: nirvana, taylor (global allocation) and wanda (uniform allocation) at 0.2 and 0.5, and
magnitude at 0.2; each pruned model is recovered with the same data, steps, seed and LoRA
settings (`RecoveryConfig` defaults: r 8, alpha 16, dropout 0.05, seven projections, lr 1e-4,
batch 16 x 128 tokens). Every row holds WikiText-2 test and PTB validation perplexity (the first
`--tokens` tokens, 512-token windows) before and after, the held-out loss before and after, the
training speed, and the seven-task zero-shot average (`acc7`, percent, the paper's metric per task,
the first `--acc-limit` examples of each task from the local data through lm-evaluation-harness)
before and after with its standard error, and MBPP gold bits per byte (`mbpp_bpb`, the first
`--bpb-limit` problems, OLMES's 3-shot prompt; lower is better) before and after, each problem's
value in `curves/<row>.json` so the report pairs differences by problem. Loss curves go there too; rows are written
to the CSV as they finish (`nirvana.bench.base`) and a rerun skips rows already there. A row written without
`acc7` (or with another `--acc-limit`) is re-measured whole when accuracy is asked for, and
replaced in place: the run is seeded, so its perplexities come out again as a check. The same
holds for a row without gold BPB (or at another `--bpb-limit`) when BPB is asked for. The markdown
and the plot are rebuilt from the CSV and curves after every row, or alone with `--report-only`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from nirvana.accuracy.harness import run_accuracy
from nirvana.bench.base import Benchmark, Measured
from nirvana.bench.environment import machine_label
from nirvana.bench.methods import METHOD_COLUMNS, NIRVANA, MethodChoice
from nirvana.bench.quality import evaluate_ppl, text_prefix
from nirvana.bench.rows import row_key
from nirvana.checkpoints.loading import load_model
from nirvana.data.text import load_text
from nirvana.measure.paired import paired_difference
from nirvana.models.shapes import count_parameters
from nirvana.pipeline import prune
from nirvana.recovery.config import RecoveryConfig
from nirvana.recovery.data import data_for, load_documents
from nirvana.recovery.train import recover
from nirvana.store.paths import benchmarks_dir

DEFAULT_OUT = benchmarks_dir("recovery")  # the checkout's benchmarks/recovery; ./benchmarks/recovery when installed
# (criterion, allocation, sparsity), most informative first: the paper's claim is nirvana vs taylor
# at 20% (where the seven-task average is above chance); 0.5 shows the larger perplexity recovery.
JOBS = (
    ("nirvana", "global", 0.2),
    ("taylor", "global", 0.2),
    ("nirvana", "global", 0.5),
    ("taylor", "global", 0.5),
    ("wanda", "uniform", 0.2),
    ("wanda", "uniform", 0.5),
    ("magnitude", "global", 0.2),
)
DATASETS = ("wikitext2", "ptb")
COLUMNS = (
    "model",
    "criterion",
    "method",
    "method_settings",
    "allocation",
    "sparsity",
    "steps",
    "data",
    "seed",
    "token_budget",
    "achieved_block_sparsity",
    "params_after",
    "ppl_wikitext2_before",
    "ppl_wikitext2_after",
    "ppl_ptb_before",
    "ppl_ptb_after",
    "heldout_before",
    "heldout_after",
    "acc7_before",
    "acc7_after",
    "acc7_before_stderr",
    "acc7_after_stderr",
    "acc_limit",
    "mbpp_bpb_before",
    "mbpp_bpb_after",
    "mbpp_bpb_before_stderr",
    "mbpp_bpb_after_stderr",
    "bpb_limit",
    "tokens_trained",
    "tokens_per_s",
    "train_seconds",
    "seconds",
    "lora",
    "finished_utc",
    "machine",
    "load_avg",
)
KEY = ("model", "criterion", "allocation", "sparsity", "steps", "data", "seed", "token_budget", *METHOD_COLUMNS)


@dataclass(frozen=True)
class RecoveryJob:
    """One row: prune `model` with `criterion`/`allocation` at `sparsity`, then recover it."""

    model: str  # registry name, Hugging Face id or local folder
    criterion: str
    allocation: str
    sparsity: float
    method: MethodChoice = NIRVANA  # a baseline: criterion is its name, allocation "method"


@dataclass
class RecoveryBenchConfig:
    model: str = "smollm2-135m"
    jobs: tuple[tuple[str, str, float], ...] = JOBS
    steps: int = 16
    data: str = "calibration"
    seed: int = 0
    tokens: int = 16384  # perplexity tokens per dataset
    window: int = 512
    samples: int = 32  # calibration N x T for scoring
    seq_len: int = 128
    threads: int | None = None
    acc_limit: int = 200  # examples per zero-shot task for acc7 (0: no accuracy)
    acc_batch_size: int = 8
    bpb_limit: int = 0  # MBPP gold bits-per-byte problems before and after (0: none; the README's run: 500)
    out_dir: Path = DEFAULT_OUT
    note: str = ""
    recovery: dict = field(default_factory=dict)  # RecoveryConfig overrides
    # The pruned models' method: NIRVANA's rows above, or one baseline at each of their sparsities.
    method: str = "nirvana"
    method_settings: dict | None = None

    @property
    def csv_path(self) -> Path:
        return Path(self.out_dir) / "recovery.csv"

    def key(self, criterion: str, allocation: str, sparsity: float, method: MethodChoice = NIRVANA) -> dict:
        return {
            **method.cells(),
            "model": self.model,
            "criterion": criterion,
            "allocation": allocation,
            "sparsity": sparsity,
            "steps": self.steps,
            "data": self.data,
            "seed": self.seed,
            "token_budget": self.tokens,
        }


def row_name(row: dict) -> str:
    return f"{row['criterion']}-{row['allocation']}-{float(row['sparsity']):g}-s{row['steps']}"


def is_done(row: dict, config: RecoveryBenchConfig) -> bool:
    """A row needs no rerun: it holds acc7 at this acc_limit and gold BPB at this bpb_limit (each when asked for)."""
    acc = not config.acc_limit or (bool(row.get("acc7_after")) and str(row.get("acc_limit")) == str(config.acc_limit))
    bpb = not config.bpb_limit or (
        bool(row.get("mbpp_bpb_after")) and str(row.get("bpb_limit")) == str(config.bpb_limit)
    )
    return acc and bpb


class RecoveryBench(Benchmark):
    """The rows on the shared runner (`nirvana.bench.base`): a row without acc7 (or at another
    `acc_limit`) is incomplete when accuracy is asked for, re-measured and replaced in place."""

    name = "recovery"
    columns, key_columns = COLUMNS, KEY
    report_each_row = True

    def jobs(self, config: RecoveryBenchConfig) -> list[RecoveryJob]:
        choice = MethodChoice.of(config.method, config.method_settings)
        if not choice.has_allocation_settings:  # the baseline at each sparsity of the rows, in their order
            sparsities = dict.fromkeys(float(s) for _, _, s in config.jobs)
            return [RecoveryJob(config.model, choice.method, "method", s, choice) for s in sparsities]
        return [RecoveryJob(config.model, *job) for job in config.jobs]

    def key(self, config: RecoveryBenchConfig, job: RecoveryJob) -> tuple[str, ...]:
        return row_key(config.key(job.criterion, job.allocation, job.sparsity, job.method), KEY)

    def complete(self, row: dict, config: RecoveryBenchConfig) -> bool:
        return is_done(row, config)

    def label(self, job: RecoveryJob) -> str:
        return f"{job.criterion} {job.allocation} {job.sparsity}"

    def worker(self, config: RecoveryBenchConfig, log) -> RecoveryWorker:
        return RecoveryWorker(config, log)

    def report(self, rows: list[dict], config: RecoveryBenchConfig) -> Path:
        return write_report(rows, config)


RECOVERY = RecoveryBench()


def acc7(model, tokenizer, config: RecoveryBenchConfig, log, label: str) -> tuple[float, float | None]:
    """(seven-task average, its standard error), in percent, on the first acc_limit examples per task."""
    t0 = time.perf_counter()
    result = run_accuracy(
        model, tokenizer, "zeroshot7", limit=config.acc_limit, batch_size=config.acc_batch_size, source="local"
    )
    avg = result["average"]
    se = None if avg["stderr"] is None else round(100 * avg["stderr"], 2)
    log(f"  {label}: acc7 {100 * avg['value']:.2f} +- {se} ({time.perf_counter() - t0:.0f} s)")
    return round(100 * avg["value"], 2), se


def gold_bpb(model, tokenizer, config: RecoveryBenchConfig, log, label: str) -> dict:
    """MBPP gold bits per byte on the first bpb_limit problems: {value, stderr, values (per problem)}."""
    t0 = time.perf_counter()
    result = run_accuracy(model, tokenizer, "mbpp_bpb", limit=config.bpb_limit, batch_size=1, source="local")
    r = result["tasks"]["mbpp_bpb"]
    log(f"  {label}: MBPP bits/byte {r['bpb']:.4f} +- {r['bpb_stderr']:.4f} ({time.perf_counter() - t0:.0f} s)")
    return {"value": round(r["bpb"], 4), "stderr": round(r["bpb_stderr"], 4), "values": r["bpb_per_example"]}


class RecoveryWorker:
    """The dense model, perplexity texts and training windows every row shares."""

    def __init__(self, config: RecoveryBenchConfig, log):
        if config.threads:
            torch.set_num_threads(config.threads)
        self.config, self.log = config, log
        self.rc = RecoveryConfig(steps=config.steps, seed=config.seed, **config.recovery)
        self.lm = lm = load_model(config.model, dtype="float32", device="cpu")
        self.texts = {n: text_prefix(load_text(n), lm.tokenizer, config.tokens) for n in DATASETS}
        docs, info = load_documents(config.data)
        self.data = data_for(self.rc, lm.tokenizer, docs, info)  # the same windows, in the same order, for every row
        self.machine = machine_label()
        for job in RECOVERY.jobs(config):  # a baseline's refusals (layer range, biases, target) before any row
            job.method.check(lm.model, job.sparsity)

    def run(self, job: RecoveryJob) -> Measured:
        config, log, lm, rc, texts, data = self.config, self.log, self.lm, self.rc, self.texts, self.data
        criterion, allocation, sparsity = job.criterion, job.allocation, job.sparsity
        t0 = time.perf_counter()
        settings = job.method.prune_settings(
            sparsity, criterion=criterion, allocation=allocation, samples=config.samples, seq_len=config.seq_len
        )
        pruned_result = prune(lm, settings)  # a sliced copy: the dense model serves every row
        plan, pruned = pruned_result.plan, pruned_result.model
        row = {**config.key(criterion, allocation, sparsity, job.method), "machine": self.machine}
        row["achieved_block_sparsity"] = round(plan.stats["achieved_block_sparsity"], 4)
        row["params_after"] = count_parameters(pruned)
        for name in DATASETS:
            row[f"ppl_{name}_before"] = round(
                evaluate_ppl(pruned, lm.tokenizer, texts[name], config.tokens, config.window)[0], 3
            )
        log(
            f"{criterion} {allocation} {sparsity}: before wt2 {row['ppl_wikitext2_before']} ptb {row['ppl_ptb_before']}"
        )
        if config.acc_limit:
            row["acc7_before"], row["acc7_before_stderr"] = acc7(pruned, lm.tokenizer, config, log, "before")
        bpb = {}
        if config.bpb_limit:
            bpb["before"] = gold_bpb(pruned, lm.tokenizer, config, log, "before")
        result = recover(
            pruned, data, rc, inplace=True, progress=lambda s: log(f"  {criterion} {sparsity}: {s.message}")
        )
        if not result.complete:
            return Measured(None, f"{criterion} {allocation} {sparsity}: {result.message}; row not written")
        for name in DATASETS:
            row[f"ppl_{name}_after"] = round(
                evaluate_ppl(result.model, lm.tokenizer, texts[name], config.tokens, config.window)[0], 3
            )
        if config.acc_limit:
            row["acc7_after"], row["acc7_after_stderr"] = acc7(result.model, lm.tokenizer, config, log, "after")
            row["acc_limit"] = config.acc_limit
        if config.bpb_limit:
            bpb["after"] = gold_bpb(result.model, lm.tokenizer, config, log, "after")
            for when, b in bpb.items():
                row[f"mbpp_bpb_{when}"], row[f"mbpp_bpb_{when}_stderr"] = b["value"], b["stderr"]
            row["bpb_limit"] = config.bpb_limit
        s = result.summary()
        row.update(
            heldout_before=round(s["heldout_before"], 4),
            heldout_after=round(s["heldout_after"], 4),
            tokens_trained=s["tokens_trained"],
            tokens_per_s=s["tokens_per_second"],
            train_seconds=s["train_seconds"],
            seconds=round(time.perf_counter() - t0, 1),
            lora=f"r{rc.r} a{rc.alpha:g} d{rc.dropout} lr{rc.lr:g} b{rc.batch_size}x{rc.seq_len}",
            finished_utc=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
            load_avg="/".join(f"{x:.1f}" for x in os.getloadavg()),
        )
        curve = {"train_loss": s["train_loss"], "heldout_loss": s["heldout_loss"], "data": s["data"]}
        if bpb:
            curve["mbpp_bpb_per_problem"] = {when: b["values"] for when, b in bpb.items()}
        message = (
            f"{criterion} {allocation} {sparsity}: wt2 {row['ppl_wikitext2_before']} -> {row['ppl_wikitext2_after']}, "
            f"ptb {row['ppl_ptb_before']} -> {row['ppl_ptb_after']} ({row['seconds']} s)"
        )
        return Measured(row, message, {f"curves/{row_name(row)}.json": json.dumps(curve, indent=1)})


def write_report(rows: list[dict], config: RecoveryBenchConfig) -> Path:
    """recovery.md (a table and the two questions answered from it) and recovery.png (loss curves)."""
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Recovery benchmark (LoRA after pruning)",
        "",
        f"Written by `python -m nirvana bench recovery --model {config.model} --steps {config.steps}`. "
        "Each pruned model is recovered with the same data, steps, seed and LoRA settings; perplexity on the first "
        f"{config.tokens} tokens of WikiText-2 test and PTB validation, 512-token windows. "
        "`acc7`: the seven zero-shot tasks' average of the paper's metric per task (acc for ARC-Easy, BoolQ, PIQA, "
        "WinoGrande; acc_norm for ARC-Challenge, HellaSwag, OpenBookQA), in percent, +- its standard error, on the "
        f"first {config.acc_limit or '-'} examples of each task (local data, lm-evaluation-harness); `-` where a row "
        "was measured without it. Scores come from "
        f"{config.samples} x {config.seq_len} WikiText-2 validation tokens, seed 0 (the `prune` command's default "
        "batch; the quality benchmark's candidate 0 is another draw, so its perplexities differ a little); "
        "gamma*, align 8. Training data: the same packed, seeded windows for every row.",
    ]
    if config.note:
        lines += ["", config.note]
    lines += [
        "",
        "| criterion | allocation | sparsity | WT2 before | WT2 after | PTB before | PTB after | held-out loss | "
        "tokens | tok/s | acc7 before | acc7 after | MBPP bits/byte before | after |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['criterion']} | {r['allocation']} | {r['sparsity']} | {r['ppl_wikitext2_before']} | "
            f"{r['ppl_wikitext2_after']} | {r['ppl_ptb_before']} | {r['ppl_ptb_after']} | "
            f"{r['heldout_before']} -> {r['heldout_after']} | {r['tokens_trained']} | {r['tokens_per_s']} | "
            f"{acc7_text(r, 'acc7_before')} | {acc7_text(r, 'acc7_after')} | "
            f"{acc7_text(r, 'mbpp_bpb_before')} | {acc7_text(r, 'mbpp_bpb_after')} |"
        )
    lines += ["", *rankings(rows), *bpb_lines(rows, out)]
    if rows:
        lines += ["", f"Machine: {rows[-1]['machine']}. Row time and the load average (1/5/15 min) at its end:", ""]
        lines += [f"- {row_name(r)}: {r['seconds']} s, load {r['load_avg']}" for r in rows]
    md = out / "recovery.md"
    md.write_text("\n".join(lines) + "\n")
    plot_curves(rows, out)
    return md


def bpb_lines(rows: list[dict], out: Path) -> list[str]:
    """Gold BPB differences paired by problem: each row after − before, and NIRVANA − Taylor after, per sparsity."""
    per = {}
    for r in rows:
        path = out / "curves" / f"{row_name(r)}.json"
        if r.get("mbpp_bpb_after") and path.exists():
            per[(r["criterion"], r["allocation"], float(r["sparsity"]))] = json.loads(path.read_text()).get(
                "mbpp_bpb_per_problem", {}
            )
    if not per:
        return []
    lines = ["", "MBPP gold bits per byte, differences paired by problem (mean ± se; negative = lower = better):", ""]
    for (criterion, allocation, sparsity), v in per.items():
        if "before" in v and "after" in v:
            d = paired_difference(v["after"], v["before"])
            lines.append(
                f"- {criterion} {allocation} {sparsity:g}: after − before {d['mean']:+.4f} ± {d['stderr']:.4f}"
            )
    for sparsity in sorted({k[2] for k in per}):
        a, b = per.get(("nirvana", "global", sparsity), {}), per.get(("taylor", "global", sparsity), {})
        for when in ("before", "after"):
            if when in a and when in b:
                d = paired_difference(a[when], b[when])
                lines.append(f"- sparsity {sparsity:g}, NIRVANA − Taylor {when}: {d['mean']:+.4f} ± {d['stderr']:.4f}")
    return lines


def acc7_text(row: dict, column: str) -> str:
    """A measured column of a row as 'value +- stderr' (`acc7_*`: percent; `mbpp_bpb_*`: bits/byte), or '-'."""
    if not row.get(column):
        return "-"
    se = row.get(f"{column}_stderr")
    return f"{row[column]} +- {se}" if se else str(row[column])


def rankings(rows: list[dict]) -> list[str]:
    """Per sparsity: the order of criteria by WikiText-2 perplexity (lower first) before and after
    recovery, and by acc7 (higher first) where every row of that sparsity has it."""
    out = []
    for sparsity in sorted({r["sparsity"] for r in rows}, key=float):
        group = [r for r in rows if r["sparsity"] == sparsity]

        def order(column, sign=1.0, sep=" < "):
            return sep.join(f"{r['criterion']}" for r in sorted(group, key=lambda r: sign * float(r[column])))

        line = (
            f"- sparsity {sparsity}: WikiText-2 ranking before `{order('ppl_wikitext2_before')}`, "
            f"after `{order('ppl_wikitext2_after')}`"
        )
        if all(r.get("acc7_before") and r.get("acc7_after") for r in group):
            line += (
                f"; acc7 ranking (best first) before `{order('acc7_before', -1.0, ' > ')}`, "
                f"after `{order('acc7_after', -1.0, ' > ')}`"
            )
        out.append(line)
    return out


def plot_curves(rows: list[dict], out: Path) -> Path | None:
    # here, not at the top: matplotlib only draws benchmark plots (Agg is chosen before pyplot)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in rows:
        path = out / "curves" / f"{row_name(r)}.json"
        if not path.exists():
            continue
        c = json.loads(path.read_text())
        label = f"{r['criterion']} ({r['allocation']}) {r['sparsity']}"
        style = "-" if float(r["sparsity"]) >= 0.5 else "--"
        if c["train_loss"]:
            axes[0].plot(*zip(*c["train_loss"]), style, label=label)
        axes[1].plot(*zip(*c["heldout_loss"]), style + "o", label=label, markersize=3)
    axes[0].set(title="training loss", xlabel="step", ylabel="loss")
    axes[1].set(title="held-out loss (WikiText-2 validation tail)", xlabel="step", ylabel="loss")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    png = out / "recovery.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
