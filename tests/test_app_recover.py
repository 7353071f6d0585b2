"""AppTest of the Recover tab on Prune & compare (tiny model): live curve, stop, before/after, save."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import test_app_pages as page_tests
from test_app_pages import app_env, at, small_data_dir  # noqa: F401  (the page tests' fixtures)

from nirvana.recovery.teacher_cache import default_directory
from nirvana.runs import open_run


@pytest.fixture
def app(at):  # noqa: F811  (a fixture taking the imported one)
    return at


def _set(app, **values):
    for key, value in values.items():
        app.number_input(key=key).set_value(value).run()


def _wait(app, predicate, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app.run()
        if predicate(app):
            # The job may have finished after that run drew the page: draw it once more with the result.
            app.run()
            return
        time.sleep(0.3)
    raise AssertionError("the recovery job did not reach the expected state")


def _job(app):
    # AppTest's session state has `in` and [] but no .get
    return app.session_state["recovery_job"] if "recovery_job" in app.session_state else None  # noqa: SIM401


def _curve(app):
    specs = [json.loads(el.proto.spec) for el in app.get("plotly_chart")]
    return [s for s in specs if s["layout"]["title"]["text"] == "Recovery loss"]


def test_recover_tab_trains_the_pruned_copy_and_saves(app, tmp_path):
    page_tests.apply_a_plan(app, 0.3)
    pruned_copy = app.session_state["pruned"].model
    pruned_before = {k: v.clone() for k, v in pruned_copy.state_dict().items()}
    defaults = (app.number_input(key="rec_r").value, app.number_input(key="rec_lr").value)
    assert defaults == (8, 1e-4)
    assert any("tokens**; estimated" in c.value for c in app.caption)
    _set(app, rec_steps=3, rec_batch=2, rec_lr=0.01, rec_r=2)
    app.selectbox(key="rec_seq_len").set_value(16).run()
    app.selectbox(key="rec_data").set_value("calibration").run()
    app.button(key="rec_start").click().run()
    page_tests.no_errors(app)
    _wait(app, lambda a: _job(a) is not None and _job(a).status == "done")
    page_tests.no_errors(app)
    job = _job(app)
    assert job.result.complete and job.result.steps_done == 3
    curve = _curve(app)[0]
    assert [t["name"] for t in curve["data"]] == ["training loss", "held-out loss"]
    # A copy of the session's pruned copy is trained: the pruned copy stays as it was, for "before".
    assert all(v.equal(pruned_before[k]) for k, v in app.session_state["pruned"].model.state_dict().items())
    assert app.session_state["recovered"]["model"] is job.result.model
    # Recorded for the Runs page, like a prune or an evaluation.
    run_id = app.session_state["recovered"]["run_id"]
    run = open_run(run_id)
    assert run.kind == "recover" and run.summary["steps_done"] == 3 and run.summary["tokens_trained"] == 3 * 2 * 16
    assert run.settings["recovery"]["r"] == 2 and any(run_id in s.value for s in app.success)
    app.button(key="rec_ppl").click().run()
    page_tests.no_errors(app)
    labels = {m.label: m.value for m in app.metric}
    assert float(labels["Recovered perplexity"]) > 1 and float(labels["Pruned perplexity"]) > 1
    app.text_input(key="rec_save_dir").set_value(str(tmp_path / "rec")).run()
    app.button(key="rec_save").click().run()
    page_tests.no_errors(app)
    assert json.loads((Path(tmp_path) / "rec" / "recovery.json").read_text())["steps_done"] == 3


def test_recover_tab_distills_from_the_dense_model_and_draws_both_parts(app):
    page_tests.apply_a_plan(app, 0.3)
    _set(app, rec_steps=3, rec_batch=2, rec_lr=0.01, rec_r=2)
    app.selectbox(key="rec_seq_len").set_value(16).run()
    app.selectbox(key="rec_data").set_value("calibration").run()
    app.selectbox(key="rec_loss").set_value("mix").run()
    assert any("Teacher: the dense" in i.value for i in app.info)
    keep = app.checkbox(key="rec_teacher_cache")
    assert "Keep the teacher's logits on disk (up to" in keep.label and "GiB in fp32)" in keep.label
    keep.check().run()
    app.button(key="rec_start").click().run()
    _wait(app, lambda a: _job(a) is not None and _job(a).status == "done")
    page_tests.no_errors(app)
    result = _job(app).result
    assert result.complete and result.config.loss == "mix" and set(result.train_parts[-1][1]) == {"lm", "kd"}
    cache = result.teacher_cache  # kept in the cache folder, beside the others
    assert cache["misses"] == cache["batches"] > 0 and cache["directory"] == str(default_directory())
    assert len(list(default_directory().glob("*.safetensors"))) == cache["batches"]
    assert any("micro-batches read from the cache" in c.value for c in app.caption)
    assert len(result.heldout_kl) >= 2 and result.teacher
    names = [t["name"] for t in _curve(app)[0]["data"]]
    assert names == [
        "training loss",
        "held-out loss",
        "next-token part",
        "distillation part (KL to the teacher)",
        "held-out KL to the teacher",
    ]


def test_stop_keeps_the_last_whole_step(app):
    page_tests.apply_a_plan(app, 0.3)
    _set(app, rec_steps=400, rec_batch=2, rec_lr=0.001, rec_r=2)
    app.selectbox(key="rec_seq_len").set_value(16).run()
    app.selectbox(key="rec_data").set_value("calibration").run()
    app.button(key="rec_start").click().run()
    _wait(app, lambda a: len(_job(a).steps) >= 3)
    app.button(key="rec_stop").click().run()
    _wait(app, lambda a: _job(a).status == "done")
    page_tests.no_errors(app)
    result = _job(app).result
    assert result.status == "stopped" and 0 < result.steps_done < 400
    assert any("stopped" in w.value for w in app.warning)


def test_bad_rank_is_a_friendly_message(app):
    page_tests.apply_a_plan(app, 0.3)
    _set(app, rec_r=200)
    app.button(key="rec_start").click().run()
    assert not app.exception
    assert any("larger than layer" in e.value for e in app.error)


def test_evidence_page_shows_the_recovery_benchmark(app, monkeypatch, tmp_path):
    import nirvana.bench.recovery as bench
    import ui.recovery
    from nirvana.bench.rows import store_row

    monkeypatch.setattr(ui.recovery, "DEFAULT_OUT", tmp_path)
    pages = "pages" if (page_tests.ROOT / "pages" / "evidence.py").exists() else "app_pages"
    app.switch_page(f"{pages}/evidence.py").run()
    assert any("No recovery benchmark yet" in c.value for c in app.caption)
    row = {c: "" for c in bench.COLUMNS} | {
        "model": "smollm2-135m",
        "criterion": "nirvana",
        "allocation": "global",
        "sparsity": "0.5",
        "steps": "16",
        "data": "calibration",
        "seed": "0",
        "token_budget": "16384",
        "ppl_wikitext2_before": "230.1",
        "ppl_wikitext2_after": "120.5",
        "ppl_ptb_before": "400.2",
        "ppl_ptb_after": "250.0",
        "tokens_trained": "32768",
        "lora": "r8 a16 d0.05 lr0.0001 b16x128",
        "machine": "test machine",
    }
    store_row(tmp_path / "recovery.csv", row, bench.COLUMNS, bench.KEY)
    app.run()
    page_tests.no_errors(app)
    table = next(d.value for d in app.dataframe if "WikiText-2 after" in d.value.columns)
    assert list(table["WikiText-2 after"]) == [120.5] and list(table["criterion"]) == ["nirvana"]
    assert any("ranking before `nirvana`" in m.value for m in app.markdown)
