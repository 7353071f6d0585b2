"""Pruned folders load with stock transformers where nirvana is not importable; card; push.

The stock loads run in a child Python (`-I`, `sys.modules["nirvana"] = None`), so a hidden
import of nirvana from the modeling file would fail the test, as it would for a colleague.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import random_batch

from nirvana.checkpoints.loading import load_model
from nirvana.checkpoints.pruned import save_pruned
from nirvana.export.card import CARD_FILE, write_model_card
from nirvana.export.modeling import CLASS_FOR_MODEL_TYPE, MODELING_FILE, MODELING_SOURCE, is_stock_loadable
from nirvana.models.shapes import model_shape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.plan import PruningPlan
from nirvana.pruning.slicing import apply_plan
from nirvana.scoring.criteria import compute_scores
from tests.tiny import TINY_FAMILIES, tiny_config, tiny_model

ROOT = Path(__file__).resolve().parents[1]
NEW_TOKENS = 8

# Runs in a Python where `import nirvana` fails. argv: a JSON list of {"dir", "ref"} and the parent's torch
# thread count (the reference logits' sum order: an earlier test may have set 1 thread); prints one JSON line.
CHILD = textwrap.dedent(
    """
    import json, sys, tempfile
    sys.modules["nirvana"] = None  # `import nirvana` (and nirvana.*) raises ImportError from here on
    try:
        import nirvana  # noqa: F401
        raise SystemExit("nirvana is importable in the child")
    except ImportError:
        pass
    from pathlib import Path
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(int(sys.argv[2]))
    out = []
    for case in json.loads(sys.argv[1]):
        ref = torch.load(case["ref"])
        remote = case.get("remote", True)  # False: a plain stock load, no trust_remote_code at all
        model, info = AutoModelForCausalLM.from_pretrained(
            case["dir"], trust_remote_code=remote, output_loading_info=True
        )
        model.eval()
        with torch.no_grad():
            logits = model(ref["ids"]).logits
        torch.testing.assert_close(logits, ref["logits"], rtol=1e-5, atol=1e-5)
        tokens = model.generate(ref["ids"][:1], max_new_tokens=ref["new"], do_sample=False)
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            saved = json.loads((Path(tmp) / "config.json").read_text())
            again = AutoModelForCausalLM.from_pretrained(tmp, trust_remote_code=remote).eval()
            with torch.no_grad():
                round_trip = torch.equal(again(ref["ids"]).logits, logits)
            file_kept = (Path(tmp) / "modeling_nirvana.py").exists()
        bf16 = AutoModelForCausalLM.from_pretrained(case["dir"], trust_remote_code=remote, dtype=torch.bfloat16,
                                                    device_map="auto")
        bf16_tokens = bf16.generate(ref["ids"][:1], max_new_tokens=2, do_sample=False)
        out.append({
            "dir": case["dir"],
            "class": type(model).__name__,
            "loading_info": {k: sorted(map(str, v)) for k, v in info.items() if v},
            "max_diff": (logits - ref["logits"]).abs().max().item(),
            "same_tokens": torch.equal(tokens, ref["tokens"]),
            "round_trip_equal": round_trip,
            "file_kept": file_kept,
            "auto_map": saved.get("auto_map"),
            "bf16_dtype": str(bf16.dtype),
            "bf16_generated": int(bf16_tokens.shape[1]),
        })
    print(json.dumps(out))
    """
)


def stock_load(cases: list[dict], tmp_path: Path) -> list[dict]:
    """Load each folder with stock transformers in a child Python where nirvana cannot be imported."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NIRVANA_DEBUG")}
    env["HF_MODULES_CACHE"] = str(tmp_path / "hf_modules")  # the dynamic-module copy of modeling_nirvana.py
    proc = subprocess.run(
        [sys.executable, "-I", str(script), json.dumps(cases), str(torch.get_num_threads())],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def reference(model, folder: Path, ids: torch.Tensor, new: int = NEW_TOKENS) -> dict:
    """The logits and greedy tokens the stock load must reproduce, saved beside the folder."""
    with torch.no_grad():
        logits = model(ids).logits
    tokens = model.generate(ids[:1], max_new_tokens=new, do_sample=False, pad_token_id=0)
    path = folder.with_suffix(".ref.pt")
    torch.save({"ids": ids, "logits": logits, "tokens": tokens, "new": new}, path)
    return {"dir": str(folder), "ref": str(path)}


def pruned_tiny(family: str, vocab: int, sparsity: float = 0.5, **overrides):
    # Gemma-2 has no sdpa path in transformers; the rest load with sdpa, as load_pruned builds them.
    attn = "eager" if family == "gemma2" else "sdpa"
    model = tiny_model(family, attn_implementation=attn, vocab_size=vocab, **overrides)
    scores = compute_scores(model, "nirvana", random_batch(vocab=100), use_cache=False)
    plan = allocate(scores, model_shape(model), Allocation(sparsity))
    return apply_plan(model, plan), plan


def test_modeling_file_imports_only_torch_and_transformers_and_names_every_family():
    tree = ast.parse(MODELING_SOURCE.read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative imports would need more files in every folder"
            roots.add(node.module.split(".")[0])
    assert roots <= {"__future__", "torch", "transformers"}, roots
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert set(CLASS_FOR_MODEL_TYPE.values()) <= classes
    from nirvana.models.architectures import ARCHITECTURES

    assert set(CLASS_FOR_MODEL_TYPE) == set(ARCHITECTURES)  # every family in the table loads stock


def test_every_tiny_family_loads_with_stock_transformers_without_nirvana(tmp_path, smollm2):
    """GQA everywhere, q/k/v biases (qwen2), q/k norms (qwen3), head_dim != D / Hq (gemma3_text)."""
    vocab = len(smollm2.tokenizer)
    ids = random_batch(vocab=100, n=2, t=12, seed=1).input_ids
    cases, widths = [], {}
    for family in TINY_FAMILIES:
        pruned, plan = pruned_tiny(family, vocab)
        folder = tmp_path / family
        save_pruned(pruned, smollm2.tokenizer, plan, folder)
        assert is_stock_loadable(folder) and (folder / CARD_FILE).exists()
        loaded = load_model(str(folder), dtype="float32", device="cpu")  # nirvana's own loader: the reference
        cases.append(reference(loaded.model, folder, ids))
        widths[family] = (plan.kept_kv_groups, plan.kept_neurons)
    assert any(len(set(kv)) > 1 or len(set(n)) > 1 for kv, n in widths.values())  # widths really differ by layer
    results = stock_load(cases, tmp_path)
    for family, result in zip(TINY_FAMILIES, results):
        assert result["class"] == CLASS_FOR_MODEL_TYPE[family]
        assert result["loading_info"] == {}, (family, result)  # nothing missing, unexpected or re-initialised
        assert result["same_tokens"], family
        assert result["round_trip_equal"] and result["file_kept"], family
        assert result["auto_map"] == {"AutoModelForCausalLM": f"modeling_nirvana.{CLASS_FOR_MODEL_TYPE[family]}"}
        assert result["bf16_dtype"] == "torch.bfloat16" and result["bf16_generated"] > ids.shape[1]


def test_gemma3_multimodal_and_the_reference_format_load_stock(tmp_path, smollm2):
    """Gemma-3 with a vision tower (layers under model.language_model), and a folder that carries only
    the authors' keys (modified_head_num / modified_intermediate_dimension)."""
    import transformers as tf

    vocab = len(smollm2.tokenizer)
    ids = random_batch(vocab=100, n=2, t=12, seed=2).input_ids
    text = tiny_config("gemma3_text", vocab_size=vocab).to_dict()
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28)
    config = tf.Gemma3Config(text_config=text, vision_config={**vision, "patch_size": 14}, mm_tokens_per_image=4)
    torch.manual_seed(0)
    gemma3 = tf.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    scores = compute_scores(gemma3, "nirvana", random_batch(vocab=100), use_cache=False)
    plan = allocate(scores, model_shape(gemma3), Allocation(0.5))
    pruned = apply_plan(gemma3, plan)
    save_pruned(pruned, smollm2.tokenizer, plan, tmp_path / "gemma3")
    # nirvana's own loader too: the folder holds transformers' legacy key names for this family
    reloaded = load_model(str(tmp_path / "gemma3"), dtype="float32").model
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, pruned(ids).logits)
    cases = [reference(pruned, tmp_path / "gemma3", ids)]

    llama, plan = pruned_tiny("llama", vocab)
    save_pruned(llama, smollm2.tokenizer, plan, tmp_path / "reference")
    cfg_path = tmp_path / "reference" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    del cfg["nirvana_layer_shapes"]
    cfg_path.write_text(json.dumps(cfg))
    cases.append(reference(load_model(str(tmp_path / "reference"), dtype="float32").model, tmp_path / "reference", ids))
    gemma, ref = stock_load(cases, tmp_path)
    assert gemma["class"] == "NirvanaGemma3ForConditionalGeneration" and gemma["loading_info"] == {}
    assert gemma["same_tokens"] and gemma["round_trip_equal"]
    assert ref["class"] == "NirvanaLlamaForCausalLM" and ref["same_tokens"] and ref["loading_info"] == {}


