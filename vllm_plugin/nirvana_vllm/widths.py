"""Each layer's widths, as the pruned folder's config.json records them, and a config copy per layer.

`nirvana_layer_shapes` (this project's key) or the reference implementation's `modified_head_num` (query
heads) and `modified_intermediate_dimension`; a folder without either is dense, and every layer has the
global widths. The global `num_attention_heads` / `num_key_value_heads` stay the dense model's, so the group
size G = Hq / Hkv is read from them.
"""

from __future__ import annotations

import copy


def layer_widths(config) -> list[tuple[int, int]]:
    """(KV heads, MLP neurons) of every layer."""
    shapes = getattr(config, "nirvana_layer_shapes", None)
    if shapes:
        return [(int(s["num_key_value_heads"]), int(s["intermediate_size"])) for s in shapes]
    heads = getattr(config, "modified_head_num", None)
    inter = getattr(config, "modified_intermediate_dimension", None)
    if heads and inter:
        group = config.num_attention_heads // config.num_key_value_heads
        return [(int(h) // group, int(i)) for h, i in zip(heads, inter)]
    return [(config.num_key_value_heads, config.intermediate_size)] * config.num_hidden_layers


def head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def layer_config(config, index: int):
    """A shallow copy of `config` with layer `index`'s KV heads, query heads (G per KV head), MLP width and an
    explicit `head_dim` (D / Hq no longer holds once heads are gone)."""
    kv_heads, neurons = layer_widths(config)[index]
    group = config.num_attention_heads // config.num_key_value_heads
    out = copy.copy(config)
    out.head_dim = head_dim(config)
    out.num_key_value_heads, out.num_attention_heads, out.intermediate_size = kv_heads, kv_heads * group, neurons
    return out


def layer_index(prefix: str) -> int:
    """The layer number of a module prefix such as "model.layers.7"."""
    return int(prefix.rsplit(".", 1)[1])


def output_biases(config) -> set[str]:
    """The modules FLAP's compensation gave a bias ("o_proj", "down_proj"), which stock configs cannot say."""
    return set(getattr(config, "nirvana_output_biases", None) or ())
