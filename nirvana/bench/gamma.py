"""Gamma benchmark (beyond the paper): is the analytic gamma* the best MLP/attention split?

    python -m nirvana bench gamma --model smollm2-135m [--criteria nirvana,taylor] [--sparsities 0.1,0.2,0.3,0.5]

For every criterion and sparsity, KL(P_dense || P_pruned) on the anchor set over a grid of gamma
values (`nirvana.search.gamma`: one allocation, slice and anchor forward per point, no new
scores). Scores use calibration seed 0 drawn away from the anchor, the same batch as
`bench quality` and `gamma-search`, so they come from the score cache when those ran before.
Writes `benchmarks/gamma/gamma-<model>.json`, `.md` and `.png`. On the shared runner
(`nirvana.bench.base`) a job is one criterion's whole search; the JSON is written when all are done.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from pathlib import Path

from nirvana.bench.base import Benchmark, Measured, run
from nirvana.bench.environment import machine_label
from nirvana.bench.methods import nirvana_only
from nirvana.checkpoints.loading import load_model
from nirvana.errors import InvalidInput
from nirvana.measure.kl import DenseReference
from nirvana.measure.paired import paired_text
from nirvana.models.shapes import model_shape
from nirvana.pipeline import score, scoring
from nirvana.pruning.allocation import default_gamma
from nirvana.scoring.criteria import CRITERIA
from nirvana.search.calibration import AnchorSpec, anchor_batch, candidate_batch
from nirvana.search.gamma import gamma_grid, gamma_search
from nirvana.store.paths import benchmarks_dir

DEFAULT_OUT = benchmarks_dir("gamma")  # the checkout's benchmarks/gamma; ./benchmarks/gamma when installed
GAMMAS = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0)


@dataclass(frozen=True)
class GammaBenchConfig:
    """The grid: criteria x sparsities x gammas (gamma* is always added), and the data sizes."""

    model: str = "smollm2-135m"
    criteria: tuple[str, ...] = ("nirvana", "taylor")
    sparsities: tuple[float, ...] = (0.1, 0.2, 0.3, 0.5)
    gammas: tuple[float, ...] = GAMMAS
    samples: int = 32
    seq_len: int = 128
    anchor_samples: int = AnchorSpec.samples
    anchor_seq_len: int = AnchorSpec.seq_len
    out_dir: Path = DEFAULT_OUT
    method: str = "nirvana"  # gamma is NIRVANA's split: a baseline is refused (nirvana.bench.methods)
    method_settings: dict | None = None

    def __post_init__(self) -> None:
        nirvana_only("gamma", "KL to dense over a grid of gamma (NIRVANA's attention / MLP split)", self.method)
        unknown = [c for c in self.criteria if c not in CRITERIA]
        if unknown:
            raise InvalidInput(f"unknown criteria {unknown}; accepted: {', '.join(CRITERIA)}.")
        if not self.criteria:
            raise InvalidInput(f"name at least one criterion to search gamma for; accepted: {', '.join(CRITERIA)}.")


@dataclass(frozen=True)
class GammaJob:
    """One criterion's gamma search on `model` (the sparsities, gammas and data sizes are the config's)."""

    model: str
    criterion: str


class GammaBench(Benchmark):
    name = "gamma"  # no CSV to resume: every job runs, and `run_gamma_bench` builds the JSON

    def jobs(self, config: GammaBenchConfig) -> list[GammaJob]:
        return [GammaJob(config.model, c) for c in config.criteria]

    def key(self, config: GammaBenchConfig, job: GammaJob) -> tuple[str, ...]:
        return (job.model, job.criterion)

    def label(self, job: GammaJob) -> str:
        return job.criterion

    def worker(self, config: GammaBenchConfig, log) -> GammaWorker:
        return GammaWorker(config, log)


GAMMA = GammaBench()


def anchor_spec(config: GammaBenchConfig) -> AnchorSpec:
    return AnchorSpec(samples=config.anchor_samples, seq_len=config.anchor_seq_len)


class GammaWorker:
    """The model, anchor, dense reference and gamma grid every criterion's search shares."""

    def __init__(self, config: GammaBenchConfig, log):
        self.config, self.log = config, log
        self.lm = lm = load_model(config.model, dtype="float32")
        self.anchor = anchor_batch(lm.tokenizer, anchor_spec(config))
        self.reference = DenseReference(lm.model, self.anchor.input_ids)
        self.grid = gamma_grid(model_shape(lm.model), [*config.gammas, round(default_gamma(model_shape(lm.model)), 4)])

    def run(self, job: GammaJob) -> Measured:
        config, lm, log, criterion = self.config, self.lm, self.log, job.criterion
        anchor, spec, reference, grid = self.anchor, anchor_spec(config), self.reference, self.grid
        batch = None
        if CRITERIA[criterion].needs_data:
            batch = candidate_batch(
                lm.tokenizer, anchor, source=spec.source, samples=config.samples, seq_len=config.seq_len, seed=0
            )
        t = time.perf_counter()
        scores = score(lm, scoring(criterion), batch=batch)[0]
        log(f"{criterion} scores: {'cache' if scores.meta.get('cache_hit') else f'{time.perf_counter() - t:.0f} s'}")
        result = gamma_search(
            lm.model,
            scores,
            reference,
            gammas=grid,
            sparsities=config.sparsities,
            progress=lambda f, m, c=criterion: log(f"{c} [{f:.0%}] {m}"),
        )
        row = {"criterion": criterion, "gammas": grid, "gamma_default": result.gamma_default}
        return Measured({**row, "result": result.to_dict()}, f"{criterion}: {len(result.points)} points")