def test_uniform_widths_become_an_ordinary_checkpoint_that_loads_without_remote_code(tmp_path, smollm2):
    """`--allocation uniform` keeps the same widths in every layer: the config's globals say so, and
    transformers' own class loads it (so does any engine that runs the family)."""
    vocab = len(smollm2.tokenizer)
    ids = random_batch(vocab=100, n=2, t=12, seed=3).input_ids
    families = ("llama", "qwen2", "qwen3", "gemma3_text")
    cases = []
    for family in families:
        model = tiny_model(family, attn_implementation="sdpa", vocab_size=vocab)
        scores = compute_scores(model, "nirvana", random_batch(vocab=100), use_cache=False)
        plan = allocate(scores, model_shape(model), Allocation(0.5, kind="uniform"))
        folder = save_pruned(apply_plan(model, plan), smollm2.tokenizer, plan, tmp_path / family)
        cfg = json.loads((folder / "config.json").read_text())
        assert cfg["num_key_value_heads"] == plan.kept_kv_groups[0] < model.config.num_key_value_heads
        assert cfg["intermediate_size"] == plan.kept_neurons[0] and cfg["head_dim"] == model.config.head_dim
        cases.append({**reference(load_model(str(folder), dtype="float32").model, folder, ids), "remote": False})
        assert "without `trust_remote_code` too" in (folder / CARD_FILE).read_text()
    for family, result in zip(families, stock_load(cases, tmp_path)):
        assert not result["class"].startswith("Nirvana"), result  # transformers' own class
        assert result["loading_info"] == {} and result["same_tokens"] and result["round_trip_equal"], family


