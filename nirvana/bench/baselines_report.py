"""Markdown and plot of the baselines benchmark (`nirvana.bench.baselines`), rebuilt from its CSV.

Laid out like the paper's table: one line per method and sparsity, the metrics as columns
(perplexities, LAMBADA, the seven zero-shot tasks and their average with +- one standard error,
MBPP pass@1 and gold bits per byte), then the gold-BPB differences paired by problem (NIRVANA
against each baseline), then a second table of parameters, speed, memory and pruning time. A pruned row whose
achieved block-parameter sparsity is more than 1% of the block parameters from its target is
flagged "not matched"; one whose measured speed-up over dense is more than 1.1x its ideal is flagged
"disturbed" (`speed_flag`: the machine was busy while one of the two was timed; not a result). The
loss-Taylor and Wanda-style ablations (NIRVANA's global allocation with another criterion) are read from
the committed quality and accuracy grids, labelled as such.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from nirvana.accuracy.tasks import ZEROSHOT7
from nirvana.bench.accuracy_report import BPB_SHORT, BPB_TASKS, SHORT, pass_text, plus_minus, summarize
from nirvana.bench.per_problem import paired_between, read_per_problem
from nirvana.bench.rows import number, read_rows
from nirvana.measure.paired import paired_text
from nirvana.measure.speed_check import DISTURBED, MESSAGES, TOLERANCE, judge
from nirvana.methods import METHODS, is_baseline
from nirvana.pipeline import DEFAULT_CALIBRATION
from nirvana.store.atomic import atomic_write_text
from nirvana.store.paths import benchmarks_dir

ABLATIONS = (("taylor", "global"), ("wanda", "global"))  # criteria with NIRVANA's allocation, read from the grids
MATCH_TOLERANCE = 0.01  # matched: achieved block-parameter sparsity within 1% of the block parameters of the target
QUALITY_DIR = benchmarks_dir("quality")
ACCURACY_DIR = benchmarks_dir("accuracy")
CODE_TASKS = {"mbpp": "MBPP", "humaneval": "HumanEval"}  # the pass@1 tasks, as the tables name them


SPEED_KEYS = (
    "ppl_wikitext2",
    "ppl_ptb",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "prefill_tokens_per_cpu_s",
    "decode_tokens_per_cpu_s",
    "peak_memory_bytes",
)


def matched(row: dict, tolerance: float = MATCH_TOLERANCE) -> bool | None:
    """Whether a pruned row's achieved block parameters match its target within `tolerance` of the dense
    block parameters (None for dense or a row without the counts)."""
    if row.get("method") == "dense":
        return None
    target, achieved = number(row.get("target_sparsity")), number(row.get("achieved_block_param_sparsity"))
    if target is None or achieved is None:
        return None
    return abs(achieved - target) <= tolerance + 1e-12


SPEED_FIGURES = (  # (label, key): the speeds a row's speed-ups over dense are taken from
    ("prefill", "prefill_tokens_per_s"),
    ("decode", "decode_tokens_per_s"),
    ("prefill per CPU-s", "prefill_tokens_per_cpu_s"),
    ("decode per CPU-s", "decode_tokens_per_cpu_s"),
)


def speed_ideal(row: dict) -> float | None:
    """The most a pruned row's speed-up can be: the larger of dense / pruned block parameters and dense / pruned
    parameters (None without the counts). Block parameters bound the FLOPs ideal from above when only the blocks
    are pruned (the LM head and the attention over the context, left out, pull the FLOPs ratio towards 1); all
    parameters take over when the residual stream is sliced too (SliceGPT: a narrower LM head)."""
    ratios = []
    for before, after in (("block_params_before", "block_params_after"), ("params_before", "params_after")):
        b, a = number(row.get(before)), number(row.get(after))
        if b and a:
            ratios.append(b / a)
    return max(ratios) if ratios else None


def speed_flag(row: dict, dense: dict, tolerance: float = TOLERANCE) -> dict | None:
    """A pruned row's measured speed-ups over the dense row, judged against `speed_ideal`: {"ideal", "speedups":
    {label: pruned / dense speed}, "disturbed": bool}; None for the dense row or a row without speeds or counts.

    The benchmark timed each model on its own (not interleaved), and only medians are kept, so every speed-up is
    one figure (`nirvana.measure.speed_check.judge`): the row is disturbed when any of them (prefill or decode,
    wall time or per CPU second, where both rows have it) is more than `tolerance` (1.1) x the ideal.

        >>> dense = {"method": "dense", "prefill_tokens_per_s": "92.2", "decode_tokens_per_s": "5.52"}
        >>> flap = {"method": "flap", "prefill_tokens_per_s": "405.6", "decode_tokens_per_s": "18.67",
        ...         "block_params_before": "106168320", "block_params_after": "84968064"}
        >>> speed_flag(flap, dense)["disturbed"]  # 4.4x against an ideal of 1.25x
        True
    """
    ideal = speed_ideal(row)
    if row.get("method") == "dense" or ideal is None:
        return None
    speedups = {}
    for label, key in SPEED_FIGURES:
        pruned, base = number(row.get(key)), number(dense.get(key))
        if pruned and base:
            speedups[label] = pruned / base
    if not speedups:
        return None
    disturbed = any(judge([x], ideal, tolerance).verdict == DISTURBED for x in speedups.values())
    return {"ideal": ideal, "speedups": speedups, "disturbed": disturbed}


def _speed_cells(v: dict, dense: dict | None) -> list[str]:
    """The table's "speed-up vs dense" and "ideal" cells of one variant."""
    if v.get("method") == "dense":
        return ["reference", "1.00"]
    flag = speed_flag(v, dense) if dense is not None else None
    if flag is None:
        return ["-", _num(speed_ideal(v))]
    if flag["disturbed"]:
        return ["**disturbed**: re-measure", f"{flag['ideal']:.2f}"]
    wall = [flag["speedups"].get(phase) for phase in ("prefill", "decode")]
    return [" / ".join("-" if x is None else f"{x:.2f}" for x in wall), f"{flag['ideal']:.2f}"]


