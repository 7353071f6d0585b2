"""Past runs: every prune and evaluation is recorded on disk; list them after a restart and reopen a plan."""

from __future__ import annotations

from ui import routing

routing.require()  # first, before the heavy imports: see ui/routing.py

import pandas as pd
import streamlit as st

from nirvana.models.fingerprint import model_fingerprint
from nirvana.runs import clean_incomplete, list_runs, open_run
from ui import frame, state
from ui.errors import guard

EXPLANATION = """
**What is shown.** Every *Apply the plan* and every perplexity measurement on the Prune page, and
every `python -m nirvana prune / eval / compare / select-calib / gamma-search`, is written to the
runs folder (`NIRVANA_RUNS_DIR`, default inside the cache). A run is written to a temporary
folder and renamed into place when complete, so an interrupted run never appears here (its
unfinished folder is removed when this page opens, once its writer has stopped).

**Reopen** a run to see its settings, report and metrics; a run that holds a plan can be loaded
back (for the model it was made for: plans store unit indices that only make sense for their
own weights) and applied again on the Prune page.
"""


def _table(runs) -> pd.DataFrame:
    rows = []
    for r in runs:
        row = {"run": r.id, "kind": r.kind, "finished": r.finished}
        row.update({k: v for k, v in r.summary.items() if isinstance(v, (int, float, str)) or v is None})
        rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    st.title("Past runs")
    frame.explain(EXPLANATION)
    removed = clean_incomplete()  # folders of interrupted runs whose writer process is gone
    if removed:
        st.caption(f"Removed {len(removed)} unfinished run folder(s) left by an interrupted prune or evaluation.")
    runs = list_runs()
    if not runs:
        st.info("No completed runs yet: apply a plan on the **Prune & compare** page (or run `nirvana prune`).")
        return
    st.dataframe(_table(runs), hide_index=True, width="stretch")
    chosen = st.selectbox("Reopen a run", [r.id for r in runs], key="run_id")
    with guard("reopening the run") as g:
        run = open_run(chosen)
    if g.failed:
        return
    cols = st.columns(2)
    cols[0].markdown("**Settings**")
    cols[0].json(run.settings, expanded=False)
    cols[1].markdown("**Summary**")
    cols[1].json(run.summary, expanded=True)
    if run.report:
        with st.expander("Report"):
            st.json(run.report)
    if run.metrics:
        with st.expander("Metrics"):
            st.json(run.metrics)
    if run.plan is None:
        st.caption("This run holds no plan.")
        return
    if st.button("Load this plan", type="primary", key="load_run_plan"):
        lm = state.model()
        if lm is None:
            return
        with guard("loading the plan") as g:
            run.plan.check_model(model_fingerprint(lm.model))
        if not g.failed:
            state.session.forget("pruned", "evals")
            state.session.plan = run.plan
            st.success(f"Plan of run `{run.id}` loaded: apply it on the **Prune & compare** page.")
            st.page_link("pages/prune.py", label="Go to Prune & compare", icon=":material/content_cut:")


main()
