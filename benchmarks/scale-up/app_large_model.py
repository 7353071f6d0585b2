"""The app on Qwen2.5-Coder-1.5B on this machine: load, the scoring estimate, scoring with progress, memory.

    .venv/bin/python benchmarks/scale-up/app_large_model.py [--model qwen2.5-coder-1.5b]

Drives the real app (streamlit's AppTest) started on `--model`: the Model page, the Saliency page's
estimate ("Scoring takes about N s"), then Compute saliency (the app's CPU default batch), timing
each step and reading the process's peak RSS (VmHWM). Appends one JSON line to app-large-model.jsonl.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def peak_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    args = p.parse_args()
    os.environ["NIRVANA_APP_MODEL"] = args.model
    from streamlit.testing.v1 import AppTest

    from nirvana.bench.environment import machine_label

    row = {"model": args.model, "machine": machine_label(), "load_avg_1min_start": os.getloadavg()[0]}
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=3600)
    start = time.perf_counter()
    at.run()
    at.switch_page("pages/model.py").run()
    row["model_page_s"] = round(time.perf_counter() - start, 1)
    row["model_page_errors"] = [e.value for e in at.error]
    at.switch_page("pages/saliency.py").run()
    row["estimate"] = [c.value for c in at.caption if "Scoring takes about" in c.value]
    start = time.perf_counter()
    at.button(key="compute_saliency").click().run()
    row["scoring_s"] = round(time.perf_counter() - start, 1)
    row["errors"] = [e.value for e in at.error] + [str(x.value) for x in at.exception]
    row["scored"] = at.session_state["scores"] is not None if "scores" in at.session_state else False
    row["metrics"] = {m.label: m.value for m in at.metric}
    row["peak_rss_gib"] = round(peak_rss_gib(), 2)
    row["load_avg_1min_end"] = os.getloadavg()[0]
    row["finished_utc"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")
    with (Path(__file__).with_name("app-large-model.jsonl")).open("a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
