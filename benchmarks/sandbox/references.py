"""Every MBPP and HumanEval reference solution, scored by the new sandbox and by the launcher before it.

    PYTHONPATH=. NIRVANA_DATA_DIR=../shared/data .venv/bin/python benchmarks/sandbox/references.py

Writes benchmarks/sandbox/references.csv (one row per problem: task, id, old status, new status)
and prints the counts: the new sandbox must pass every reference the old one passed.
"""

from __future__ import annotations

import csv
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import audit_hook_launcher as old  # noqa: E402

from nirvana.accuracy.sandbox import run_tests  # noqa: E402
from nirvana.accuracy.tasks import harness_config  # noqa: E402


def problems():
    from lm_eval.api.task import ConfigurableTask

    def target(refs, preds):
        return 0.0

    mbpp = ConfigurableTask(config=harness_config("mbpp", "local", code_metric=target))
    for doc in mbpp.test_docs():
        yield "mbpp", doc["task_id"], doc["code"], mbpp.doc_to_target(doc)
    human = ConfigurableTask(config=harness_config("humaneval", "local", code_metric=target))
    build = human.config.filter_list[0]["filter"][0]["filter_fn"]
    for doc in human.test_docs():
        ((completed,),) = build([[doc["canonical_solution"]]], [doc])
        yield "humaneval", doc["task_id"], completed, human.doc_to_target(doc)


def main() -> None:
    rows = []
    for task, pid, code, tests in problems():
        before = old.run_program(f"{code}\n{tests}\n").status
        after = run_tests(code, tests)
        rows.append(
            {"task": task, "id": pid, "old": before, "new": after.status, "new_error": after.stderr_tail[-200:]}
        )
        if before != after.status:
            print(task, pid, before, after.status, after.stderr_tail[-300:].replace("\n", " | "), flush=True)
    with open(HERE / "references.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for task in ("mbpp", "humaneval"):
        mine = [r for r in rows if r["task"] == task]
        print(task, "old", dict(Counter(r["old"] for r in mine)), "new", dict(Counter(r["new"] for r in mine)))


if __name__ == "__main__":
    main()
