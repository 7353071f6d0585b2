"""Bursts of arrow keys on the Allocation page's sparsity slider, in a real browser: does the page keep up?

A fresh `streamlit run app.py` on the embedded SmolLM2 and headless Chromium (the helpers of
tests/test_browser.py): load, score (N=2 x T=64), open Allocation, then `--rounds` times 25 key
presses right and 25 left, each followed by a wait for the live text at the slider's value. A
round that does not come back within 120 s is recorded with the page's state (streamlit's script
and connection state, stale elements), the server's busy threads and the browser's fatal console
errors, then given 300 s more to recover by itself. One JSON line per burst goes to
bursts.jsonl beside this file. Found with it: streamlit 1.67's message cache ("Cached ForwardMsg
MISS" -> connection DISCONNECTED_FOREVER), fixed by `global.minCachedMessageSize` in
.streamlit/config.toml (bursts.md).

    .venv/bin/python benchmarks/live-text/bursts.py --rounds 12 --note "beside: ..."
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import test_browser as tb  # noqa: E402  (the browser helpers of the test suite)

OUT = Path(__file__).with_name("bursts.jsonl")
# The live text is done and its header's achieved sparsity is within 3 points of the slider's value.
AT_VALUE = r"""(now, arg) => {
  const m = now.header.match(/Pruned at (\d+)%/);
  return !now.header.includes('generating') && m !== null && Math.abs(Number(m[1]) - arg) <= 3;
}"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12, help="pairs of bursts (25 right, 25 left)")
    parser.add_argument("--note", default="", help="what else ran on the machine")
    args = parser.parse_args()
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    from nirvana.checkpoints.loading import embedded_model_dir

    tmp = Path(tempfile.mkdtemp(prefix="bursts-"))
    (tmp / "cache" / "models").mkdir(parents=True)
    (tmp / "cache" / "models" / "smollm2-135m").symlink_to(embedded_model_dir("smollm2-135m"), True)
    port = tb._free_port()
    where = f"127.0.0.1:{port}"
    log = (tmp / "streamlit.log").open("w")
    env = {**os.environ, "NIRVANA_CACHE_DIR": str(tmp / "cache"), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    command += ["--server.address", "127.0.0.1", "--server.headless", "true"]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    tb.SERVER_PIDS[where], tb.SERVER_LOGS[where] = proc.pid, tmp / "streamlit.log"
    run = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    failed = 0
    try:
        tb._wait_healthy(f"http://{where}", proc)
        with sync_playwright() as p, OUT.open("a") as out:
            page = tb._new_page(p)
            tb._load_and_score(page, f"http://{where}")
            tb._nav(page, "3 · Allocation")
            tb._idle(page, timeout=180_000)
            tb._live_text(page)
            for r in range(args.rounds):
                for steps in (25, -25):
                    start = time.perf_counter()
                    tb._move_slider(page, "sparsity", steps)
                    page.wait_for_timeout(300)
                    value = tb._slider_value(page, "sparsity")
                    row = {"run": run, "note": args.note, "round": r, "keys": steps, "value": value}
                    try:
                        tb._wait_live_text(page, AT_VALUE, round(float(value) * 100), timeout=120_000)
                        tb._idle(page, timeout=120_000)
                        row.update(ok=True, s=round(time.perf_counter() - start, 2))
                    except (AssertionError, PlaywrightTimeout) as exc:
                        failed += 1
                        row.update(ok=False, why=str(exc)[:3000])
                        script = (
                            f"(a) => {{ const now = ({tb.LIVE_TEXT})(); return now !== null && ({AT_VALUE})(now, a); }}"
                        )
                        try:
                            page.wait_for_function(script, arg=round(float(value) * 100), timeout=300_000, polling=500)
                            row["recovered_alone_s"] = round(time.perf_counter() - start, 1)
                        except PlaywrightTimeout:
                            row["recovered_alone_s"] = None
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    print(json.dumps(row)[:300], flush=True)
                    if not row["ok"] and row["recovered_alone_s"] is None:
                        return 1
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