def test_older_folders_without_the_modeling_file_still_load_in_nirvana(tmp_path, smollm2):
    pruned, plan = pruned_tiny("qwen2", len(smollm2.tokenizer))
    save_pruned(pruned, smollm2.tokenizer, plan, tmp_path / "m")
    (tmp_path / "m" / MODELING_FILE).unlink()
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    del cfg["auto_map"]
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    assert not is_stock_loadable(tmp_path / "m")
    loaded = load_model(str(tmp_path / "m"), dtype="float32")
    ids = random_batch(vocab=100, n=2, t=10).input_ids
    with torch.no_grad():
        assert torch.equal(loaded.model(ids).logits, pruned(ids).logits)


# --- the model card -----------------------------------------------------------------------------


def card_tables(text: str) -> dict[str, str]:
    """Every `| name | value |` row of the card's two-column tables."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 2 and not set(cells[0]) <= set("-:"):
            rows[cells[0]] = cells[1]
    return rows


def layer_rows(text: str) -> list[tuple[int, int, int]]:
    """(layer, KV groups kept, neurons kept) from the per-layer table."""
    pattern = re.compile(r"^\| (\d+) \| (\d+) / \d+ \| \d+ \| (\d+) / \d+ \|$", re.M)
    return [(int(a), int(b), int(c)) for a, b, c in pattern.findall(text)]


def number(cell: str) -> float:
    return float(cell.replace(",", "").split()[0])


def test_prune_writes_a_card_with_the_reports_figures(tmp_path, tiny_with_tokenizer_dir):
    from huggingface_hub import ModelCard

    from nirvana.cli import main

    out = tmp_path / "p"
    argv = ["prune", "--model", str(tiny_with_tokenizer_dir), "--sparsity", "0.5", "--samples", "2"]
    assert main([*argv, "--seq-len", "16", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    text = (out / "model" / CARD_FILE).read_text()
    data = ModelCard.load(out / "model" / CARD_FILE).data.to_dict()
    assert data["library_name"] == "transformers" and "pruned" in data["tags"]
    rows = card_tables(text)
    assert number(rows["target block sparsity"]) == pytest.approx(report["target_sparsity"], abs=5e-5)
    assert number(rows["achieved block sparsity"]) == pytest.approx(report["achieved_block_sparsity"], abs=5e-5)
    assert number(rows["total parameter reduction"]) == pytest.approx(report["total_param_reduction"], abs=5e-5)
    assert number(rows["parameters before"]) == report["params_before"]
    assert number(rows["parameters after"]) == report["params_after"]
    assert number(rows["block parameters after"]) == report["block_params_after"]
    assert number(rows["gamma"]) == pytest.approx(report["gamma"], abs=5e-4)
    assert number(rows["align"]) == report["align"]
    assert rows["criterion"] == report["criterion"] and rows["allocation"] == report["allocation"]
    cal = report["calibration"]
    assert f"N = {cal['samples']} x T = {cal['seq_len']}" in rows["calibration data"] and cal["source"] in text
    assert rows["calibration choice"].startswith("not used")
    assert layer_rows(text) == [
        (i, k, n) for i, (k, n) in enumerate(zip(report["kept_kv_groups"], report["kept_neurons"]))
    ]
    assert "No quality measurement ran" in text and "without `trust_remote_code` too" not in text
    assert rows["pruned from"] == str(tiny_with_tokenizer_dir)
    assert f'from_pretrained("{out / "model"}", trust_remote_code=True)' in text
    assert is_stock_loadable(out / "model")


def test_card_shows_measured_results_and_the_kl_choice(tmp_path, smollm2):
    pruned, plan = pruned_tiny("llama", len(smollm2.tokenizer))
    save_pruned(pruned, smollm2.tokenizer, plan, tmp_path / "m")
    report = {"calibration_selection": {"chosen_seed": 2, "candidates": {"0": 0.5, "1": 0.25, "2": 0.125}}}
    results = {"perplexity": {"wikitext2": {"dense": 27.08, "pruned": 229.7}}, "accuracy": {"arc_easy": 0.4312}}
    write_model_card(tmp_path / "m", report, plan, base_model="smollm2-135m", results=results)
    text = (tmp_path / "m" / CARD_FILE).read_text()
    rows = card_tables(text)
    assert float(rows["perplexity / wikitext2 / pruned"]) == 229.7
    assert float(rows["perplexity / wikitext2 / dense"]) == 27.08
    assert float(rows["accuracy / arc_easy"]) == 0.4312
    assert rows["calibration choice"].startswith("seed 2 chosen among 3 candidate batches")
    assert "seed 1: 0.250000" in rows["calibration choice"]
    assert number(rows["achieved block sparsity"]) == pytest.approx(plan.stats["achieved_block_sparsity"], abs=5e-5)
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in text and "license: apache-2.0" in text
    assert PruningPlan.load(tmp_path / "m" / "plan.json").to_dict() == plan.to_dict()


# --- push -----------------------------------------------------------------------------------------


def push_cli(argv: list[str], tmp_path: Path, **env_extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "NIRVANA_DEBUG")}
    env.update(PYTHONPATH=str(ROOT), HF_HOME=str(tmp_path / "hf_home"), **env_extra)  # no stored token either
    return subprocess.run(
        [sys.executable, "-m", "nirvana", "push", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def pruned_folder(tmp_path, smollm2):
    pruned, plan = pruned_tiny("llama", len(smollm2.tokenizer))
    return save_pruned(pruned, smollm2.tokenizer, plan, tmp_path / "out" / "model").parent


def test_push_dry_run_lists_the_upload_without_token_or_network(pruned_folder, tmp_path):
    proc = push_cli(["--model", str(pruned_folder), "--repo-id", "alice/tiny-nirvana", "--dry-run"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    paths = {f["path"] for f in result["files"]}
    assert {"config.json", "model.safetensors", MODELING_FILE, CARD_FILE, "plan.json", "tokenizer.json"} <= paths
    assert result["private"] is True and result["dry_run"] is True
    assert result["total_bytes"] == sum(p.stat().st_size for p in (pruned_folder / "model").iterdir() if p.is_file())


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("not-pruned", "is not a pruned model folder"),
        ("bad-repo-id", "must be NAMESPACE/NAME"),
        ("bad-chars", "is not a valid Hub repository id"),
        ("no-token", "no Hugging Face token: set HF_TOKEN"),
        ("offline", "HF_HUB_OFFLINE is set"),
        ("no-network", "cannot reach the Hugging Face Hub"),
    ],
)
def test_push_bad_input_exits_2_with_a_clear_message(case, fragment, pruned_folder, tmp_path, tiny_with_tokenizer_dir):
    model, repo, env = str(pruned_folder), "alice/tiny-nirvana", {"HF_HUB_OFFLINE": "0"}
    if case == "not-pruned":
        model = str(tiny_with_tokenizer_dir)
    elif case == "bad-repo-id":
        repo = "tiny-nirvana"
    elif case == "bad-chars":
        repo = "alice/tiny nirvana!"
    elif case == "offline":
        env = {"HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_test_not_a_token"}
    elif case == "no-network":  # a closed local port: no traffic leaves the machine
        env = {"HF_HUB_OFFLINE": "0", "HF_TOKEN": "hf_test_not_a_token", "HF_ENDPOINT": "http://127.0.0.1:9"}
    proc = push_cli(["--model", model, "--repo-id", repo], tmp_path, **env)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert fragment in " ".join(proc.stderr.split())


# --- SmolLM2 ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_pruned_at_half_loads_stock_with_the_same_logits_and_tokens(tmp_path, smollm2):
    from nirvana.data.calibration import calibration_batch

    batch = calibration_batch(smollm2.tokenizer, "wikitext2-valid", samples=4, seq_len=64, seed=0, fallback=True)
    scores = compute_scores(smollm2.model, "nirvana", batch, use_cache=False)
    plan = allocate(scores, model_shape(smollm2.model), Allocation(0.5))
    pruned = apply_plan(smollm2.model, plan)
    folder = save_pruned(pruned, smollm2.tokenizer, plan, tmp_path / "smollm2-p50", base_model="smollm2-135m")
    loaded = load_model(str(folder), dtype="float32", device="cpu")
    prompt = smollm2.tokenizer(["The capital of France is", "Structured pruning removes"], return_tensors="pt",
                               padding=True)  # fmt: skip
    ids = prompt.input_ids[:, : prompt.attention_mask.sum(1).min()]  # no padding: the same length for both rows
    cases = [reference(loaded.model, folder, ids, new=16)]
    (result,) = stock_load(cases, tmp_path)
    assert result["loading_info"] == {} and result["same_tokens"] and result["round_trip_equal"], result
    assert result["max_diff"] < 1e-4
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in (folder / CARD_FILE).read_text()


def test_card_command_adds_an_evaluation_of_this_folder_and_refuses_another_models(pruned_folder, tmp_path):
    from nirvana.cli import main

    model_dir = pruned_folder / "model"
    evaluation = {
        "model": str(model_dir),
        "ppl": {"wikitext2": {"ppl": 229.7, "tokens": 16384, "split": "test", "nll": 5.43}},
        "tasks": {"tasks": {"arc_easy": {"acc": 0.4312, "acc_norm": 0.4011, "samples": 200}}},
    }
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(evaluation))
    assert main(["card", "--model", str(pruned_folder), "--eval", str(path), "--base-model", "smollm2-135m"]) == 0
    rows = card_tables((model_dir / CARD_FILE).read_text())
    assert (
        float(rows["perplexity / wikitext2 / ppl"]) == 229.7
        and number(rows["perplexity / wikitext2 / tokens"]) == 16384
    )
    assert float(rows["accuracy / arc_easy / acc"]) == 0.4312 and "accuracy / arc_easy / samples" not in rows
    path.write_text(json.dumps({**evaluation, "model": "smollm2-135m"}))
    assert main(["card", "--model", str(pruned_folder), "--eval", str(path)]) == 2


def test_push_creates_a_private_repo_and_uploads_the_card_naming_the_repo(pruned_folder, monkeypatch):
    """The upload itself, with huggingface_hub's two calls recorded instead of sent."""
    import huggingface_hub

    from nirvana.export import hub

    calls = {}

    def create_repo(self, repo_id, **kwargs):
        calls["create_repo"] = (repo_id, kwargs)
        return f"https://huggingface.co/{repo_id}"

    def create_commit(self, repo_id, operations, **kwargs):
        calls["commit"] = (repo_id, {op.path_in_repo: op for op in operations})

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "create_commit", create_commit)
    monkeypatch.setattr(hub, "_offline", lambda: False)
    result = hub.push(pruned_folder, "alice/tiny-nirvana", token="hf_test_not_a_token")
    repo_id, kwargs = calls["create_repo"]
    assert repo_id == "alice/tiny-nirvana" and kwargs["private"] is True and kwargs["exist_ok"] is True
    _, ops = calls["commit"]
    assert {"model.safetensors", "config.json", MODELING_FILE, CARD_FILE} <= set(ops)
    card = ops[CARD_FILE].path_or_fileobj
    card = card if isinstance(card, bytes) else card.getvalue()
    assert b'from_pretrained("alice/tiny-nirvana", trust_remote_code=True)' in card
    assert str(pruned_folder).encode() not in card
    assert result["url"] == "https://huggingface.co/alice/tiny-nirvana" and result["private"] is True