def variants(rows: list[dict]) -> list[dict]:
    """One entry per variant (CSV order): facts, perplexities, tasks {task: (value, se, n)}, average, ..."""
    by: dict[str, dict] = {}
    for r in rows:
        v = by.setdefault(r["variant"], {"variant": r["variant"], "tasks": {}, "seconds": {}})
        for k in (
            "method",
            "sparsity",
            "gamma",
            "method_settings",
            "params_before",
            "params_after",
            "block_params_before",
            "block_params_after",
            "target_sparsity",
            "achieved_block_sparsity",
            "achieved_block_param_sparsity",
            "added_bias_params",
            "prune_seconds",
        ):
            if r.get(k) not in (None, "") and k not in v:
                v[k] = r[k]
        if "matched" not in v:
            v["matched"] = matched(r)
        measure = r["measure"]
        v["seconds"][measure] = number(r.get("seconds"))
        if r.get("resumed_completions") not in (None, "", "0", 0):  # the time covers only what this run generated
            v.setdefault("resumed", {})[measure] = int(float(r["resumed_completions"]))
        if measure == "ppl":
            for k in SPEED_KEYS:
                v[k] = number(r.get(k))
            v["load"] = number(r.get("load_avg_1min"))
        elif measure in ZEROSHOT7:
            v["tasks"][measure] = (number(r["acc"]), number(r["acc_stderr"]), int(float(r["n"] or 0)))
        elif measure == "lambada_openai":
            v["lambada"] = (number(r["acc"]), number(r["acc_stderr"]), number(r["perplexity"]))
        elif measure in ("mbpp", "humaneval"):
            v[measure] = (number(r["pass_at_1"]), number(r["pass_at_1_stderr"]), int(float(r["n"] or r["limit"])))
        elif measure in BPB_TASKS:
            n = int(float(r["n"] or 0))
            v.setdefault("bpb", {})[measure] = (number(r.get("bpb")), number(r.get("bpb_stderr")), n)
    for v in by.values():
        _average(v)
    return list(by.values())


def _average(v: dict) -> None:
    t = v["tasks"]
    if all(k in t and t[k][0] is not None for k in ZEROSHOT7):
        v["average"] = sum(t[k][0] for k in ZEROSHOT7) / 7
        ses = [t[k][1] for k in ZEROSHOT7]
        v["average_se"] = math.sqrt(sum(s * s for s in ses)) / 7 if all(s is not None for s in ses) else None


