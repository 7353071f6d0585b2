"""A pruned Llama folder -> a GGUF file that llama.cpp runs with its per-layer widths.

llama.cpp's `llama` architecture builds every layer from one width, but its `deci` architecture
(written for NVIDIA's Nemotron-NAS models) reads per-layer arrays `deci.attention.head_count`,
`deci.attention.head_count_kv` and `deci.feed_forward_length` and is otherwise the Llama layer
(RMSNorm, RoPE, SwiGLU). So a NIRVANA-pruned Llama is written under that architecture, q/k rows
permuted for llama.cpp's RoPE layout exactly as llama.cpp's own converter does. Weights are F32
or F16 (quantize afterwards with llama.cpp's `llama-quantize`). The tokenizer metadata is copied
from a GGUF of the base model: the embedded SmolLM2 GGUF for `smollm2-135m`, or `tokenizer_gguf`.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
from safetensors.torch import load_file

from nirvana.errors import InvalidInput, UnsupportedArchitecture
from nirvana.export.card import KNOWN_BASES, resolve_base_model
from nirvana.export.hub import pruned_model_folder
from nirvana.models.registry import embedded_gguf_file
from nirvana.store.paths import cache_dir

ARCH = "deci"
DTYPES = ("f32", "f16")


def _permute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """HF's rotate-half q/k rows -> llama.cpp's interleaved RoPE pairs (per head)."""
    return (
        weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def unpermute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of `_permute` (for tests and readers)."""
    return (
        weight.reshape(n_head, weight.shape[0] // n_head // 2, 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def default_tokenizer_gguf(folder: Path) -> Path | None:
    """The embedded registry GGUF when the folder's card says it was pruned from that model."""

    base = resolve_base_model(str(folder)).repo_id
    for name, known in KNOWN_BASES.items():
        if base and base == known.repo_id:
            return embedded_gguf_file(name, cache_dir() / "models")
    return None


def _check_supported(config: dict, state: dict) -> None:
    if config.get("model_type") != "llama":
        raise UnsupportedArchitecture(
            f"GGUF export writes Llama-family models only (llama.cpp's `deci` architecture); this folder is "
            f"{config.get('model_type')!r}. Load it with transformers (trust_remote_code=True) instead."
        )
    if config.get("nirvana_output_biases"):
        raise UnsupportedArchitecture(
            f"GGUF export does not write the o_proj / down_proj biases this model carries "
            f"({', '.join(config['nirvana_output_biases'])}; FLAP's bias compensation adds them), and "
            "llama.cpp's `deci` layers have no such bias; dropping them would change the model. Run it with "
            "transformers (trust_remote_code=True), or prune with --method nirvana or llm-pruner for a GGUF."
        )
    if config.get("nirvana_sliced_hidden"):
        raise UnsupportedArchitecture(
            "GGUF export cannot express a SliceGPT model: its residual stream is narrower than hidden_size and each "
            "layer multiplies it by two shortcut matrices (attn_shortcut_Q, mlp_shortcut_Q), which no llama.cpp "
            "architecture has. Run it with transformers (trust_remote_code=True), or prune with --method nirvana or "
            "llm-pruner for a GGUF."
        )
    if any(k.endswith(".bias") for k in state):
        raise UnsupportedArchitecture("GGUF export does not write projection biases; this Llama variant has them.")
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if rope.get("rope_type", "default") != "default":
        raise UnsupportedArchitecture(
            f"GGUF export writes plain RoPE only; this model uses rope_type {rope.get('rope_type')!r}."
        )


def write_gguf(folder: str | Path, out: str | Path, *, tokenizer_gguf: str | Path | None = None, dtype: str = "f32"):
    """Write `out` (a .gguf) from a pruned Llama model folder; returns its path.

    Example:
        >>> write_gguf("/tmp/p50/model", "/tmp/p50.gguf")  # then: Llama(model_path="/tmp/p50.gguf")
    """
    folder = pruned_model_folder(folder)
    if dtype not in DTYPES:
        raise InvalidInput(f"--dtype {dtype!r} is not a GGUF export type; use one of {', '.join(DTYPES)}.")
    config = json.loads((folder / "config.json").read_text())
    state = {}
    for path in sorted(folder.glob("model*.safetensors")):
        state.update({k: v.float().numpy() for k, v in load_file(str(path)).items()})  # numpy has no bf16
    _check_supported(config, state)
    source = Path(tokenizer_gguf) if tokenizer_gguf else default_tokenizer_gguf(folder)
    if source is None or not source.is_file():
        raise InvalidInput(
            "GGUF export needs the base model's tokenizer from a GGUF of it: pass --tokenizer-gguf BASE.gguf "
            "(made by llama.cpp's convert_hf_to_gguf.py from the base model)"
            + (f"; {str(source)!r} does not exist." if source else ".")
        )
    reader = gguf.GGUFReader(str(source))
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data) if "tokenizer.ggml.tokens" in reader.fields else None
    if vocab != config["vocab_size"]:
        raise InvalidInput(
            f"{str(source)!r} holds a tokenizer of {vocab} tokens, the model {config['vocab_size']}: pass the GGUF "
            "of the model that was pruned."
        )
    shapes = config.get("nirvana_layer_shapes")
    if not shapes:
        raise InvalidInput("config.json has no nirvana_layer_shapes; re-save the folder with NIRVANA Explorer.")
    np_dtype = np.float32 if dtype == "f32" else np.float16
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    rope = config.get("rope_parameters") or {}

    writer = gguf.GGUFWriter(str(out), ARCH)
    writer.add_name(folder.resolve().parent.name if folder.name == "model" else folder.name)
    writer.add_block_count(len(shapes))
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length([s["intermediate_size"] for s in shapes])  # one per layer
    writer.add_head_count([s["num_attention_heads"] for s in shapes])
    writer.add_head_count_kv([s["num_key_value_heads"] for s in shapes])
    writer.add_key_length(head_dim)  # explicit: hidden / heads no longer gives head_dim
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(rope.get("rope_theta", config.get("rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(key, field.contents(), field.types[0], sub_type=sub)

    def add(name: str, tensor: np.ndarray, keep_f32: bool = False) -> None:
        # Norm weights stay F32, as llama.cpp's converter keeps 1-D tensors.
        writer.add_tensor(name, np.ascontiguousarray(tensor.astype(np.float32 if keep_f32 else np_dtype)))

    embed = state["model.embed_tokens.weight"]
    add("token_embd.weight", embed)
    add("output_norm.weight", state["model.norm.weight"], keep_f32=True)
    add("output.weight", state.get("lm_head.weight", embed))  # tied embeddings: written out once more
    for i, s in enumerate(shapes):
        p = f"model.layers.{i}."
        add(f"blk.{i}.attn_norm.weight", state[p + "input_layernorm.weight"], keep_f32=True)
        add(f"blk.{i}.attn_q.weight", _permute(state[p + "self_attn.q_proj.weight"], s["num_attention_heads"]))
        add(f"blk.{i}.attn_k.weight", _permute(state[p + "self_attn.k_proj.weight"], s["num_key_value_heads"]))
        add(f"blk.{i}.attn_v.weight", state[p + "self_attn.v_proj.weight"])
        add(f"blk.{i}.attn_output.weight", state[p + "self_attn.o_proj.weight"])
        add(f"blk.{i}.ffn_norm.weight", state[p + "post_attention_layernorm.weight"], keep_f32=True)
        add(f"blk.{i}.ffn_gate.weight", state[p + "mlp.gate_proj.weight"])
        add(f"blk.{i}.ffn_up.weight", state[p + "mlp.up_proj.weight"])
        add(f"blk.{i}.ffn_down.weight", state[p + "mlp.down_proj.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(out)
