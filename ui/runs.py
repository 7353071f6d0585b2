"""What the app did, written under the runs folder (atomically) so it survives a restart (Runs page)."""

from __future__ import annotations

from nirvana.runs import record_run
from ui.errors import guard


def record_session_run(
    kind: str, lm, plan, summary: dict, metrics: dict | None = None, settings: dict | None = None
) -> str | None:
    """Record a prune, an evaluation or a recovery of `lm` under `plan`; the run id, or None when
    writing failed (the page says so and goes on)."""
    with guard("recording the run") as g:
        settings = {**(plan.settings.to_dict() if plan is not None else {}), "model": lm.name, **(settings or {})}
        summary = {"model": lm.name, "sparsity": settings.get("sparsity"), **summary}
        if plan is not None:
            summary["achieved_block_sparsity"] = plan.stats.get("achieved_block_sparsity")
        run_id = record_run(kind, settings=settings, summary=summary, plan=plan, metrics=metrics)
    return None if g.failed else run_id
