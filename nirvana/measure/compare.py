"""Dense vs pruned (or pruned vs recovered), written once: the rows every comparison shows.

Each function takes two measurements already taken (by `perplexity`, `measure_speed(s)`,
`run_accuracy`, `generate`, `select_calibration`) and returns plain data, dicts and lists of
dicts (`pandas.DataFrame(rows)` shows them as a table). The CLI's `compare` prints them and
puts them in its JSON; the app's Prune & compare page (perplexity, accuracy, generations, speed),
its Recover tab (perplexity before / after) and its Calibration page (KL of each candidate's
pruned model to the dense one) show them; none of them computes a ratio of its own.

    facts = {k: model_facts(m) for k, m in (("dense", dense), ("pruned", pruned))}
    ratios = size_ratios(facts["dense"], facts["pruned"])
    rows = speed_rows(dense_speed, pruned_speed, dense, pruned)  # models (their widths) or ModelShapes
"""

from __future__ import annotations

import torch.nn as nn

from nirvana.accuracy.tasks import PAPER_METRIC, TASKS
from nirvana.measure.flops import summary
from nirvana.measure.paired import paired_or_none
from nirvana.measure.speed import speedup_rows
from nirvana.measure.speed_check import RULE as SPEED_RULE
from nirvana.models.shapes import ModelShape

Shaped = ModelShape | nn.Module  # a model (its module widths) or a plan's shape: `nirvana.measure.flops`

# the task figures `accuracy_deltas` subtracts (pruned minus dense)
ACCURACY_METRICS = ("acc", "acc_norm", "pass@1", "exact_match", "exact_match_flexible", "bpb")
SPEED_METHOD = (
    "pruned / dense tokens per second, repeats interleaved; ideal = dense / pruned FLOPs; verdict per phase: "
    + SPEED_RULE
)
# A task's headline metric by its kind, where the paper names none (PAPER_METRIC).
METRIC_BY_KIND = {"choice": "acc", "loglikelihood": "acc", "code": "pass@1", "generate": "exact_match", "bpb": "bpb"}
ACCURACY_NOTE = (
    "pruned minus dense (accuracy, pass@1, exact match: higher is better; bpb: lower is better, "
    "bpb_paired, pass_paired = mean and standard error of the per-problem differences)"
)
# The speed table as the app shows it: (column, key of a `speed_rows` row, decimals; None = as is). The measured
# speed-up is the median of the per-round ratios; `speed_table` leaves it empty where its verdict is not "ok".
SPEED_COLUMNS = (
    ("batch", "batch_size", None),
    ("prefill tok/s dense", "prefill_tokens_per_s_dense", 1),
    ("prefill tok/s pruned", "prefill_tokens_per_s", 1),
    ("prefill speed-up (measured)", "prefill_ratio", 2),
    ("prefill rounds: middle half", "prefill_ratio_low", None),
    ("prefill speed-up (ideal, FLOPs)", "prefill_ideal", 2),
    ("prefill verdict", "prefill_verdict", None),
    ("decode tok/s dense", "decode_tokens_per_s_dense", 1),
    ("decode tok/s pruned", "decode_tokens_per_s", 1),
    ("decode speed-up (measured)", "decode_ratio", 2),
    ("decode rounds: middle half", "decode_ratio_low", None),
    ("decode speed-up (ideal, FLOPs)", "decode_ideal", 2),
    ("decode verdict", "decode_verdict", None),
    ("peak memory dense (MB)", "peak_memory_mib_dense", 0),
    ("peak memory pruned (MB)", "peak_memory_mib", 0),
)


def model_facts(model) -> dict:
    """Parameters and analytic FLOPs per token of one model (no measurement)."""
    return summary(model)  # the model's own module widths (a sliced residual stream included)


def size_ratios(dense: dict, pruned: dict) -> dict:
    """Parameters and FLOPs, pruned over dense, and the ideal (FLOPs) speed-up, from two `model_facts`."""
    return {
        "params": pruned["params"] / dense["params"],
        "flops_per_token": pruned["flops_per_token"] / dense["flops_per_token"],
        "ideal_speedup": dense["flops_per_token"] / pruned["flops_per_token"],
        "ideal_speedup_context": dense["flops_context"],
    }


