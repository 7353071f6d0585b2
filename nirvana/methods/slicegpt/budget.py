"""SliceGPT's widths and what they cost: the kept hidden width for a target, and parameters counted exactly.

The reference's `ConstSlicingScheduler(D')` gives every sliced stream the width D' = (1 - slicing) D,
rounded down to a multiple of `round_interval`: the embeddings, each layer's attention input and
output and MLP input and output, except that without `slice_head` the last layer's MLP output and
the LM head keep the dense D. What a slice saves is less than its fraction: every layer gains two
shortcut matrices ([D', D'], the last one [D', D]), and the embedding and LM head, tied in SmolLM2,
become two matrices (they are rotated by different bases). Sparsity here is the project's: the
fraction of decoder-block parameters removed, the shortcuts counted as block parameters (they live
in the blocks); the total, with the untied head, is reported beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from nirvana.errors import InvalidInput
from nirvana.methods.slicegpt.config import SliceGPTConfig
from nirvana.models.architectures import layer_projections, text_config
from nirvana.models.shapes import count_block_parameters, count_parameters

MIN_WIDTH = 8


@dataclass(frozen=True)
class HiddenDims:
    """Residual-stream widths after slicing: `embedding`, per layer `(attn_in, attn_out, mlp_in, mlp_out)`, `head`."""

    hidden_size: int
    embedding: int
    layers: tuple[tuple[int, int, int, int], ...]
    head: int

    @classmethod
    def constant(cls, hidden_size: int, num_layers: int, width: int, slice_head: bool) -> HiddenDims:
        head = width if slice_head else hidden_size
        rows = [(width, width, width, width)] * num_layers
        rows[-1] = (width, width, width, head)
        return cls(hidden_size, width, tuple(rows), head)

    def to_config(self, eps: float) -> dict:
        """The `nirvana_sliced_hidden` entry of config.json that `modeling_nirvana.py` rebuilds from."""
        return {
            "hidden_size": self.hidden_size,
            "embedding": self.embedding,
            "head": self.head,
            "layers": [list(r) for r in self.layers],
            "eps": eps,
        }


def width_for_slicing(hidden_size: int, slicing: float, round_interval: int) -> int:
    """The reference's `int((1 - sparsity) * hidden_size)` rounded down to a multiple of `round_interval`."""
    width = int((1 - slicing) * hidden_size)
    return width - width % round_interval


def _dense_parts(model: nn.Module) -> dict:
    """Per-layer output widths and bias flags of the seven projections, read from the dense modules."""
    p = layer_projections(model)[0]
    return {
        "qkv_out": p.q_proj.out_features + p.k_proj.out_features + p.v_proj.out_features,
        "qkv_bias": sum(lin.out_features for lin in (p.q_proj, p.k_proj, p.v_proj) if lin.bias is not None),
        "o_in": p.o_proj.in_features,
        "o_bias": p.o_proj.bias is not None,
        "inter": p.gate_proj.out_features,
        "gate_up_bias": sum(lin.out_features for lin in (p.gate_proj, p.up_proj) if lin.bias is not None),
        "down_bias": p.down_proj.bias is not None,
    }


def sliced_block_params(model: nn.Module, dims: HiddenDims) -> int:
    """Block parameters (seven projections with their biases, and the two shortcuts) after slicing to `dims`."""
    parts = _dense_parts(model)
    total = 0
    for attn_in, attn_out, mlp_in, mlp_out in dims.layers:
        total += attn_in * parts["qkv_out"] + parts["qkv_bias"]
        total += parts["o_in"] * attn_out + (attn_out if parts["o_bias"] else 0)
        total += 2 * mlp_in * parts["inter"] + parts["gate_up_bias"]
        total += parts["inter"] * mlp_out + (mlp_out if parts["down_bias"] else 0)
        total += attn_in * attn_out + mlp_in * mlp_out  # the shortcut matrices
    return total


def sliced_total_params(model: nn.Module, dims: HiddenDims) -> int:
    """All parameters after slicing: blocks, untied embedding and head, norms without weights."""
    cfg = text_config(model.config)
    vocab = model.get_input_embeddings().num_embeddings
    embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    emb_head_before = embed.numel() + (0 if head is embed else head.numel())
    norms_before = (2 * len(dims.layers) + 1) * cfg.hidden_size
    rest = count_parameters(model) - count_block_parameters(model) - emb_head_before - norms_before
    return rest + sliced_block_params(model, dims) + vocab * dims.embedding + vocab * dims.head


def dims_for(model: nn.Module, sparsity: float, config: SliceGPTConfig) -> tuple[HiddenDims, dict]:
    """(widths, stats) for `config.slicing`, or, when it is None, for the width nearest `sparsity`.

    Candidates are the multiples of `round_interval` in [8, D]; ties go to the wider stream.
    """
    cfg = text_config(model.config)
    hidden, layers = cfg.hidden_size, len(layer_projections(model))
    before = count_block_parameters(model)

    def sparsity_of(width: int) -> float:
        return 1 - sliced_block_params(model, HiddenDims.constant(hidden, layers, width, config.slice_head)) / before

    if config.slicing is not None:
        width = width_for_slicing(hidden, config.slicing, config.round_interval)
        chosen_by = f"slicing {config.slicing} of D = {hidden}"
    else:
        candidates = range(hidden - hidden % config.round_interval, MIN_WIDTH - 1, -config.round_interval)
        width = min(candidates, key=lambda w: (abs(sparsity_of(w) - sparsity), -w), default=0)
        chosen_by = f"the multiple of {config.round_interval} nearest the target {sparsity:.3f}"
    if width < MIN_WIDTH:
        raise InvalidInput(
            f"slicegpt would keep {width} of {hidden} hidden dimensions; at least {MIN_WIDTH} must stay. Use a smaller "
            "slicing (or sparsity)."
        )
    dims = HiddenDims.constant(hidden, layers, width, config.slice_head)
    after = sliced_block_params(model, dims)
    stats = {
        "hidden_kept": width,
        "hidden_size": hidden,
        "slicing": 1 - width / hidden,
        "chosen_by": chosen_by,
        "block_params_before": before,
        "block_params_after": after,
        "achieved_block_param_sparsity": 1 - after / before,
        "params_before": count_parameters(model),
        "params_after": sliced_total_params(model, dims),
    }
    return dims, stats