def ablations(
    model: str, sparsities=(0.2, 0.5), quality_dir: Path = QUALITY_DIR, accuracy_dir: Path = ACCURACY_DIR
) -> list[dict]:
    """The Taylor / Wanda rows (global allocation, gamma*) of the committed quality and accuracy grids."""
    name = model.replace("/", "_")
    quality = read_rows(Path(quality_dir) / f"quality-{name}.csv")
    accuracy = {v["variant"]: v for v in summarize(read_rows(Path(accuracy_dir) / f"accuracy-{name}.csv"))}
    out = []
    wanted = {(c, a, float(s)) for c, a in ABLATIONS for s in sparsities}
    for q in quality:
        s = float(q["sparsity"])
        if (q["criterion"], q["allocation"], s) in wanted and q.get("calib_seed") in ("0", ""):
            wanted.discard((q["criterion"], q["allocation"], s))  # the first (calibration seed 0) row only
            criterion = q["criterion"]
            v = {
                "variant": f"{criterion} s={s:g} gamma* (ablation)",
                "method": f"{criterion} (NIRVANA allocation)",
                "sparsity": s,
                "gamma": q.get("gamma", ""),
                "ppl_wikitext2": number(q["ppl_wikitext2"]),
                "ppl_ptb": number(q["ppl_ptb"]),
                "params_after": q.get("params_after"),
                "achieved_block_sparsity": q.get("achieved_block_sparsity"),
                "tasks": {},
                "source": "quality grid",
            }
            a = accuracy.get(f"{criterion} s={s:g} gamma*")
            if a:
                v["tasks"], v["source"] = a["tasks"], "quality + accuracy grids"
                for k in ("average", "average_se", "mbpp"):
                    if k in a:
                        v[k] = a[k]
                if "bpb" in a:
                    v["bpb"] = {t: x[:3] for t, x in a["bpb"].items()}
                if "lambada" in a:
                    acc, se, ppl, _ = a["lambada"]
                    v["lambada"] = (acc, se, ppl)
            out.append(v)
    return sorted(out, key=lambda v: (v["sparsity"], v["variant"]))


def ablation_rows(config) -> list[dict]:
    """The ablation rows a grid's report shows: the committed grids', calibrated on the default text, so none
    beside a grid calibrated on another (`bench baselines --calib`)."""
    return ablations(config.model, config.sparsities) if calibration(config) == DEFAULT_CALIBRATION else []


def calibration(config) -> str:
    return getattr(config, "calib", DEFAULT_CALIBRATION)


def against_default_calibration(measured: list[dict], config) -> list[str]:
    """The report's section for a grid calibrated on another text: `calibration_table` with its heading."""
    table = calibration_table(measured, config)
    if not table:
        return []
    return [
        "",
        f"## Calibrated on {calibration(config)} against {DEFAULT_CALIBRATION}",
        "",
        f"Each model of this grid beside the same method, sparsity and settings calibrated on {DEFAULT_CALIBRATION} "
        f"(`../{Path(config.csv_path).name}`). The last column is this grid's MBPP gold bits per byte minus the "
        "other's, paired by problem (negative: calibrating on this grid's text keeps the reference code more likely).",
        "",
        *table,
    ]