def perplexity_pair(before: dict, after: dict) -> dict:
    """One dataset, two models (dense and pruned, or pruned and recovered): both perplexities, the
    ratio and the difference, and what `after` was measured on. Takes `Perplexity.to_dict()`s."""
    return {
        "before": before["ppl"],
        "after": after["ppl"],
        "ratio": after["ppl"] / before["ppl"],
        "delta": after["ppl"] - before["ppl"],
        **{k: after.get(k) for k in ("dataset", "split", "origin", "tokens", "predicted_tokens", "windows", "seq_len")},
    }


def perplexity_ratios(dense: dict[str, dict], pruned: dict[str, dict]) -> dict[str, float]:
    """{dataset: pruned perplexity / dense perplexity} for every dataset both were measured on."""
    return {name: perplexity_pair(d, pruned[name])["ratio"] for name, d in dense.items() if name in pruned}


def speed_rows(dense: dict, pruned: dict, dense_shape: Shaped, pruned_shape: Shaped) -> list[dict]:
    """Per batch size: `speedup_rows` (measured and ideal speed-ups, both speeds, peak memory) and the
    pruned model's peak memory over the dense one's. `dense`, `pruned`: `measure_speed(s)` results."""
    rows = speedup_rows(dense, pruned, dense_shape, pruned_shape)
    return [
        row | {"peak_memory_ratio": p["peak_memory_bytes"] / d["peak_memory_bytes"]}
        for row, d, p in zip(rows, dense["results"], pruned["results"])
    ]


def speed_table(rows: list[dict]) -> list[dict]:
    """`speed_rows` under the app's column names, rounded (`SPEED_COLUMNS`). A phase whose verdict is not "ok"
    has no measured speed-up (None): its ratio is not a result, its verdict column says why."""
    return [{label: _speed_cell(row, key, digits) for label, key, digits in SPEED_COLUMNS} for row in rows]


def _speed_cell(row: dict, key: str, digits: int | None):
    phase = key.split("_", 1)[0]
    if key.endswith("_ratio_low"):  # the rounds' interquartile range, as text
        return f"{row[key]:.2f}-{row[f'{phase}_ratio_high']:.2f}x of {row[f'{phase}_rounds']}"
    if key.endswith("_ratio") and row[f"{phase}_verdict"] != "ok":
        return None
    return row[key] if digits is None else round(row[key], digits or None)


def accuracy_deltas(dense: dict, pruned: dict) -> dict:
    """Pruned minus dense, per task and metric, and of the 7-task average: two `run_accuracy` results.
    For gold BPB also `bpb_paired`, for code tasks `pass_paired` (pass = 1, fail = 0): the mean and standard
    error of the per-problem differences (the same problems in both, so their difficulty cancels)."""
    out = {}
    for name, d in dense["tasks"].items():
        p = pruned["tasks"].get(name, {})
        out[name] = {m: p[m] - d[m] for m in ACCURACY_METRICS if d.get(m) is not None and p.get(m) is not None}
        for key, values in (("bpb_paired", "bpb_per_example"), ("pass_paired", "passed")):
            pair = paired_or_none(p.get(values), d.get(values))
            if pair is not None:
                out[name][key] = pair
    if dense.get("average") and pruned.get("average"):
        out["zeroshot7_average"] = {"paper_metric": pruned["average"]["value"] - dense["average"]["value"]}
    return out


def paper_value(row: dict, task: str) -> tuple[float | None, float | None, str]:
    """(value, standard error, metric) of one task's result under its paper metric."""
    metric = PAPER_METRIC.get(task) or METRIC_BY_KIND.get(TASKS[task].kind, "bpb")
    return row.get(metric), row.get(f"{metric}_stderr"), metric


def accuracy_rows(dense: dict, pruned: dict) -> list[dict]:
    """One row per accuracy-like task (gold BPB has its own: `bpb_rows`): metric, dense and pruned value
    ± se (in %), difference, its standard error paired by problem where both kept per-problem outcomes (code
    tasks), n, source and split."""
    rows = []
    for task, d in dense["tasks"].items():
        if TASKS[task].kind == "bpb":
            continue
        dv, dse, metric = paper_value(d, task)
        pv, pse, _ = paper_value(pruned["tasks"].get(task, {}), task)
        rows.append(
            {
                "task": task,
                "metric": metric,
                "dense %": _percent(dv),
                "± dense": _percent(dse),
                "pruned %": _percent(pv),
                "± pruned": _percent(pse),
                "pruned − dense": None if dv is None or pv is None else round(100 * (pv - dv), 1),
                "± paired": _paired_points(d.get("passed"), pruned["tasks"].get(task, {}).get("passed")),
                "n": d.get("n"),
                "data": f"{d.get('source')} · {d.get('split')}",
            }
        )
    return rows


