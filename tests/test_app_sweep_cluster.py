"""The Sweep page on a real local Ray cluster (NIRVANA_RAY_ADDRESS): it says where it runs and with how
many workers, measures the in-process sweep's points there, and draws them as they arrive."""

from __future__ import annotations

import pytest
from test_app_pages import app_env, compute, no_errors, small_data_dir  # noqa: F401 (fixtures)

from nirvana.cluster.ray_tasks import ENV, disconnect
from tests.ray_cluster import local_cluster


@pytest.fixture
def cluster_address():
    with local_cluster(num_cpus=2) as address:
        yield address
    disconnect()


def _sweep(at) -> list[dict]:
    compute(at, criterion="magnitude")
    at.switch_page("pages/sweep.py").run()
    no_errors(at)
    at.radio(key="sweep_metric").set_value("kl").run()
    at.text_input(key="sweep_sparsities").set_value("0.5").run()
    at.text_input(key="sweep_gammas").set_value("0.5, 2").run()
    at.checkbox(key="sweep_speed").uncheck().run()
    at.button(key="run_sweep").click().run()
    no_errors(at)
    return at.session_state["sweep"][0]


def test_the_sweep_page_runs_its_points_on_the_cluster_of_nirvana_ray_address(app_env, cluster_address, monkeypatch):  # noqa: F811
    from streamlit.testing.v1 import AppTest

    from tests.test_app_pages import ROOT, TIMEOUT

    monkeypatch.delenv(ENV, raising=False)
    here = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    here.run()
    local = _sweep(here)
    assert not [i for i in here.info if "Ray cluster" in i.value]

    monkeypatch.setenv(ENV, cluster_address)
    there = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    there.run()
    remote = _sweep(there)
    (info,) = [i.value for i in there.info if "Ray cluster" in i.value]
    assert f"Ray cluster at {cluster_address}: 1 node, 2 workers (1 CPU each)" in info and "fill in" in info
    assert [r["axis"] for r in remote] == [r["axis"] for r in local] == ["dense", "sparsity", "gamma", "gamma"]
    for a, b in zip(remote, local, strict=True):
        assert a["quality"] == pytest.approx(b["quality"], rel=1e-4, abs=1e-6)
        assert {k: v for k, v in a.items() if k != "quality"} == {k: v for k, v in b.items() if k != "quality"}
