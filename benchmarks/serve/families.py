"""The plugin's classes on every family it serves, against stock transformers, on tiny random pruned folders.

    .venv/bin/python benchmarks/serve/families.py        # needs .venv-serve (`make serve-env`)

The pruned SmolLM2 (`bench serve`) only exercises the Llama class. Here each family gets a tiny folder written
with the project's own modeling classes and `add_stock_loading`, as `prune --out` writes them: hidden 64,
head_dim 32 (vLLM's CPU attention needs at least 32), 8 query / 4 KV heads dense, every layer its own KV groups
and MLP width, FLAP's o_proj and down_proj biases on Llama and Qwen2, Gemma-3 mixing sliding (window 8) and
full layers. transformers (`trust_remote_code`, this venv) and vLLM (the plugin's class, `.venv-serve`) each
continue two prompts greedily for 32 tokens, EOS ignored; the token ids must be equal. Rows go to
families.jsonl, the table to families.md. The SmolLM2 tokenizer (the embedded model's) is used throughout.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import transformers as tf
from transformers import AutoModelForCausalLM, AutoTokenizer

from nirvana.checkpoints.loading import embedded_model_dir
from nirvana.export.modeling import add_stock_loading
from nirvana.export.serve import SERVER_ENV, read_config, serve_python, serving_architecture
from nirvana.models import modeling_nirvana as mn

HERE = Path(__file__).resolve().parent
PROMPTS = ["The capital of France is", "def fibonacci(n):"]
NEW = 32
KV, NEURONS = [1, 4, 2], [40, 128, 24]
S, F = "sliding_attention", "full_attention"
FAMILIES = {  # name -> (config class, extra config, output biases)
    "llama + FLAP biases": (tf.LlamaConfig, {}, ("o_proj", "down_proj")),
    "qwen2 + FLAP biases": (tf.Qwen2Config, {}, ("o_proj", "down_proj")),
    "mistral": (tf.MistralConfig, {}, ()),
    "gemma3_text (sliding + full)": (tf.Gemma3TextConfig, {"sliding_window": 8, "layer_types": [S, S, F]}, ()),
}


def build(folder: Path, name: str, tokenizer) -> None:
    cls, extra, biases = FAMILIES[name]
    config = cls(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=len(KV),
                 num_attention_heads=8, num_key_value_heads=4, head_dim=32, max_position_embeddings=512,
                 tie_word_embeddings=False, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                 pad_token_id=tokenizer.pad_token_id, **extra)  # fmt: skip
    config.nirvana_layer_shapes = [
        {"num_key_value_heads": k, "num_attention_heads": 2 * k, "intermediate_size": i} for k, i in zip(KV, NEURONS)
    ]
    if biases:
        config.nirvana_output_biases = list(biases)
    torch.manual_seed(0)
    model = getattr(mn, mn.CLASS_FOR_MODEL_TYPE[config.model_type])(config).eval()
    with torch.no_grad():  # weights large enough that a missing bias or a wrong width changes the tokens
        for key, p in model.named_parameters():
            p.normal_(0, 1.0 if "embed" in key else 0.5 if key.endswith("bias") else 0.15)
            if "norm" in key:
                p.fill_(1.0 if config.model_type != "gemma3_text" else 0.0)  # Gemma scales by 1 + weight
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    add_stock_loading(folder)


def transformers_greedy(folder: Path, tokenizer) -> list[list[int]]:
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, trust_remote_code=True).eval()
    out = []
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            g = model.generate(ids, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                               pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        out.append(g[0, ids.shape[1] :].tolist())
    return out


def vllm_greedy(folder: Path) -> tuple[str, list[list[int]]]:
    """The plugin's greedy token ids through `nirvana_vllm.measure` (the script `bench serve` runs), no timing."""
    architecture = serving_architecture(read_config(folder)[1])
    spec = {"model": str(folder), "architecture": architecture, "prompts": PROMPTS, "new_tokens": NEW,
            "ignore_eos": True, "batch_sizes": [], "max_model_len": 256}  # fmt: skip
    done = subprocess.run([str(serve_python()), "-m", "nirvana_vllm.measure", json.dumps(spec)], capture_output=True,
                          text=True, env={**os.environ, **SERVER_ENV})  # fmt: skip
    line = next((x for x in done.stdout.splitlines() if x.startswith("NIRVANA-MEASURE ")), None)
    if line is None:
        raise RuntimeError(f"vLLM failed on {folder}:\n{done.stderr[-2000:]}")
    return architecture, [g["token_ids"] for g in json.loads(line.split(" ", 1)[1])["greedy"]]


def main() -> None:
    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir("smollm2-135m"))
    rows = []
    for name in FAMILIES:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "model"
            build(folder, name, tokenizer)
            expected = transformers_greedy(folder, tokenizer)
            architecture, served = vllm_greedy(folder)
        equal = sum(a == b for x, y in zip(expected, served) for a, b in zip(x, y))
        rows.append({"family": name, "architecture": architecture, "kv_heads": KV, "neurons": NEURONS,
                     "equal_tokens": equal, "tokens": len(PROMPTS) * NEW, "transformers": expected, "vllm": served,
                     "finished_utc": f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M}"})  # fmt: skip
        print(f"{name}: {equal}/{len(PROMPTS) * NEW} greedy tokens equal", flush=True)
    (HERE / "families.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = ["# The plugin's classes against transformers, family by family (tiny random pruned folders)", "",
             "Written by `benchmarks/serve/families.py` (its docstring says how).", "",
             "| family | vLLM class | KV heads per layer | MLP neurons per layer | greedy tokens equal |",
             "|---|---|---|---|---:|"]  # fmt: skip
    lines += [f"| {r['family']} | {r['architecture']} | {r['kv_heads']} | {r['neurons']} | "
              f"{r['equal_tokens']}/{r['tokens']} |" for r in rows]  # fmt: skip
    (HERE / "families.md").write_text("\n".join(lines) + "\n")
    sys.exit(0 if all(r["equal_tokens"] == r["tokens"] for r in rows) else 1)


if __name__ == "__main__":
    main()
