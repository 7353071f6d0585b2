"""Quality benchmark: perplexity and KL to dense for every criterion, allocation and sparsity.

    python -m nirvana bench quality --model smollm2-135m [--tokens 16384] [--candidates 4]

Grid: criteria (nirvana, magnitude, random, taylor, wanda) x sparsities (0.1, 0.2, 0.3, 0.5)
with global + gamma allocation; uniform allocation for `--uniform-criteria` (default: all five);
KL-guided calibration (K = `--candidates`) for `--select-criteria` (default: the data-driven
ones, nirvana, taylor and wanda; magnitude and random never see calibration data). Every row:
achieved sparsity, KL(P_dense || P_pruned) on the anchor set, perplexity on WikiText-2 test and
PTB validation (first `--tokens` tokens of each, 512-token windows).

Cost decisions (the whole grid must fit a 2-core CPU):
- Scores do not depend on sparsity or allocation: each (criterion, calibration seed) is scored
  once (disk cache) and re-allocated for every row.
- Every data-driven criterion calibrates on candidate seed 0, drawn away from the KL anchor's
  documents, so the plain NIRVANA row *is* candidate 0 of the KL selection: the selection adds
  K - 1 scorings and their rows, and "KL-selected" is the candidate with the lowest anchor KL.
- Dense log-probs on the anchor are computed once (`DenseReference`), dense perplexities once.
- Rows are written to the CSV as they finish (`nirvana.bench.base`); a rerun skips rows already present.
The markdown report, plots and ablations (`nirvana.bench.quality_report`) are rebuilt from the
CSV at the end, or alone with `--report-only`.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from nirvana.bench.base import Benchmark, Measured
from nirvana.bench.environment import machine_label
from nirvana.bench.methods import NIRVANA, MethodChoice
from nirvana.bench.quality_config import COLUMNS, KEY, QualityConfig
from nirvana.bench.quality_report import write_report
from nirvana.bench.rows import read_rows, row_key
from nirvana.checkpoints.loading import load_model
from nirvana.data.text import load_text
from nirvana.measure.kl import DenseReference, kl_to_dense
from nirvana.measure.perplexity import perplexity
from nirvana.models.shapes import count_parameters, model_shape
from nirvana.scoring.criteria import CRITERIA
from nirvana.search.calibration import anchor_batch, candidate_batch


@dataclass(frozen=True)
class QualityJob:
    """One row of the grid; the settings every row shares (data sizes, anchor) are the config's."""

    model: str  # registry name, Hugging Face id or local folder
    criterion: str  # or "dense"
    allocation: str  # "global" | "uniform" | "-" (dense)
    calib_seed: int | None  # None for data-free criteria and dense
    sparsity: float
    method: MethodChoice = NIRVANA  # a baseline: criterion is its name, allocation "method"


