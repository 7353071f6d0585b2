"""How the generation benchmarks (`batched.py`, `step_cost.py`) keep what they measured: each row stamped with
the machine and the time and printed as it is measured; at the end every row appended to `<kind>-<model>.jsonl`
(one measurement per line: the history) and this run's table written to `<kind>-<model>.md`."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def stamped(row: dict, note: str) -> dict:
    """`row` with torch's thread count, the machine, what else it was doing (`note`) and the UTC minute; printed."""
    # here, not at the top: torch and nirvana load only once the arguments are read (`--help` stays instant)
    import torch

    from nirvana.bench.environment import machine_label

    row = {
        **row,
        "threads": torch.get_num_threads(),
        "machine": machine_label(),
        "note": note,
        "finished_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"),
    }
    print(json.dumps(row), flush=True)
    return row


def record(
    kind: str, model: str, rows: list[dict], title: str, detail: str, explain: str, columns: dict[str, str], cell
) -> str:
    """Append `rows` to `<kind>-<model>.jsonl`; write `<kind>-<model>.md`: `title`; the script, the first row's time
    and machine, `detail` and its note; `explain`; a table with `columns` (header -> alignment, "---" or "---:")
    whose cells `cell(row)` gives. Returns the markdown."""
    name = model.replace("/", "_")
    with (HERE / f"{kind}-{name}.jsonl").open("a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    first = rows[0]
    where = f"`benchmarks/generation/{kind.replace('-', '_')}.py`, {first['finished_utc']} UTC, {first['machine']}"
    lines = [
        f"# {title}",
        "",
        where + (f", {detail}." if detail else ".") + (f" {first['note']}" if first["note"] else ""),
        *([explain] if explain else []),
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "|".join(columns.values()) + "|",
        *("| " + " | ".join(cell(r)) + " |" for r in rows),
    ]
    text = "\n".join(lines) + "\n"
    (HERE / f"{kind}-{name}.md").write_text(text)
    return text