def run_gamma_bench(config: GammaBenchConfig, log, cluster=None) -> dict:
    """Every criterion's search (`GAMMA` jobs; on `cluster`, one Ray task each), gathered into the
    JSON `write_outputs` writes."""
    start = time.perf_counter()
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    rows = run(GAMMA, config, log, cluster=cluster)
    spec = anchor_spec(config)
    return {
        "model": config.model,
        "machine": machine_label(),
        "started_utc": started,
        "anchor": f"{spec.source}:{spec.samples}x{spec.seq_len}:seed{spec.seed}",
        "calibration": f"{config.samples}x{config.seq_len} from {spec.source}, seed 0",
        "gammas": rows[0]["gammas"],
        "criteria": {r["criterion"]: r["result"] for r in rows},
        "gamma_default": rows[-1]["gamma_default"],
        "seconds": round(time.perf_counter() - start, 1),
    }


def kl_at(points, sparsity: float, gamma: float) -> float | None:
    """The measured KL of (sparsity, gamma) among a search's points, or None when not on the grid."""
    return next((p["kl"] for p in points if p["sparsity"] == sparsity and p["gamma"] == gamma), None)


def markdown_report(data: dict) -> str:
    g_star = data["gamma_default"]
    lines = [
        f"# Gamma benchmark: {data['model']}",
        "",
        f"- Run: {data['started_utc']} UTC, {data['seconds'] / 60:.0f} min; machine: {data['machine']}",
        f"- KL(P_dense || P_pruned), mean nats per token on the anchor {data['anchor']} (disjoint from the "
        f"calibration batch, {data['calibration']}); global allocation, align 8",
        f"- gamma* (analytic) = {g_star:.4g}; gamma = share of neurons pruned / share of KV groups pruned",
        "",
    ]
    for criterion, result in data["criteria"].items():
        points = result["points"]
        sparsities = sorted({p["sparsity"] for p in points})
        lines += [
            f"## {criterion}",
            "",
            "| gamma | " + " | ".join(f"KL at {s:g}" for s in sparsities) + " |",
            "|---:|" + "---:|" * len(sparsities),
        ]
        for gamma in data["gammas"]:
            cells = []
            for s in sparsities:
                kl = kl_at(points, s, gamma)
                best = result["best"][str(s)]["gamma"] == gamma
                cells.append("" if kl is None else (f"**{kl:.4f}**" if best else f"{kl:.4f}"))
            label = f"{gamma:g}" + (" (gamma*)" if abs(gamma - round(g_star, 4)) < 1e-9 else "")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
        for s in sparsities:
            best = result["best"][str(s)]
            at_star = kl_at(points, s, round(g_star, 4))
            if at_star:
                cut = 100 * (1 - best["kl"] / at_star)
                pair = best.get("vs_default")  # absent from runs before paired differences were kept
                paired = f"; paired over {pair['n']} anchor sequences {paired_text(pair)}" if pair else ""
                lines.append(
                    f"- sparsity {s:g}: best gamma {best['gamma']:g} (KL {best['kl']:.4f}), {cut:.1f}% below "
                    f"gamma*{paired}"
                )
        lines.append("")
    return "\n".join(lines)


def plot_report(data: dict, path: Path) -> None:
    # here, not at the top: matplotlib only draws benchmark plots (Agg is chosen before pyplot)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    criteria = list(data["criteria"])
    fig, axes = plt.subplots(1, len(criteria), figsize=(6 * len(criteria), 4.5), squeeze=False)
    for ax, criterion in zip(axes[0], criteria):
        points = data["criteria"][criterion]["points"]
        for s in sorted({p["sparsity"] for p in points}):
            pts = sorted((p["gamma"], p["kl"]) for p in points if p["sparsity"] == s)
            ax.plot(*zip(*pts), marker="o", label=f"sparsity {s:g}")
        ax.axvline(data["gamma_default"], color="black", linestyle=":", label="gamma*")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("gamma (share of neurons pruned / share of KV groups pruned)")
        ax.set_ylabel("KL to dense (nats/token)")
        ax.set_title(f"{data['model']}: {criterion}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(data: dict, out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = output_paths(data["model"], out_dir)
    paths[0].write_text(json.dumps(data, indent=1) + "\n")
    paths[1].write_text(markdown_report(data))
    plot_report(data, paths[2])
    return paths


def gamma_path(model: str, directory: Path | None = None) -> Path:
    return Path(directory or DEFAULT_OUT) / f"gamma-{model.replace('/', '_')}.json"


def output_paths(model: str, directory: Path | None = None) -> list[Path]:
    """JSON, markdown and PNG of one model (string suffixes: a name like Qwen2.5-7B has a dot)."""
    json_path = gamma_path(model, directory)
    base = str(json_path)[: -len(".json")]
    return [json_path, Path(base + ".md"), Path(base + ".png")]


def committed_gamma(model: str, directory: Path | None = None) -> dict | None:
    """The committed gamma benchmark of `model`, or None when there is none."""
    path = gamma_path(model, directory)
    return json.loads(path.read_text()) if path.exists() else None
