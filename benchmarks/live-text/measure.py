"""Slider move -> new text on the Allocation page: the server's wall time per move, p50 and p90.

    .venv/bin/python benchmarks/live-text/measure.py [--moves 20] [--model smollm2-135m]

Drives the real app (streamlit's AppTest: the same script runs as for a browser, every chart and the live
text included) on the embedded model: scores once on the Saliency page (N = 8 x T = 128, the app's CPU
default; the score cache makes reruns fast), opens Allocation, then moves the sparsity slider to `moves`
values never seen before (0.06 .. 0.63, not the page's starting 0.20: each one slices and generates 16
tokens; none is a memo hit), timing each run from the move to the finished page. Then the same values
again: every one from the memo.
Writes one JSON line per run to live-text.jsonl and the summary to live-text.md (appends; resumable by hand).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--moves", type=int, default=20)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--note", default="", help="what else ran on the machine meanwhile (written under the table)")
    args = p.parse_args()
    os.environ["NIRVANA_APP_MODEL"] = args.model
    from streamlit.testing.v1 import AppTest

    from nirvana.bench.environment import machine_label
    from ui import live_text

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=900)
    at.run()
    at.switch_page("pages/saliency.py").run()
    at.button(key="compute_saliency").click().run()
    at.switch_page("pages/allocation.py").run()
    assert not at.exception, at.exception
    start_value = at.slider(key="sparsity").value  # shown when the page opened: its text is in the memo already
    values = [round(0.06 + i * (0.57 / max(1, args.moves - 1)), 3) for i in range(args.moves)]
    assert start_value not in values, (start_value, values)
    rows = []
    for phase in ("new", "seen"):
        for s in values:
            load = os.getloadavg()[0]
            start = time.perf_counter()
            at.slider(key="sparsity").set_value(s).run()
            seconds = time.perf_counter() - start
            texts = [m.value for m in at.markdown if m.value.startswith(live_text.PREFIX)]
            assert len(texts) == 2 and not at.exception, (at.exception, [e.value for e in at.error])
            rows.append({"phase": phase, "sparsity": s, "seconds": round(seconds, 3), "load_avg_1min": load})
            print(json.dumps(rows[-1]), flush=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")
    with (OUT / "live-text.jsonl").open("a") as f:
        for r in rows:
            f.write(json.dumps({**r, "model": args.model, "machine": machine_label(), "finished_utc": stamp}) + "\n")
    lines = [
        "# Slider move -> new text (Allocation page)",
        "",
        f"{args.model}, {machine_label()}, {stamp} UTC. Each figure: the app's run after one sparsity-slider move, "
        "from the move to the finished page (charts, metrics, and the pruned model's 16 greedy tokens beside the "
        "dense ones), in streamlit's AppTest. 'new': a sparsity never shown before (sliced and generated); 'seen': "
        "the same values again (from the memo). Written by `benchmarks/live-text/measure.py`.",
        "",
        "| moves | p50 (s) | p90 (s) | max (s) | load average (1 min) during |",
        "|---|---:|---:|---:|---|",
    ]
    for phase in ("new", "seen"):
        secs = [r["seconds"] for r in rows if r["phase"] == phase]
        loads = [r["load_avg_1min"] for r in rows if r["phase"] == phase]
        lines.append(
            f"| {len(secs)} {phase} | {statistics.median(secs):.2f} | {percentile(secs, 0.9):.2f} | {max(secs):.2f} "
            f"| {min(loads):.1f}-{max(loads):.1f} |"
        )
    if args.note:
        lines += ["", args.note]
    (OUT / "live-text.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
