"""The Prune page's speed-up, measured while other work runs beside it: is it flagged, or within its ideal?

    .venv/bin/python benchmarks/speed-honesty/prune_page.py [--sparsity 0.5] [--model smollm2-135m]

Drives the real app (streamlit's AppTest) on the embedded model: saliency (the app's CPU default batch),
Allocation at `--sparsity`, Prune & compare -> apply the plan -> Speed & memory -> Measure (the page's
defaults: interleaved rounds). Records, per batch size and phase, the measured speed-up, its ideal, the
verdict and the load average, and what the page showed (a metric, or the 'disturbed: re-measure' warning).
Run it beside a benchmark (the point of the exercise); the machine's load is in every row.
Appends one JSON line to prune-page.jsonl.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sparsity", type=float, default=0.5)
    p.add_argument("--model", default="smollm2-135m")
    args = p.parse_args()
    os.environ["NIRVANA_APP_MODEL"] = args.model
    from streamlit.testing.v1 import AppTest

    from nirvana.bench.environment import machine_label

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=1800)
    at.run()
    at.switch_page("pages/saliency.py").run()
    at.button(key="compute_saliency").click().run()
    at.switch_page("pages/allocation.py").run()
    at.slider(key="sparsity").set_value(args.sparsity).run()
    at.switch_page("pages/prune.py").run()
    at.button(key="apply_plan").click().run()
    load_before = os.getloadavg()[0]
    at.button(key="measure_speed").click().run()
    assert not at.exception, at.exception
    tables = [d.value for d in at.dataframe if any("verdict" in str(c) for c in d.value.columns)]
    rows = tables[0].to_dict("records") if tables else None
    shown = {
        "metrics": {m.label: m.value for m in at.metric if "speed-up" in m.label.lower()},
        "warnings": [w.value for w in at.warning if "disturbed" in w.value or "noisy" in w.value],
    }
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")
    record = {"model": args.model, "sparsity": args.sparsity, "shown": shown, "rows": rows}
    record |= {"load_avg_1min_before": load_before, "load_avg_1min_after": os.getloadavg()[0]}
    record |= {"machine": machine_label(), "finished_utc": stamp}
    with (OUT / "prune-page.jsonl").open("a") as f:
        f.write(json.dumps(record, default=str) + "\n")
    print(json.dumps(shown, indent=1))


if __name__ == "__main__":
    main()