def plan_jobs(config: QualityConfig) -> list[QualityJob]:
    """Rows in priority order, so that a run cut short still answers the main questions.

    Dense first; then, for the two "headline" sparsities (the first half of the list sorted by
    interest: 0.2 and 0.5 by default), every criterion with global allocation, the uniform rows
    and the extra KL-selection candidates; then the same for the remaining sparsities.
    """

    def seed0(c):
        return 0 if CRITERIA[c].needs_data else None

    order = sorted(config.sparsities, key=lambda s: (s not in (0.2, 0.5), s))
    half = max(1, len(order) // 2)
    job = partial(QualityJob, config.model)
    jobs = [job("dense", "-", None, 0.0)]
    choice = MethodChoice.of(config.method, config.method_settings)
    if not choice.has_allocation_settings:  # a baseline: no criteria, allocations or KL selection; a row per sparsity
        return jobs + [job(choice.method, "method", 0, s, choice) for s in order]
    for group in (order[:half], order[half:]):
        jobs += [job(c, "global", seed0(c), s) for s in group for c in config.criteria]
        jobs += [job(c, "uniform", seed0(c), s) for s in group for c in config.uniform_criteria]
        for c in config.select_criteria:
            if CRITERIA[c].needs_data:
                jobs += [job(c, "global", k, s) for s in group for k in range(1, config.candidates)]
    return jobs


def _fmt_key(config: QualityConfig, job: QualityJob) -> dict:
    return {
        "model": job.model,
        "criterion": job.criterion,
        "allocation": job.allocation,
        "calib_seed": "" if job.calib_seed is None else job.calib_seed,
        "sparsity": job.sparsity,
        "token_budget": config.tokens,
        "anchor": config.anchor_label,
        **({"method": "", "method_settings": ""} if job.criterion == "dense" else job.method.cells()),
    }


class QualityBench(Benchmark):
    """The grid on the shared runner (`nirvana.bench.base`); the report is rebuilt at the end."""

    name = "quality"
    columns, key_columns = COLUMNS, KEY

    def jobs(self, config: QualityConfig) -> list[QualityJob]:
        return plan_jobs(config)

    def key(self, config: QualityConfig, job: QualityJob) -> tuple[str, ...]:
        return row_key(_fmt_key(config, job), KEY)

    def label(self, job: QualityJob) -> str:
        return f"{job.criterion} {job.allocation} {job.sparsity}"

    def worker(self, config: QualityConfig, log) -> QualityWorker:
        return QualityWorker(config, log)

    def committed(self, config: QualityConfig) -> list[dict]:
        """The CSV rows of `config`'s grid (a CSV may hold rows of other grids, e.g. other budgets)."""
        keys = {self.key(config, j) for j in plan_jobs(config)}
        return [r for r in read_rows(config.csv_path) if row_key(r, KEY) in keys]

    def report(self, rows: list[dict], config: QualityConfig) -> tuple[Path, str]:
        return write_report(rows, config)


QUALITY = QualityBench()


class QualityWorker:
    """Holds the model, anchor, dense reference and per-(criterion, seed) scores across rows."""

    def __init__(self, config: QualityConfig, log):

        self.config, self.log = config, log
        self.lm = load_model(config.model, dtype="float32")
        self.shape = model_shape(self.lm.model)
        self.anchor = anchor_batch(self.lm.tokenizer, config.anchor)
        self._reference = None
        self._scores: dict[tuple, object] = {}
        # Tokenizing all of WikiText-2 test takes ~2 s; each row needs only the first `tokens` tokens.
        self.texts = {name: text_prefix(load_text(name), self.lm.tokenizer, config.tokens) for name in config.datasets}
        self.machine = machine_label()
        choice = MethodChoice.of(config.method, config.method_settings)
        for s in config.sparsities:  # a baseline's refusals (layer range, biases, reachable target) before any row
            choice.check(self.lm.model, s)

    @property
    def reference(self):

        if self._reference is None:
            t = time.perf_counter()
            ids = self.anchor.input_ids[: self.config.kl_sequences or None]  # [M, T]
            self._reference = DenseReference(self.lm.model, ids)
            self.log(f"dense anchor log-probs: {time.perf_counter() - t:.0f} s")
        return self._reference

    def scores(self, criterion: str, seed: int | None, method: MethodChoice = NIRVANA):

        key = (criterion, seed, method)
        if key not in self._scores:
            batch = None
            if seed is not None:
                c = self.config
                batch = candidate_batch(
                    self.lm.tokenizer, self.anchor, source=c.pool, samples=c.samples, seq_len=c.seq_len, seed=seed
                )
            t = time.perf_counter()
            self._scores[key] = method.source(self.lm, method.scoring(criterion, seed=seed or 0), batch)
            hit = getattr(self._scores[key], "meta", {}).get("cache_hit")  # a rotating method's is its batch
            self.log(f"{criterion} scores (seed {seed}): {'cache' if hit else f'{time.perf_counter() - t:.0f} s'}")
        return self._scores[key]

    def perplexities(self, model) -> dict:
        out = {}
        for name in self.config.datasets:
            result = evaluate_ppl(model, self.lm.tokenizer, self.texts[name], self.config.tokens, self.config.window)
            out[f"ppl_{name}"], out[f"tokens_{name}"] = result
        return out

    def run(self, job: QualityJob) -> Measured:

        t = time.perf_counter()
        c = self.config
        row = {**_fmt_key(c, job), "window": c.window, "machine": self.machine}
        if job.criterion == "dense":
            row.update(self.perplexities(self.lm.model))
            row.update(
                kl=0.0,
                achieved_block_sparsity=0.0,
                total_param_reduction=0.0,
                params_after=count_parameters(self.lm.model),
                gamma="",
            )
        else:
            scores = self.scores(job.criterion, job.calib_seed, job.method)

            def measure(pruned):
                quality = {"kl": kl_to_dense(pruned, self.reference), **self.perplexities(pruned)}
                return quality, count_parameters(pruned)

            allocation = {"gamma": c.gamma, "align": c.align, "allocation": job.allocation}
            plan, pruned = job.method.slice(self.lm.model, scores, job.sparsity, self.shape, **allocation)
            measured, params_after = measure(pruned)
            del pruned
            gamma = job.method.gamma_cell(plan)
            row.update(measured)
            row.update(
                gamma=gamma,
                achieved_block_sparsity=round(plan.stats["achieved_block_sparsity"], 4),
                total_param_reduction=round(1 - params_after / self.shape.total_params, 4),
                params_after=params_after,
            )
        row["seconds"] = round(time.perf_counter() - t, 1)
        row["finished_utc"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        short = {"wikitext2": "wt2"}
        ppl = " ".join(f"{short.get(name, name)} {float(row[f'ppl_{name}']):.2f}" for name in c.datasets)
        message = (
            f"{job.criterion} {job.allocation} seed={job.calib_seed} s={job.sparsity}: KL {float(row['kl']):.4f}, "
            f"ppl {ppl} ({row['seconds']} s)"
        )
        return Measured(row, message)


def text_prefix(text, tokenizer, tokens: int, margin: int = 64):
    """The shortest prefix of `text.documents` with at least `tokens + margin` tokens, as a `Text`.

    Its first `tokens` tokens equal those of the whole text: BPE only differs near the cut, and
    the margin keeps the cut past every window `perplexity(max_tokens=tokens)` takes.
    """

    docs, chars = [], 0
    for i, doc in enumerate(text.documents):
        docs.append(doc)
        chars += len(doc) + 2
        if chars >= 3 * (tokens + margin) or i == len(text.documents) - 1:
            n = len(tokenizer("\n\n".join(docs), add_special_tokens=False)["input_ids"])
            if n >= tokens + margin:
                break
            chars = n  # grow again from the measured count (about 3+ characters per token)
    return replace(text, documents=docs)


def evaluate_ppl(model, tokenizer, dataset, tokens: int, window: int) -> tuple[float, int]:
    """(perplexity, tokens evaluated) on the first `tokens` tokens of `dataset`, `window`-token windows."""

    result = perplexity(model, tokenizer, dataset, seq_len=window, max_tokens=tokens)
    return float(result.ppl), int(result.tokens)