def calibration_table(measured: list[dict], config) -> list[str]:
    """A grid calibrated on another text beside the same models calibrated on the default one (the grid in the
    folder above, where the CLI put it), each cell 'this grid's / the default's': perplexity, the seven tasks,
    pass@1 and gold bits per byte, and the bits per byte paired by problem. No lines when there is no such grid."""
    if calibration(config) == DEFAULT_CALIBRATION:
        return []
    folder = Path(config.out_dir).parent
    default_csv = folder / Path(config.csv_path).name
    if not default_csv.exists():
        return []
    there = {v["variant"]: v for v in variants(read_rows(default_csv))}
    per = {
        (name, where): tasks
        for where, path in (("here", config.per_problem_path), ("there", folder / Path(config.per_problem_path).name))
        for name, tasks in read_per_problem(Path(path)).items()
    }
    both = f"{calibration(config)} / {DEFAULT_CALIBRATION}"
    lines = [
        f"| model | WikiText-2 perplexity, {both} | 7-task avg (%), {both} | MBPP pass@1 (%), {both} "
        f"| MBPP bits/byte, {both} | bits/byte {calibration(config)} − {DEFAULT_CALIBRATION}, paired |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for v in by_sparsity(measured):
        w = there.get(v["variant"])
        if v.get("method") == "dense" or w is None:
            continue
        pair = {k: per[(v["variant"], k)] for k in ("here", "there") if (v["variant"], k) in per}
        diff = paired_between(pair, "here", "there", "mbpp_bpb") if len(pair) == 2 else None
        cells = [
            v["variant"],
            f"{_num(v.get('ppl_wikitext2'))} / {_num(w.get('ppl_wikitext2'))}",
            " / ".join(plus_minus(x["average"], x.get("average_se")) if "average" in x else "-" for x in (v, w)),
            " / ".join(pass_text(*x["mbpp"]) if x.get("mbpp") else "-" for x in (v, w)),
            " / ".join(_bpb(x.get("bpb", {}).get("mbpp_bpb")) for x in (v, w)),
            paired_text(diff) if diff else "-",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def by_sparsity(entries: list[dict]) -> list[dict]:
    """Dense first, then sparsity by sparsity; the measured rows before the ablations read from the grids."""
    return sorted(entries, key=lambda v: 0.0 if v.get("method") == "dense" else float(v.get("sparsity") or 0))


def _num(value, digits: int = 2) -> str:
    x = number(value)
    return "-" if x is None else f"{x:.{digits}f}"


def _settings(v: dict, config) -> str:
    """The settings given to a row's method beyond its defaults (the CSV records all of them, resolved)."""
    given = config.settings_for(v.get("method"), number(v.get("sparsity"))) if hasattr(config, "settings_for") else None
    return f" `{json.dumps(given, sort_keys=True)}`" if given else ""


def _bpb(x) -> str:
    return "-" if not x or x[0] is None else f"{x[0]:.3f} ± {x[1] or 0:.3f}"


def per_problem(config) -> dict:
    """Each problem's gold BPB per variant: this bench's file, plus the ablations' from the accuracy grid."""
    name = config.model.replace("/", "_")
    out = read_per_problem(Path(config.per_problem_path))
    grid = read_per_problem(ACCURACY_DIR / f"bpb-{name}.json")
    for criterion, _ in ABLATIONS:
        for s in config.sparsities:
            key = f"{criterion} s={s:g} gamma*"
            if key in grid:
                out[f"{key} (ablation)"] = grid[key]
    return out


def paired_bpb(measured: list[dict], extra: list[dict], config) -> list[str]:
    """NIRVANA (gamma*) minus every other pruned model at its sparsity, and each minus dense, paired by problem."""
    per = per_problem(config)
    entries = [v for v in [*measured, *extra] if v.get("bpb")]
    tasks = [t for t in BPB_TASKS if any(t in v["bpb"] for v in entries)]
    if not tasks:
        return []
    lines = [
        "",
        "## Gold bits per byte, paired by problem",
        "",
        "Differences of gold-answer bits per byte over the same problems (mean ± standard error of the "
        "per-problem differences; 'resolved' = more than two standard errors). Negative in the NIRVANA column: "
        "NIRVANA keeps the reference answer more likely than that model.",
        "",
        "| model | task | − dense | NIRVANA gamma* − model |",
        "|---|---|---:|---:|",
    ]
    for v in entries:
        if v.get("method") == "dense":
            continue
        s = number(v.get("sparsity"))
        ours = f"nirvana s={s:g} gamma*"
        for t in tasks:
            if t not in v["bpb"]:
                continue
            vs = "" if v["variant"] == ours else paired_text(paired_between(per, ours, v["variant"], t))
            dense = paired_text(paired_between(per, v["variant"], "dense", t))
            lines.append(f"| {v['variant']} | {BPB_SHORT[t]} | {dense} | {vs} |")
    return lines


def paired_passes(measured: list[dict], config) -> list[str]:
    """pass@1 differences paired by problem, from each code row's outcomes (`pass-<model>.json`): every pruned
    model minus dense, and NIRVANA (gamma*) minus every other model at its sparsity."""
    path = getattr(config, "passes_path", None)
    per = read_per_problem(Path(path)) if path else {}
    tasks = [t for t in CODE_TASKS if any(t in d for d in per.values())]
    if not tasks:
        return []
    lines = [
        "",
        "## pass@1, paired by problem",
        "",
        "Differences of pass@1 over the same problems, in points (mean ± standard error of the per-problem "
        "differences of pass = 1 / fail = 0; 'resolved' = more than two standard errors). Smaller errors than the "
        "table's independent ones when two models pass and fail the same problems. Rows measured before outcomes "
        "were kept get them with `bench baselines --backfill-passes` (replayed from the eval cache).",
        "",
        "| model | task | − dense | NIRVANA gamma* − model |",
        "|---|---|---:|---:|",
    ]
    for v in by_sparsity(measured):
        if v.get("method") == "dense":
            continue
        ours = f"nirvana s={number(v.get('sparsity')):g} gamma*"
        for t in tasks:
            if t not in per.get(v["variant"], {}):
                continue
            vs = "" if v["variant"] == ours else paired_text(paired_between(per, ours, v["variant"], t), 100, 1)
            dense = paired_text(paired_between(per, v["variant"], "dense", t), 100, 1)
            lines.append(f"| {v['variant']} | {CODE_TASKS[t]} | {dense} | {vs} |")
    return lines


def _seconds(v: dict, measure: str, seconds: float) -> str:
    """`mbpp 1946`; for a code row resumed from its journal `mbpp 1946 (+120 completions from an earlier run)`."""
    resumed = v.get("resumed", {}).get(measure)
    return f"{measure} {seconds:.0f}" + (f" (+{resumed} completions from an earlier run)" if resumed else "")


def _disturbed_count(measured: list[dict]) -> str:
    """`N of M pruned rows with speeds are flagged disturbed.` for the table's note."""
    dense = next((v for v in measured if v.get("method") == "dense"), None)
    flags = [f for f in (speed_flag(v, dense) for v in measured if dense is not None) if f is not None]
    flagged = sum(f["disturbed"] for f in flags)
    text = f"{flagged} of {len(flags)} pruned rows with speeds are flagged disturbed."
    if flags and flagged == len(flags):  # every one above its ideal: the common factor is the dense row's timing
        text += " All of them: the dense row's own timing is the likely fault (it was slowed), so no row compares."
    return text


def markdown(rows: list[dict], config, extra: list[dict] | None = None) -> str:
    measured = variants(rows)
    extra = ablation_rows(config) if extra is None else extra
    header = ["model", "s", "WikiText-2", "PTB", "LAMBADA acc", "LAMBADA ppl"]
    header += [SHORT[t] for t in ZEROSHOT7] + ["Avg (7)", "MBPP pass@1", "HumanEval pass@1", "MBPP bits/byte"]
    others = [METHODS[m].label for m in config.methods if m in METHODS and m != "nirvana"] or ["dense alone"]
    beside = " and ".join([", ".join(others[:-1]), others[-1]] if len(others) > 1 else others)
    lines = [
        f"# Baselines benchmark: {config.model}",
        "",
        f"NIRVANA beside {beside} (`nirvana.methods`, docs/BASELINES.md) at the same target block "
        "sparsity, each pruned on the same calibration batch "
        f"({config.samples} x {config.seq_len} tokens of {calibration(config)}, seed 0). Perplexity on the first "
        f"{config.tokens:,} tokens ({config.window}-token windows); zero-shot: the first {config.limit} examples of "
        "each task, the paper's metric, in %, ± one standard error (the average's error is sqrt(sum se²)/7); "
        + (
            f"LAMBADA (OpenAI) acc and perplexity on the first {config.lambada_limit}; "
            if config.lambada_limit
            else "LAMBADA not in this grid; "
        )
        + "MBPP pass@1 only with --allow-code-execution; "
        + (
            "MBPP bits/byte: gold-answer bits per byte under OLMES's 3-shot prompt (lower is better), the first "
            f"{config.bpb_limit} problems. "
            if config.bpb_limit
            else "MBPP bits/byte not in this grid. "
        )
        + "'-' = not measured yet.",
    ]
    if calibration(config) == DEFAULT_CALIBRATION:
        lines.append(
            "Ablation rows (another criterion under NIRVANA's global allocation) are read from the committed quality "
            "and accuracy grids, not re-run: their calibration draw differs (32 x 128 away from the KL anchor), so "
            "they compare the criteria, not the calibration."
        )
    if config.dtype != "float32":
        lines += [
            "",
            f"Every model here ran in {config.dtype} (scores and losses accumulated in float32; each row's "
            "`machine` names its CPU and GPU); the ablation rows, from the committed grids, in float32.",
        ]
    if calibration(config) != DEFAULT_CALIBRATION:
        lines += [
            "",
            f"Every method here is scored, and each '+ recon' row reconstructed, on {calibration(config)}, not on "
            f"{DEFAULT_CALIBRATION}: no ablation rows "
            "(the committed grids they come from are calibrated on the default) and no KL-best gamma (searched on "
            "the default).",
        ]
    if config.note:
        lines += ["", config.note]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for v in by_sparsity([*measured, *extra]):
        t = v["tasks"]
        lam = v.get("lambada")
        mbpp, humaneval = v.get("mbpp"), v.get("humaneval")
        cells = [
            f"{v['variant']}{_settings(v, config)}",
            _num(v.get("sparsity"), 1) if v.get("method") != "dense" else "0",
            _num(v.get("ppl_wikitext2")),
            _num(v.get("ppl_ptb")),
            plus_minus(lam[0], lam[1]) if lam else "-",
            _num(lam[2]) if lam else "-",
            *[plus_minus(*t[k][:2]) if k in t else "-" for k in ZEROSHOT7],
            plus_minus(v["average"], v.get("average_se")) if "average" in v else "-",
            pass_text(*mbpp) if mbpp else "-",
            pass_text(*humaneval) if humaneval else "-",
            _bpb(v.get("bpb", {}).get("mbpp_bpb")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += paired_bpb(measured, extra, config)
    lines += paired_passes(measured, config)
    lines += against_default_calibration(measured, config)
    lines += [
        "",
        "## Parameters, speed, memory, pruning time",
        "",
        "Block sparsity: the fraction of decoder-block linear weights removed (FLAP's added biases counted in "
        "'block params'); matched = achieved block-parameter sparsity within 1% of the block parameters of the "
        "target. Speed: batch 1, median of the repeats, one model at a time on the shared CPU (load average in the "
        "last column), so wall-time rates of different rows are indicative only; the per-CPU-second rates (process "
        "CPU time, one thread) are the steadier comparison (`bench speed` interleaves its models). "
        "Pruning time: scoring + allocation + slicing, scores computed afresh unless the row says cached.",
        "",
        f"Speed-up vs dense: pruned / dense tok/s (prefill / decode, wall time); ideal: the larger of dense / pruned "
        f"block parameters and dense / pruned parameters, an upper bound of the FLOPs ideal. A row whose speed-up "
        f"(prefill or decode, wall or per CPU second) is more than {TOLERANCE} x its ideal is **disturbed**: "
        f"{MESSAGES[DISTURBED]}. Its speeds are as timed, not a comparison with dense. "
        f"{_disturbed_count(measured)}",
        "",
        "| model | params | block params | target | achieved (weights) | achieved (params) | matched | added biases "
        "| prefill tok/s | decode tok/s | prefill tok/CPU-s | decode tok/CPU-s | speed-up vs dense | ideal | peak MiB "
        "| pruning s | load |",
        "|" + "---|" * 17,
    ]
    dense = next((v for v in measured if v.get("method") == "dense"), None)
    for v in measured:
        m = v.get("matched")
        peak = v.get("peak_memory_bytes")
        lines.append(
            "| "
            + " | ".join(
                [
                    v["variant"],
                    f"{int(float(v['params_after'])):,}" if v.get("params_after") else "-",
                    f"{int(float(v['block_params_after'])):,}" if v.get("block_params_after") else "-",
                    _num(v.get("target_sparsity"), 3),
                    _num(v.get("achieved_block_sparsity"), 4),
                    _num(v.get("achieved_block_param_sparsity"), 4),
                    "" if m is None else ("yes" if m else "**not matched**"),
                    str(v.get("added_bias_params", "-")),
                    _num(v.get("prefill_tokens_per_s"), 0),
                    _num(v.get("decode_tokens_per_s"), 1),
                    _num(v.get("prefill_tokens_per_cpu_s"), 0),
                    _num(v.get("decode_tokens_per_cpu_s"), 1),
                    *_speed_cells(v, dense),
                    "-" if peak is None else f"{peak / 2**20:.0f}",
                    _num(v.get("prune_seconds"), 0) if v.get("method") != "dense" else "",
                    _num(v.get("load"), 1),
                ]
            )
            + " |"
        )
    settings = {v["variant"]: v["method_settings"] for v in measured if v.get("method_settings") not in (None, "")}
    if settings:
        lines += ["", "Method settings per row (JSON, as recorded in the CSV; the table shows those not default):", ""]
        lines += [f"- {name}: `{s}`" for name, s in settings.items()]
    if hasattr(config, "settings_for") and config.settings_for("llm-pruner", 0.5):  # the model's own override
        lines += [
            "",
            'LLM-Pruner at 0.5 uses `{"attn_layers": [4, 19]}`: with its default layer range [4, 28) the nearest '
            "reachable sparsities on SmolLM2 are 0.464 and 0.531 (docs/BASELINES.md), so the default cannot be "
            "matched within 1%.",
        ]
    lines += [
        "",
        "Seconds per row (measure: seconds; a code row resumed from its journal counts only the resumed run): "
        + "; ".join(
            f"{v['variant']}: " + ", ".join(_seconds(v, k, s) for k, s in v["seconds"].items() if s is not None)
            for v in measured
        ),
    ]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], config, path: Path, extra: list[dict] | None = None) -> Path | None:
    """WikiText-2 perplexity and the 7-task average per model, one panel each."""
    # here, not at the top: matplotlib only draws benchmark plots (Agg is chosen before pyplot)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = [*variants(rows), *(ablation_rows(config) if extra is None else extra)]
    entries = [v for v in entries if v.get("ppl_wikitext2") is not None or "average" in v]
    if not entries:
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 0.45 * len(entries) + 1.5))
    names = [v["variant"] for v in entries]
    y = list(range(len(entries)))
    ppl = [(i, v["ppl_wikitext2"]) for i, v in enumerate(entries) if v.get("ppl_wikitext2") is not None]
    a.barh([i for i, _ in ppl], [p for _, p in ppl], color="#4c72b0")
    for i, p in ppl:
        a.text(p, i, f" {p:.4g}", va="center", fontsize=7)
    a.set_xscale("log")  # the Wanda-style ablation is orders of magnitude above the rest
    a.set_yticks(y, names, fontsize=8)
    a.set_xlabel(f"WikiText-2 perplexity ({config.tokens:,} tokens, log scale), lower is better")
    a.set_ylim(len(entries) - 0.5, -0.5)
    acc = [(i, v) for i, v in enumerate(entries) if "average" in v]
    b.barh(
        [i for i, _ in acc],
        [100 * v["average"] for _, v in acc],
        xerr=[100 * (v.get("average_se") or 0) for _, v in acc],
        color="#dd8452",
    )
    b.set_ylim(len(entries) - 0.5, -0.5)
    b.set_yticks(y, [""] * len(y))
    b.set_xlabel(f"7-task zero-shot average, % (n = {config.limit} each, ± 1 se)")
    present = {v.get("method") for v in entries}
    labels = ", ".join(m.label for name, m in METHODS.items() if name in present)
    fig.suptitle(f"{config.model}: {labels} (and ablations from the grids)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


BASELINES = tuple(filter(is_baseline, METHODS))
LORA, RECONSTRUCT = " + LoRA", " + recon"  # a variant's name: what was done after pruning
AFTER = ("", RECONSTRUCT, LORA)  # a verdict compares variants with the same treatment after pruning


def _versus(a: dict, b: dict, per: dict) -> list[str]:
    """What separates NIRVANA entry `a` from baseline `b`, from the measured values only."""
    out = []
    pa, pb = number(a.get("ppl_wikitext2")), number(b.get("ppl_wikitext2"))
    if pa is not None and pb is not None:
        out.append(f"WikiText-2 perplexity {pa:.2f} vs {pb:.2f} ({'NIRVANA' if pa < pb else 'baseline'} lower)")
    if "average" in a and "average" in b and a.get("average_se") and b.get("average_se"):
        d, se = a["average"] - b["average"], math.hypot(a["average_se"], b["average_se"])
        word = (
            f"resolved, {'NIRVANA' if d > 0 else 'baseline'} higher" if abs(d) > 2 * se else "within 2 se: not resolved"
        )
        out.append(f"7-task average {100 * d:+.1f} ± {100 * se:.1f} points ({word})")
    p = paired_between(per, a["variant"], b["variant"], "mbpp_bpb")
    if p is not None:
        out.append(f"MBPP bits/byte {paired_text(p)}, paired ({'NIRVANA' if p['mean'] < 0 else 'baseline'} lower)")
    return out


def _side(v: dict) -> str:
    return v["variant"] + (" (not matched: a different budget)" if v.get("matched") is False else "")


def _after(name: str) -> str:
    """What was done after pruning, by the variant's name: " + LoRA", " + recon" or nothing."""
    return next((s for s in AFTER if s and name.endswith(s)), "")


def _nirvana_sides(measured: list[dict], sparsity: float, after: str) -> list[dict]:
    """NIRVANA's entries a verdict compares: gamma*, and when gamma* misses the budget (Gemma-3: one KV
    group per layer) every matched NIRVANA run at another fixed gamma (`--nirvana-gamma`) as well; `after`:
    the variants with that suffix (" + LoRA", " + recon", or none)."""
    star = next((v for v in measured if v["variant"] == f"nirvana s={sparsity:g} gamma*{after}"), None)
    if star is None or star.get("matched") is not False:
        return [star] if star else []
    fixed = [
        v for v in measured
        if not is_baseline(v.get("method")) and number(v.get("sparsity")) == sparsity and v.get("matched")
        and _after(v["variant"]) == after
        and "KL-best" not in v["variant"] and v is not star
    ]  # fmt: skip
    return [star, *fixed]


def readme_summary(rows: list[dict], config, pending_rows: int | None = None, extra: list[dict] | None = None) -> str:
    """The README's answer to "does NIRVANA beat the baselines?" (every method of the table that was run
    at NIRVANA's sparsity: LLM-Pruner, FLAP, SliceGPT), generated from the CSV (no figure typed)."""
    measured = variants(rows)
    extra = ablation_rows(config) if extra is None else extra
    per = per_problem(config)
    lines = [
        "| model | WikiText-2 | PTB | 7-task avg (%) | LAMBADA acc (%) | MBPP bits/byte | params | matched |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for v in by_sparsity([*measured, *extra]):
        lam, m = v.get("lambada"), v.get("matched")
        cells = [
            v["variant"],
            _num(v.get("ppl_wikitext2")),
            _num(v.get("ppl_ptb")),
            plus_minus(v["average"], v.get("average_se")) if "average" in v else "-",
            plus_minus(lam[0], lam[1]) if lam else "-",
            _bpb(v.get("bpb", {}).get("mbpp_bpb")),
            f"{int(float(v['params_after'])) / 1e6:.1f} M" if v.get("params_after") else "-",
            "" if m is None else ("yes" if m else "**no**"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for sparsity in config.sparsities:
        for after in AFTER:
            for ours in _nirvana_sides(measured, sparsity, after):
                for b in measured:
                    same = number(b.get("sparsity")) == sparsity and _after(b["variant"]) == after
                    if b.get("method") in BASELINES and same:
                        facts = _versus(ours, b, per)
                        if facts:
                            lines.append(f"- {sparsity:.0%}, {_side(ours)} − {_side(b)}: " + "; ".join(facts) + ".")
    if pending_rows:
        lines += ["", f"{pending_rows} rows of the grid are not measured yet ('-' above); the verdict is partial."]
    return "\n".join(lines) + "\n"


def write_report(rows: list[dict], config) -> tuple[Path, str]:
    """Write `baselines-<model>.md` and `.png` beside the CSV; return (markdown path, markdown text)."""
    csv = Path(config.csv_path)
    csv.parent.mkdir(parents=True, exist_ok=True)
    text = markdown(rows, config)
    md = csv.with_suffix(".md")
    atomic_write_text(md, text)
    plot(rows, config, csv.with_suffix(".png"))
    return md, text


__all__ = [
    "MATCH_TOLERANCE",
    "ablations",
    "markdown",
    "matched",
    "plot",
    "readme_summary",
    "speed_flag",
    "speed_ideal",
    "variants",
    "write_report",
]
