"""Safety rules: local paths under configured roots, size limits, no remote code, no pickle, no shell."""

from __future__ import annotations

import io
import json
import re
import shutil
import tokenize
from pathlib import Path

import pytest

from nirvana.errors import InvalidInput, ModelNotFound, NirvanaError
from nirvana.guard.safety import (
    MODEL_ROOTS_ENV,
    TEXT_ROOTS_ENV,
    FileTooLarge,
    PathNotAllowed,
    check_local_path,
    check_model_name,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def roots(tmp_path, monkeypatch):
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    monkeypatch.setenv(MODEL_ROOTS_ENV, str(allowed))
    return allowed, outside


def test_paths_are_unrestricted_when_no_roots_are_configured(tmp_path, monkeypatch):
    monkeypatch.delenv(MODEL_ROOTS_ENV, raising=False)
    assert check_local_path(tmp_path) == tmp_path.resolve()


def test_paths_outside_the_roots_are_refused_inside_accepted(roots):
    allowed, outside = roots
    (allowed / "m").mkdir()
    assert check_local_path(allowed / "m") == (allowed / "m").resolve()
    with pytest.raises(PathNotAllowed, match=MODEL_ROOTS_ENV) as info:
        check_local_path(outside)
    assert "outside the folders this server allows" in str(info.value)
    with pytest.raises(PathNotAllowed):  # ".." cannot climb out
        check_local_path(allowed / ".." / "outside")


def test_a_symlink_inside_a_root_pointing_outside_is_refused(roots):
    allowed, outside = roots
    (allowed / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathNotAllowed):
        check_local_path(allowed / "link")


def test_the_cache_dir_is_always_allowed_and_hub_ids_are_not_paths(roots):
    from nirvana.store.paths import cache_dir

    (cache_dir() / "models" / "x").mkdir(parents=True)
    check_local_path(cache_dir() / "models" / "x")
    check_model_name("HuggingFaceTB/SmolLM2-135M")  # a hub id: not a local path, not limited here
    check_model_name("smollm2-135m")
    with pytest.raises(PathNotAllowed):
        check_model_name("/etc")


def test_an_empty_roots_setting_allows_only_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(MODEL_ROOTS_ENV, "")
    with pytest.raises(PathNotAllowed):
        check_local_path(tmp_path)


def test_load_model_and_load_pruned_honour_the_model_roots(roots, tiny_with_tokenizer_dir):
    from nirvana.checkpoints.loading import load_model
    from nirvana.checkpoints.pruned import load_pruned

    with pytest.raises(PathNotAllowed, match="outside the folders"):
        load_model(str(tiny_with_tokenizer_dir))
    with pytest.raises(PathNotAllowed):
        load_pruned(tiny_with_tokenizer_dir)
    allowed, _ = roots
    shutil.copytree(tiny_with_tokenizer_dir, allowed / "tiny")
    assert load_model(str(allowed / "tiny")).source == "local"


def test_text_files_honour_the_text_roots(tmp_path, monkeypatch):
    from nirvana.data.text import load_text

    allowed = tmp_path / "texts"
    allowed.mkdir()
    (allowed / "a.txt").write_text("inside the root\n")
    (tmp_path / "b.txt").write_text("outside the root\n")
    monkeypatch.setenv(TEXT_ROOTS_ENV, str(allowed))
    assert load_text(str(allowed / "a.txt")).documents == ["inside the root"]
    with pytest.raises(PathNotAllowed, match=TEXT_ROOTS_ENV):
        load_text(str(tmp_path / "b.txt"))
    assert load_text("pydoc").documents  # names are not paths


def test_text_and_plan_files_over_the_size_limit_are_refused_before_reading(tmp_path, monkeypatch):
    from nirvana.data.text import load_text
    from nirvana.pruning.plan import PruningPlan

    big = tmp_path / "big.txt"
    big.write_text("word " * 1000)
    monkeypatch.setenv("NIRVANA_MAX_TEXT_MB", "0.001")  # ~1 KB
    with pytest.raises(FileTooLarge, match=r"is 4.88 KB, over the 1.02 KB limit for text files"):
        load_text(str(big))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"padding": "x" * 5000}))
    monkeypatch.setenv("NIRVANA_MAX_PLAN_MB", "0.001")
    with pytest.raises(FileTooLarge, match="plan files"):
        PruningPlan.load(plan)


def _custom_code_folder(base: Path, src: Path | None, model_type: str) -> tuple[Path, Path]:
    """A model folder whose config points at custom code that would create `marker` if it ever ran."""
    folder = base / f"remote-{model_type}"
    if src is not None:
        shutil.copytree(src, folder)
    else:
        folder.mkdir()
    marker = base / f"code-ran-{model_type}"
    code = f"open({str(marker)!r}, 'w').write('ran')\nfrom transformers import LlamaConfig as EvilConfig\n"
    (folder / "evil.py").write_text(code)
    config = json.loads((folder / "config.json").read_text()) if src else {}
    config.update(
        model_type=model_type,
        auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"},
    )
    (folder / "config.json").write_text(json.dumps(config))
    return folder, marker