def _paired_points(dense: list | None, pruned: list | None) -> float | None:
    """The standard error (in points) of pruned − dense over the same problems' outcomes, or None."""
    pair = paired_or_none(pruned, dense)
    return None if pair is None else round(100 * pair["stderr"], 1)


def bpb_rows(dense: dict, pruned: dict) -> list[dict]:
    """One row per gold-BPB task: dense and pruned bits per byte ± se, pruned − dense with the standard error
    of the per-problem differences (paired: the same problems), and whether that difference is resolved."""
    rows = []
    for task, d in dense["tasks"].items():
        p = pruned["tasks"].get(task, {})
        if TASKS[task].kind != "bpb" or d.get("bpb") is None or p.get("bpb") is None:
            continue
        pair = paired_or_none(p.get("bpb_per_example"), d.get("bpb_per_example"))
        rows.append(
            {
                "task": task,
                "dense bits/byte": round(d["bpb"], 4),
                "± dense": None if d.get("bpb_stderr") is None else round(d["bpb_stderr"], 4),
                "pruned bits/byte": round(p["bpb"], 4),
                "± pruned": None if p.get("bpb_stderr") is None else round(p["bpb_stderr"], 4),
                "pruned − dense": round(p["bpb"] - d["bpb"], 4),
                "± paired": None if pair is None else round(pair["stderr"], 4),
                "resolved (> 2 s.e.)": None if pair is None else abs(pair["mean"]) > 2 * pair["stderr"],
                "n": d.get("n"),
                "data": f"{d.get('source')} · {d.get('split')}",
            }
        )
    return rows


def generation_rows(dense: list[dict], pruned: list[dict]) -> list[dict]:
    """Dense and pruned continuations of the same prompts (two `generate` results), one row per prompt:
    {id, prompt, dense, pruned, dense_tokens, pruned_tokens, identical, mode}."""
    return [
        {
            "id": d["id"],
            "prompt": d["prompt"],
            "dense": d["output"],
            "pruned": p["output"],
            "dense_tokens": d["new_tokens"],
            "pruned_tokens": p["new_tokens"],
            "identical": d["output"] == p["output"],
            "mode": d["mode"],
        }
        for d, p in zip(dense, pruned)
    ]


def kl_rows(selection) -> list[dict]:
    """One row per candidate batch of a `select_calibration` result: its seed, the KL of its pruned
    model to the dense one, the sparsity reached, the scoring time, the batch's hash and whether it was chosen."""
    return [
        {
            "seed": c.seed,
            "KL (nats/token)": c.kl,
            "achieved block sparsity": c.achieved_block_sparsity,
            "scoring s": c.score_seconds,
            "batch hash": c.calibration["hash"],
            "chosen": c.seed == selection.chosen_seed,
        }
        for c in selection.candidates
    ]


def ratios(dense: dict, pruned: dict, dense_shape: Shaped, pruned_shape: Shaped, speed_rows=speed_rows) -> dict:
    """The CLI's `compare` ratios from the two models' results (facts, and `ppl`, `speed`, `tasks`
    where both have them): sizes, perplexity ratios, speed rows, accuracy differences. `speed_rows`: the
    family's (`nirvana.measure.family`; a T5's times the encoder pass, not a prefill)."""
    out = size_ratios(dense, pruned)
    if "ppl" in dense and "ppl" in pruned:
        out["ppl"] = perplexity_ratios(dense["ppl"], pruned["ppl"])
    if "speed" in dense and "speed" in pruned:
        out["speed"] = speed_rows(dense["speed"], pruned["speed"], dense_shape, pruned_shape)
        out["speed_method"] = SPEED_METHOD
    if "tasks" in dense and "tasks" in pruned:
        out["tasks"] = accuracy_deltas(dense["tasks"], pruned["tasks"])
        out["tasks_note"] = ACCURACY_NOTE
    return out


def _percent(value: float | None) -> float | None:
    return None if value is None else round(100 * value, 1)
