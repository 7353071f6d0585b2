"""What the quality grid is: its criteria, sparsities, datasets, CSV columns and settings.

Shared by the runner (`nirvana.bench.quality`) and the report (`nirvana.bench.quality_report`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nirvana.bench.methods import METHOD_COLUMNS
from nirvana.scoring.criteria import CRITERIA, DEFAULT_CRITERION
from nirvana.search.calibration import AnchorSpec
from nirvana.store.paths import benchmarks_dir

# The grid's order: the paper's criterion, then the baselines alphabetically (rows, plots, report).
GRID_CRITERIA = tuple(sorted(CRITERIA, key=lambda name: (name != DEFAULT_CRITERION, name)))
DATA_DRIVEN = tuple(c for c in GRID_CRITERIA if CRITERIA[c].needs_data)  # scores depend on calibration data
SPARSITIES = (0.1, 0.2, 0.3, 0.5)
DATASETS = ("wikitext2", "ptb")
DEFAULT_OUT = benchmarks_dir("quality")  # the checkout's benchmarks/quality; ./benchmarks/quality when installed
COLUMNS = (
    "model",
    "criterion",
    "method",
    "method_settings",
    "allocation",
    "calib_seed",
    "sparsity",
    "gamma",
    "achieved_block_sparsity",
    "total_param_reduction",
    "params_after",
    "kl",
    "ppl_wikitext2",
    "ppl_ptb",
    "tokens_wikitext2",
    "tokens_ptb",
    "token_budget",
    "window",
    "anchor",
    "seconds",
    "finished_utc",
    "machine",
)
KEY = ("model", "criterion", "allocation", "calib_seed", "sparsity", "token_budget", "anchor", *METHOD_COLUMNS)


@dataclass
class QualityConfig:
    model: str = "smollm2-135m"
    criteria: tuple[str, ...] = GRID_CRITERIA
    sparsities: tuple[float, ...] = SPARSITIES
    uniform_criteria: tuple[str, ...] = GRID_CRITERIA
    select_criteria: tuple[str, ...] = DATA_DRIVEN
    candidates: int = 4
    tokens: int = 16384  # per dataset
    window: int = 512
    samples: int = 32
    seq_len: int = 128
    pool: str = "wikitext2-valid"
    anchor: AnchorSpec = field(default_factory=AnchorSpec)
    # KL on the first `kl_sequences` anchor sequences only (None: all). The anchor is still drawn
    # in full, so candidate batches (and their cached scores) are those of `select-calib`.
    kl_sequences: int | None = None
    gamma: float | None = None  # None: the analytic gamma*
    align: int = 8
    datasets: tuple[str, ...] = DATASETS
    out_dir: Path = DEFAULT_OUT
    note: str = ""  # free text for the report header (e.g. why the budget was reduced)
    # The pruned rows' method: NIRVANA's grid of criteria, or one baseline at every sparsity
    # (criterion = the method's name, allocation "method": its own; nirvana.bench.methods).
    method: str = "nirvana"
    method_settings: dict | None = None

    @property
    def anchor_label(self) -> str:
        a = self.anchor
        used = f":first{self.kl_sequences}" if self.kl_sequences and self.kl_sequences < a.samples else ""
        return f"{a.source}:{a.samples}x{a.seq_len}:seed{a.seed}{used}"

    @property
    def plot_prefix(self) -> str:
        """`quality` for the analytic-gamma run; `quality-gamma4` etc. for a fixed gamma (plots stay apart)."""
        return "quality" if self.gamma is None else f"quality-gamma{self.gamma:g}"

    @property
    def csv_path(self) -> Path:
        """One CSV per model; a fixed `--gamma` gets its own file (rows are keyed without gamma)."""
        suffix = "" if self.gamma is None else f"-gamma{self.gamma:g}"
        return Path(self.out_dir) / f"quality-{self.model.replace('/', '_')}{suffix}.csv"
