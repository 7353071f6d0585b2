"""Every command refuses bad plain arguments before it waits for the device lock or loads a model (issue 43).

A bad value used to cost a model load (about 60 s for `prune --sparsity 1.5`), or minutes behind
another job's lock; a mistyped model name used to start with a hub connection error. Here the lock
and the loader are made to fail loudly (`guarded`), so a check that ran after either would show; one
test holds the real lock from another process and runs the real `python -m nirvana`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_bad_input import run_cli as bad_input_run_cli

import nirvana.checkpoints.loading
import nirvana.cli.common
import nirvana.cli.recover_cmds
from nirvana.cli import main
from nirvana.errors import ModelNotFound
from nirvana.guard.locks import current_holder, heavy_work
from nirvana.models.registry import REGISTRY, check_hub_reference, closest_names, model_reference

ROOT = Path(__file__).resolve().parents[1]
ACCEPTS_SPARSITY = "sparsity must be a number in [0, 0.95]"
BASELINE_SPARSITY = "sparsity must be a number in [0, 1)"


class Reached(BaseException):
    """A command got past its checks: it asked for the device lock or for a model (a BaseException, so that
    the CLI's own handlers pass it up to the test)."""


def run_cli(argv: list[str]) -> tuple[int, str]:
    """`nirvana.cli.main(argv)` in-process (test_bad_input's): (exit code, stderr with the wrapping undone)."""
    code, err = bad_input_run_cli(argv)
    return code, " ".join(err.split())


@pytest.fixture
def guarded(monkeypatch):
    """The device lock and every model loader the CLI reaches raise `Reached`; no socket may be opened."""

    def reached(what):
        def fail(*args, **kwargs):
            raise Reached(what)

        return fail

    monkeypatch.setattr(nirvana.cli.common, "heavy_work", reached("the device lock"))
    # the CLI imports `load_model` from its module when a command loads (never at import: nirvana.cli stays light)
    monkeypatch.setattr(nirvana.checkpoints.loading, "load_model", reached("a model load"))
    monkeypatch.setattr(socket, "create_connection", reached("a network connection"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def lock_held_elsewhere(tmp_path):
    """Another process holds the device lock `prune` takes (`heavy_work` on the default device), until the test ends."""
    holder = (
        "import sys\n"
        "from nirvana.guard.locks import heavy_work\n"
        "with heavy_work('auto', who='another job (test holder)'):\n"
        "    print('held', flush=True)\n"
        "    sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", holder], cwd=ROOT, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        assert current_holder("auto") == "another job (test holder)"
        yield
    finally:
        proc.stdin.close()
        proc.wait(60)


def _env() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}  # NIRVANA_CACHE_DIR: this test's own
    env.pop("NIRVANA_DEBUG", None)
    return env


# ---------------------------------------------------------------- (a) the acceptance command, behind a held lock


def test_prune_refuses_sparsity_1_5_while_another_process_holds_the_lock(lock_held_elsewhere, tmp_path):
    """The lock is held until the test ends, so a `prune` that queued for it would never return: it answers (exit
    2) inside the timeout only by refusing first. How fast is the next test's concern (what a refusal imports);
    a wall-clock bound here failed on a loaded 2-core machine without anything being wrong."""
    out = tmp_path / "x"
    argv = ["prune", "--model", "smollm2-135m", "--sparsity", "1.5", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "nirvana", *argv], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120
    )
    message = " ".join(proc.stderr.split())
    assert proc.returncode == 2, proc.stderr
    assert f"error: InvalidInput: {ACCEPTS_SPARSITY}" in message and "got 1.5" in message
    assert "waiting for" not in message and "Traceback" not in message  # it never queued for the lock
    assert not out.exists()


HEAVY = ("transformers.modeling_utils", "scipy", "pandas", "plotly", "peft", "ray")


@pytest.mark.parametrize(
    "argv",
    [
        ["prune", "--model", "smollm2-135m", "--sparsity", "1.5", "--out", "{d}/x"],
        ["sweep", "--model", "smollm2-135m", "--sparsities", "0.1,1.5", "--out", "{d}/s.json"],
    ],
    ids=["prune", "sweep"],
)
def test_a_refused_command_imports_no_model_code(argv, tmp_path):
    """What keeps a refusal in seconds: the CLI's checks import torch, not transformers' modeling (about 2-5 s
    more on this machine), scipy, pandas, plotly, peft or ray; `import nirvana` imports nothing heavy at all."""
    argv = [a.replace("{d}", str(tmp_path)) for a in argv]
    script = (
        "import sys\n"
        "import nirvana\n"
        "assert 'torch' not in sys.modules, 'import nirvana imported torch'\n"
        "from nirvana.cli import main\n"
        f"code = main({argv!r})\n"
        f"print(code, sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2", "[]"], (proc.stdout, proc.stderr[-500:])
    assert not any(tmp_path.iterdir())


def test_prune_in_process_neither_loads_nor_waits(lock_held_elsewhere, tmp_path, monkeypatch):
    def no_load(*args, **kwargs):
        raise Reached("a model load")

    monkeypatch.setattr(nirvana.checkpoints.loading, "load_model", no_load)
    # the real lock, with a bound: a command that queued for it would fail here as Busy instead of hanging
    monkeypatch.setattr(nirvana.cli.common, "heavy_work", lambda *a, **k: heavy_work(*a, **k, timeout=5))
    out = tmp_path / "x"
    code, err = run_cli(["prune", "--model", "smollm2-135m", "--sparsity", "1.5", "--out", str(out)])
    assert code == 2 and f"{ACCEPTS_SPARSITY}" in err and "got 1.5" in err, err
    assert "Busy" not in err and not out.exists()


# ---------------------------------------------------------------- (b) other bad values, before the lock and the load


def _prune(*extra: str):
    head = ["prune", "--model", "smollm2-135m", "--sparsity", "0.3"]
    return lambda d: [*head, *(a.replace("{d}", str(d)) for a in extra), "--out", str(d / "out")]


def _sweep(*extra: str):
    return lambda d: ["sweep", "--model", "smollm2-135m", *extra, "--out", str(d / "sweep.json")]


def _cmd(*argv: str):
    return lambda d: [a.replace("{d}", str(d)) for a in argv]


# id -> (argv from the test's folder, substrings of the one-paragraph message)
BAD_VALUES = {
    "gamma-zero": (_prune("--gamma", "0"), ["InvalidInput: gamma must be a positive number", "got 0.0"]),
    "gamma-negative": (_prune("--gamma", "-2"), ["gamma must be a positive number", "got -2.0"]),
    "align-not-a-power-of-two": (_prune("--align", "3"), ["align must be a power of two", "got 3"]),
    "allocation-of-t5-only": (
        _prune("--allocation", "per-stack"),
        ["allocation 'per-stack' is not a decoder-only allocation", "accepted: global"],
    ),
    "method-unknown": (_prune("--method", "sparsegpt"), ["unknown method 'sparsegpt'", "nirvana, llm-pruner, flap"]),
    "method-setting-bad": (
        _prune("--method", "flap", "--method-settings", '{"metric": "L2"}'),
        ["flap metric must be one of WIFV, IFV, WIFN, got 'L2'"],
    ),
    "method-settings-not-json": (_prune("--method-settings", "{metric"), ["--method-settings", "not valid JSON"]),
    "method-settings-not-an-object": (_prune("--method-settings", "[1, 2]"), ["must be a JSON object"]),
    "baseline-sparsity-1": (
        lambda d: ["prune", "--model", "smollm2-135m", "--method", "flap", "--sparsity", "1", "--out", str(d / "o")],
        [BASELINE_SPARSITY, "got 1.0"],
    ),
    "nirvana-setting-on-a-baseline": (_prune("--method", "flap", "--gamma", "2"), ["gamma is a setting of method"]),
    "align-on-a-baseline": (_prune("--method", "flap", "--align", "16"), ["align is a setting of method nirvana"]),
    "reconstruct-a-rotation": (
        _prune("--method", "slicegpt", "--reconstruct"),
        ["rotates and slices the residual stream", "Drop --reconstruct"],
    ),
    "criterion-unknown": (_prune("--criterion", "bogus"), ["unknown criterion 'bogus'", "nirvana, taylor"]),
    "samples-zero": (_prune("--samples", "0"), ["samples N must be an integer in [1, 4096], got 0"]),
    "calibration-dataset-unknown": (_prune("--calib", "wikitext2-vaild"), ["unknown dataset 'wikitext2-vaild'"]),
    "calibration-file-missing": (_prune("--calib", "{d}/none.txt"), ["does not exist"]),
    "select-calib-one": (_prune("--select-calib", "1"), ["select_calib needs at least 2"]),
    "select-calib-data-free": (
        _prune("--select-calib", "3", "--criterion", "magnitude"),
        ["calibration selection needs a data-driven criterion"],
    ),
    "plan-missing": (_prune("--plan", "{d}/none.json"), ["PlanMismatch: cannot read plan"]),
    "out-is-a-file": (
        _cmd("prune", "--model", "smollm2-135m", "--sparsity", "0.3", "--out", "{d}/file.txt"),
        ["is a file; pass a folder"],
    ),
    "score-criterion-unknown": (
        _cmd("score", "--model", "smollm2-135m", "--criterion", "wandaa", "--out", "{d}/s"),
        ["unknown criterion 'wandaa'"],
    ),
    "sweep-sparsity-out-of-range": (_sweep("--sparsities", "0.2,1.5"), [ACCEPTS_SPARSITY, "got 1.5"]),
    "sweep-gamma-zero": (_sweep("--gammas", "0"), ["gamma must be a positive number"]),
    "sweep-metric-unknown": (_sweep("--metric", "bleu"), ["unknown --metric 'bleu'"]),
    "sweep-out-is-a-folder": (
        _cmd("sweep", "--model", "smollm2-135m", "--out", "{d}"),
        ["is a folder; pass a file name"],
    ),
    "select-calib-sparsity": (
        _cmd("select-calib", "--model", "smollm2-135m", "--sparsity", "0.99"),
        [ACCEPTS_SPARSITY, "got 0.99"],
    ),
    "select-calib-same-seed-twice": (
        _cmd("select-calib", "--model", "smollm2-135m", "--sparsity", "0.2", "--seeds", "3,3"),
        ["distinct integers"],
    ),
    "gamma-search-gammas": (
        _cmd("gamma-search", "--model", "smollm2-135m", "--gammas", "1,-1"),
        ["gammas must be positive numbers"],
    ),
    "gamma-search-sparsity": (
        _cmd("gamma-search", "--model", "smollm2-135m", "--sparsity", "0.2,2"),
        [ACCEPTS_SPARSITY, "got 2.0"],
    ),
    "eval-dataset-unknown": (_cmd("eval", "--model", "smollm2-135m", "--ppl", "wikitext3"), ["unknown dataset"]),
    "eval-task-unknown": (_cmd("eval", "--model", "smollm2-135m", "--tasks", "arc_eazy"), ["unknown accuracy task"]),
    "generate-max-new-tokens": (
        _cmd("generate", "--model", "smollm2-135m", "--max-new-tokens", "0"),
        ["--max-new-tokens must be an integer in [1, 4096]"],
    ),
    "dtype-unknown": (_cmd("info", "--model", "smollm2-135m", "--dtype", "int3"), ["dtype 'int3' is not supported"]),
    "device-unknown": (_cmd("info", "--model", "smollm2-135m", "--device", "tpu"), ["auto, cpu, cuda or cuda:N"]),
    "recover-steps-zero": (
        _cmd("recover", "--model", "smollm2-135m", "--steps", "0", "--out", "{d}/r"),
        ["--steps must be a positive integer"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_VALUES), ids=list(BAD_VALUES))
def test_a_bad_value_is_refused_before_the_lock_and_the_load(case, guarded, tmp_path):
    (tmp_path / "file.txt").write_text("not a folder\n")
    build, fragments = BAD_VALUES[case]
    code, err = run_cli(build(tmp_path))
    assert code == 2, err
    assert "Reached" not in err and "Traceback" not in err and "internal error" not in err
    for fragment in fragments:
        assert fragment in err, f"{fragment!r} not in {err!r}"
    assert not (tmp_path / "out").exists() and not (tmp_path / "sweep.json").exists()


def test_good_values_reach_the_lock(guarded, tmp_path):
    """The checks refuse only what is wrong: a good command goes on to the lock (here: `Reached`)."""
    with pytest.raises(Reached, match="the device lock"):
        main(["prune", "--model", "smollm2-135m", "--sparsity", "0.3", "--out", str(tmp_path / "o")])
    with pytest.raises(Reached, match="the device lock"):
        main(["sweep", "--model", "smollm2-135m", "--method", "flap", "--sparsities", "0.2,0.5", "--metric", "kl",
              "--out", str(tmp_path / "s.json")])  # fmt: skip
    with pytest.raises(Reached, match="a model load"):
        main(["info", "--model", "smollm2-135m"])


def _folder(path: Path, model_type: str) -> str:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": model_type}))
    return str(path)


def test_what_is_refused_is_the_models_family_read_from_its_config(guarded, tmp_path):
    """Every family has one sparsity range, [0, 0.95]; its allocations and criteria differ (a T5 ranks per stack,
    a decoder-only model uniformly per layer; Wanda reads a decoder layer). A folder's config.json says which
    family, before any load."""
    t5, llama = _folder(tmp_path / "t5", "t5"), _folder(tmp_path / "llama", "llama")
    for model in (llama, t5):
        code, err = run_cli(["prune", "--model", model, "--sparsity", "0.97", "--out", str(tmp_path / "o")])
        assert code == 2 and ACCEPTS_SPARSITY in err, err
    code, err = run_cli(["prune", "--model", t5, "--criterion", "wanda", "--sparsity", "0.3", "--out", str(tmp_path)])
    assert code == 2 and "not available on T5" in err, err
    code, err = run_cli(["prune", "--model", llama, "--allocation", "per-stack", "--sparsity", "0.3", "--out", "o"])
    assert code == 2 and "allocation 'per-stack' is not a decoder-only allocation" in err, err
    with pytest.raises(Reached, match="the device lock"):  # a T5's own allocation: left to the model
        main(["prune", "--model", t5, "--allocation", "per-stack", "--sparsity", "0.3", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- (c) mistyped model names, with no network


@pytest.mark.parametrize("typo", ["smollm2-13m", "smolm2-135m", "SmolLM2-135M", "smollm-135m"])
@pytest.mark.parametrize(
    "command",
    [
        ["info"],
        ["generate"],
        ["prune", "--sparsity", "0.3", "--out", "{d}/o"],
        ["score", "--out", "{d}/s"],
        ["eval"],
        ["sweep", "--out", "{d}/s.json"],
        ["select-calib", "--sparsity", "0.2"],
        ["gamma-search"],
        ["recover", "--steps", "1", "--out", "{d}/r"],
        ["bench", "quality", "--out-dir", "{d}/q"],
    ],
    ids=lambda c: "-".join(c[:2]) if c[0] == "bench" else c[0],
)
def test_a_mistyped_model_gets_the_closest_registry_name(typo, command, guarded, tmp_path):
    code, err = run_cli([*(a.replace("{d}", str(tmp_path)) for a in command), "--model", typo])
    assert code == 2, err
    assert err.startswith(f"error: ModelNotFound: model '{typo}' not found: not a registry name, not a local folder")
    assert "Did you mean smollm2-135m?" in err and f"Registry names: {', '.join(REGISTRY)}." in err
    assert "huggingface.co" not in err and "Reached" not in err


def test_compare_and_teacher_flags_are_checked_too(guarded, tmp_path):
    code, err = run_cli(["compare", "--dense", "smollm2-135m", "--pruned", "gemma3-207m"])
    assert code == 2 and "model 'gemma3-207m' not found" in err and "Did you mean gemma3-270m?" in err, err
    argv = ["recover", "--model", "smollm2-135m", "--steps", "1", "--loss", "kd", "--teacher", "smollm2-315m"]
    code, err = run_cli([*argv, "--out", str(tmp_path / "r")])
    assert code == 2 and "Did you mean smollm2-135m?" in err, err


def test_a_hub_id_that_cannot_be_served_offline_names_the_registry(guarded):
    code, err = run_cli(["info", "--model", "HuggingFaceTB/SmolLM2-135M"])
    assert code == 2, err
    assert "it reads as a Hugging Face id, but the hub is not reachable from here" in err
    assert "not in the local Hugging Face cache" in err and "Did you mean smollm2-135m?" in err
    assert "Traceback" not in err and "couldn't connect" not in err and "Reached" not in err


def test_a_missing_path_says_it_does_not_exist(guarded, tmp_path):
    code, err = run_cli(["info", "--model", str(tmp_path / "nowhere")])
    assert code == 2 and f"model '{tmp_path / 'nowhere'}' not found: the path does not exist" in err, err


def test_the_library_classifies_and_suggests_without_loading(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert model_reference("smollm2-135m").kind == "registry"
    assert model_reference("smollm2-135m").model_type == "llama"
    assert model_reference(str(tmp_path)).kind == "local"
    assert model_reference("owner/name").kind == "hub"
    assert closest_names("smollm2-13m") == ["smollm2-135m"]
    assert closest_names("HuggingFaceTB/SmolLM2-135M-Instruct")[0] == "smollm2-135m"  # its base model's id
    assert closest_names("qwen-coder") == ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"]
    assert closest_names("zzz") == []
    with pytest.raises(ModelNotFound, match=r"not a Hugging Face id.*Did you mean smollm2-135m"):
        model_reference("smolm2-135m")  # a bare name close to a registry name: a typo
    assert model_reference("gpt2").kind == "hub"  # the hub's owner-less ids (gpt2, t5-small) are close to nothing
    with pytest.raises(ModelNotFound, match="hub is not reachable"):
        check_hub_reference(model_reference("gpt2"), reachable=False)
    check_hub_reference(model_reference("owner/name"), reachable=True)  # online: the load decides
    with pytest.raises(ModelNotFound, match="hub is not reachable"):
        check_hub_reference(model_reference("owner/name"), reachable=False)
