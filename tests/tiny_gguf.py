"""Write a tiny random Hugging Face model as a GGUF file, as llama.cpp's converter would.

Tests use it to load, prune, save and reload a `.gguf` path that is not the embedded model. The
file holds F32 tensors under llama.cpp's names (Llama q/k rows permuted as llama.cpp does),
the model's shape as metadata, and a byte-level BPE tokenizer of 256 byte tokens, four
special tokens and a few merges. The tokenizer adds a BOS token and its chat template writes one
too (as Llama 3's does), so a caller that tokenizes a chat prompt with `add_special_tokens=True`
gets two.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SPECIALS = ("<|endoftext|>", "<|begin_of_text|>", "<|im_start|>", "<|im_end|>")
PAD_ID, BOS_ID, EOS_ID = 256, 257, 259
MERGES = ("h e", "l l", "Ġ t", "Ġt he")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
FAMILIES = ("llama", "qwen2")
VOCAB = 272  # 256 bytes + 4 specials + 4 merged tokens, padded

_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
_TOP["lm_head.weight"] = "output.weight"
_LAYER = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def _permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order (convert_hf_to_gguf.py LlamaModel.permute); transformers undoes it."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _tokens(vocab_size: int) -> tuple[list[str], list[int]]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    merged = ["".join(m.split(" ")) for m in MERGES]
    tokens = [*bytes_to_unicode().values(), *SPECIALS, *merged]
    types = [1] * 256 + [3] * len(SPECIALS) + [1] * len(merged)  # 1 normal, 3 control
    if len(tokens) > vocab_size:
        raise ValueError(f"vocab_size must be at least {len(tokens)}")
    pad = vocab_size - len(tokens)
    return tokens + [f"[PAD{i}]" for i in range(len(tokens), vocab_size)], types + [5] * pad  # 5 unused


def write_gguf(model, path: str | Path) -> Path:
    """Write `model` (a Llama or Qwen2 from `tests.tiny.tiny_model`) to `path` as an F32 GGUF."""
    import gguf

    cfg = model.config
    family = cfg.model_type
    if family not in FAMILIES:
        raise ValueError(f"write_gguf knows {FAMILIES}, not {family!r}")
    path = Path(path)
    tokens, types = _tokens(cfg.vocab_size)
    writer = gguf.GGUFWriter(str(path), family)
    writer.add_name(f"tiny-{family}")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_dimension_count(cfg.head_dim)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(list(MERGES))
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_pad_token_id(PAD_ID)
    writer.add_add_bos_token(True)
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, tensor in model.state_dict().items():
        if name in _TOP:
            gguf_name = _TOP[name]
        else:
            _, _, layer, rest = name.split(".", 3)  # model.layers.<i>.<module>.<weight|bias>
            module, _, kind = rest.rpartition(".")
            gguf_name = f"blk.{layer}.{_LAYER[module]}.{kind}"
        array = tensor.detach().float().numpy()
        if family == "llama" and ".attn_q." in gguf_name:
            array = _permute(array, cfg.num_attention_heads)
        elif family == "llama" and ".attn_k." in gguf_name:
            array = _permute(array, cfg.num_key_value_heads)
        writer.add_tensor(gguf_name, np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
