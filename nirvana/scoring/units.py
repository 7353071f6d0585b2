"""Group per-row / per-column saliency into NIRVANA's prunable units.

Every criterion first reduces its elementwise saliency `s(W)` to one vector per projection
along the axis that a unit owns (rows of q/k/v/gate/up summed over inputs, columns of o/down
summed over outputs), then `group_units` sums those into KV groups and neurons. Keeping this
in one place is what makes criteria comparable on equal terms (METHOD.md section 2).
"""

from __future__ import annotations

import torch

# Which axis of W a unit owns: "row" (output features) or "col" (input features).
UNIT_AXIS = {
    "q_proj": "row",
    "k_proj": "row",
    "v_proj": "row",
    "o_proj": "col",
    "gate_proj": "row",
    "up_proj": "row",
    "down_proj": "col",
}


def reduce_to_axis(name: str, saliency: torch.Tensor) -> torch.Tensor:
    """`[out, in]` elementwise saliency -> the vector along the unit axis of projection `name`."""
    return saliency.sum(dim=1) if UNIT_AXIS[name] == "row" else saliency.sum(dim=0)


def group_units(vectors: dict[str, torch.Tensor], head_dim: int, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-projection vectors of one layer -> (attn `[Hkv]`, mlp `[I]`).

    KV group m owns k/v rows m*d..(m+1)*d-1 and the g query heads that read it (HF `repeat_kv`:
    query head h uses KV head h // g), i.e. q rows and o columns m*g*d..(m+1)*g*d-1.
    """
    d, g = head_dim, group_size
    q = vectors["q_proj"].float().reshape(-1, g * d).sum(1)  # (Hkv,)
    k = vectors["k_proj"].float().reshape(-1, d).sum(1)
    v = vectors["v_proj"].float().reshape(-1, d).sum(1)
    o = vectors["o_proj"].float().reshape(-1, g * d).sum(1)
    attn = q + k + v + o
    mlp = vectors["gate_proj"].float() + vectors["up_proj"].float() + vectors["down_proj"].float()
    return attn, mlp
