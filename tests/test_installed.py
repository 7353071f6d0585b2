"""The package installed non-editable (a wheel's files, no checkout around them) still finds what it reads.

The project is copied (pyproject.toml, README.md, nirvana/), so the build leaves nothing in the
checkout, then `pip install --no-deps --no-build-isolation --target` puts it in a folder of its
own; every command runs from another directory with only that folder (and the venv's
dependencies) on the path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(site folder, an empty working directory) of a non-editable install of this checkout."""
    base = tmp_path_factory.mktemp("installed")
    src = base / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(ROOT / "nirvana", src / "nirvana", ignore=shutil.ignore_patterns("__pycache__"))
    site = base / "site"
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-compile", "--quiet"]
    result = subprocess.run([*cmd, "--target", str(site), str(src)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    return site, elsewhere


def _run(installed, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    site, cwd = installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)  # the installed copy only: never the checkout
    env.pop("NIRVANA_DATA_DIR", None)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_wheel_ships_the_library_data_and_no_checkout_paths(installed):
    site, cwd = installed
    assert (site / "nirvana" / "assets" / "prompts.json").is_file()
    assert (site / "nirvana" / "assets" / "paper_reference.json").is_file()
    script = (
        "import nirvana, json\n"
        "from nirvana.measure.generation import load_prompts\n"
        "from nirvana.reference import paper_reference, reference_rows\n"
        "from nirvana.bench import gpu, quality_config as quality, speed, gamma\n"
        "from nirvana.data.text import data_dir\n"
        "from nirvana.store.paths import checkout_root\n"
        "print(json.dumps({'file': nirvana.__file__, 'prompts': len(load_prompts()),\n"
        "    'speed_rows': len(reference_rows('speed')), 'paper_a100': gpu.paper_a100(),\n"
        "    'outs': [str(m.DEFAULT_OUT) for m in (gpu, quality, speed, gamma)],\n"
        "    'data_dir': data_dir(), 'checkout': checkout_root()}, default=str))\n"
    )
    result = _run(installed, "-c", script)
    assert result.returncode == 0, result.stderr
    import json

    facts = json.loads(result.stdout)
    assert Path(facts["file"]).is_relative_to(site)
    assert facts["prompts"] >= 6 and facts["speed_rows"] >= 2
    assert facts["paper_a100"]["pruned50_ktokens_per_s"] == 19.50
    assert facts["checkout"] is None and facts["data_dir"] is None  # no ../shared/data guessed beside site-packages
    assert all(Path(out).parent == cwd / "benchmarks" for out in facts["outs"])  # never inside the install


@pytest.mark.slow
def test_installed_cli_generates_with_the_embedded_model(installed, persistent_cache):
    result = _run(
        installed, "-m", "nirvana", "generate", "--model", "smollm2-135m", "--prompt", "The capital of France is",
        "--max-new-tokens", "4", "--device", "cpu",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("The capital of France is ") and len(result.stdout.strip()) > 25


def test_in_a_checkout_benchmarks_and_data_are_the_repositorys():
    from nirvana.bench import gpu
    from nirvana.data import text
    from nirvana.store.paths import benchmarks_dir, checkout_root

    assert checkout_root() == ROOT
    assert benchmarks_dir("gpu") == gpu.DEFAULT_OUT == ROOT / "benchmarks" / "gpu"
    assert (ROOT.parent / "shared" / "data") == text.SIBLING_DATA_DIR