def test_remote_code_is_refused_by_default_and_never_runs(tmp_path):
    from nirvana.checkpoints.loading import load_model

    folder, marker = _custom_code_folder(tmp_path, None, "evilnet")
    with pytest.raises(InvalidInput, match="trust_remote_code=True") as info:
        load_model(str(folder))
    assert "--trust-remote-code" in str(info.value)
    assert not marker.exists()


def test_a_known_model_type_with_custom_code_loads_the_builtin_class_without_running_it(
    tmp_path, tiny_with_tokenizer_dir
):
    from nirvana.checkpoints.loading import load_model

    folder, marker = _custom_code_folder(tmp_path, tiny_with_tokenizer_dir, "llama")
    lm = load_model(str(folder))
    assert type(lm.model).__module__.startswith("transformers.")
    assert not marker.exists()


def test_pickled_weights_are_refused_without_unpickling(tmp_path, tiny_with_tokenizer_dir, monkeypatch):
    import torch
    from safetensors.torch import load_file

    from nirvana.checkpoints.loading import load_model

    folder = tmp_path / "bin-only"
    shutil.copytree(tiny_with_tokenizer_dir, folder)
    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()

    def no_unpickling(*args, **kwargs):
        raise AssertionError("torch.load was called on a user file")

    monkeypatch.setattr(torch, "load", no_unpickling)
    with pytest.raises(ModelNotFound, match=r"pickled \.bin weights are never loaded"):
        load_model(str(folder))


def test_a_pruned_folder_with_only_pickled_weights_is_refused(tmp_path):
    from nirvana.checkpoints.pruned import _read_state_dict
    from nirvana.errors import CorruptCheckpoint

    (tmp_path / "pytorch_model.bin").write_bytes(b"not even looked at")
    with pytest.raises(CorruptCheckpoint, match="pickled weights are never loaded"):
        _read_state_dict(tmp_path)


# Patterns that must not appear in the library or the app: unpickling, shell commands, eval/exec of text.
FORBIDDEN = {
    "pickle module": r"^\s*(import|from)\s+(c?pickle|dill|joblib)\b",
    "torch.load without weights_only=True": r"torch\.load\((?![^)]*weights_only\s*=\s*True)",
    "np.load with allow_pickle=True": r"allow_pickle\s*=\s*True",
    "shell=True": r"shell\s*=\s*True",
    "os.system / os.popen": r"\bos\.(system|popen)\(",
    "eval/exec of text": r"(?<![.\w])(eval|exec)\(",
    "trust_remote_code switched on": r"trust_remote_code\s*=\s*True",
}


def _sources():
    files = sorted((ROOT / "nirvana").rglob("*.py"))
    files += [ROOT / "app.py"] if (ROOT / "app.py").exists() else []
    for folder in ("pages", "ui"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


@pytest.mark.parametrize("rule", list(FORBIDDEN), ids=list(FORBIDDEN))
def test_no_unsafe_calls_in_the_source(rule):
    pattern = re.compile(FORBIDDEN[rule], re.MULTILINE)
    hits = []
    for path in _sources():
        text = path.read_text()
        for lineno, code in _code_lines(text).items():
            if pattern.search(code):
                hits.append(f"{path.relative_to(ROOT)}:{lineno}: {text.splitlines()[lineno - 1].strip()}")
    assert not hits, f"{rule}:\n" + "\n".join(hits)


def _code_lines(text: str) -> dict[int, str]:
    """Each line as written, with string literals (docstrings, messages, load instructions) and comments blanked."""
    lines = [list(line) for line in text.splitlines()]
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type not in (tokenize.STRING, tokenize.COMMENT):
            continue
        (row, col), (end_row, end_col) = tok.start, tok.end
        for r in range(row, end_row + 1):
            line = lines[r - 1]
            lo, hi = (col if r == row else 0), (end_col if r == end_row else len(line))
            line[lo:hi] = " " * (hi - lo)
    return {n: "".join(chars) for n, chars in enumerate(lines, 1)}


def test_the_source_scan_sees_calls_not_words():
    code = _code_lines('x = f(trust_remote_code=True)  # ok\n"""trust_remote_code=True in a docstring"""\n')
    assert re.search(FORBIDDEN["trust_remote_code switched on"], code[1])
    assert not re.search(FORBIDDEN["trust_remote_code switched on"], code[2])


def test_trust_remote_code_defaults_to_false_everywhere():
    import inspect

    from nirvana.checkpoints.loading import load_model

    assert inspect.signature(load_model).parameters["trust_remote_code"].default is False
    from nirvana.cli import build_parser

    args = build_parser().parse_args(["info"])
    assert args.trust_remote_code is False


def test_safety_errors_are_nirvana_errors():
    assert issubclass(PathNotAllowed, NirvanaError) and issubclass(FileTooLarge, NirvanaError)
