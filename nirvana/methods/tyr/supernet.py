"""Tyr-the-Pruner's supernet (prune_to_supernet.py, src/pruner.py `Pruner.prune`; docs/notes/tyr-reference.md
sections 2-5): every module's sparsity levels, pruned locally block by block, kept on disk, and a working copy of
the model whose o_proj / down_proj weights are swapped to the levels a search state names.

Block by block on the calibration batch: the block runs once with hooks on o_proj and down_proj (H = sum x x^T of
each, fp32, in the same pass), every level of both is pruned locally (`local_prune`) and written to disk (the
reference's `<module>/<level>.pth`; here one safetensors file per module with each level's kept groups and kept
columns), then the centre level is written into the working copy (`accumulate="centre"`) or the dense weights
stay (`"dense"`, the reference code as written) and the block's outputs become the next block's inputs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
from safetensors import safe_open
from safetensors.torch import save_file

from nirvana.methods.tyr.config import TyrConfig
from nirvana.methods.tyr.local import local_prune, rows_of
from nirvana.methods.tyr.search import Grid
from nirvana.models.architectures import decoder_layers, layer_projections
from nirvana.models.capture import first_output, layer_inputs
from nirvana.models.shapes import ModelShape
from nirvana.progress import Progress
from nirvana.pruning.reconstruct import Gram

MODULES = {"attn": "o_proj", "mlp": "down_proj"}  # the unit kind -> the module whose input columns are pruned


@dataclass(frozen=True)
class Module:
    """One prunable module of the search: layer, unit kind, its level grid, input columns per unit."""

    layer: int
    kind: str
    grid: Grid
    group_size: int

    @property
    def name(self) -> str:
        return f"layer{self.layer}-{MODULES[self.kind]}"


def modules_of(shape: ModelShape, centres: dict[str, list[int]], steps: dict[str, int], levels: int) -> list[Module]:
    """Every layer's attention module, then every layer's MLP module: the order of a search state."""
    units = {"attn": shape.num_kv_heads[0], "mlp": shape.intermediate[0]}
    size = {"attn": shape.group_size * shape.head_dim, "mlp": 1}
    return [
        Module(i, kind, Grid(units[kind], centres[kind][i], steps[kind], levels // 2), size[kind])
        for kind in MODULES
        for i in range(shape.num_layers)
    ]


class Supernet:
    """The levels of every module, on disk under `folder`, and the working copy they are written into."""

    def __init__(self, model: nn.Module, modules: list[Module], folder: Path):
        self.modules, self.folder = modules, Path(folder)
        self.work = copy.deepcopy(model).eval()
        self.loaded = [0] * len(modules)  # the level each module of `work` holds
        self.projections = layer_projections(self.work)

    def path(self, module: Module) -> Path:
        return self.folder / f"{module.name}.safetensors"

    def kept(self, index: int, level: int) -> list[int]:
        with safe_open(str(self.path(self.modules[index])), "pt") as f:
            return f.get_tensor(f"{level}.kept").tolist()

    def _weight(self, index: int, level: int, like: torch.Tensor) -> torch.Tensor:
        module = self.modules[index]
        with safe_open(str(self.path(module)), "pt") as f:
            kept, cols = f.get_tensor(f"{level}.kept"), f.get_tensor(f"{level}.weight")
        full = torch.zeros_like(like)
        full[:, rows_of(kept, module.group_size)] = cols.to(like)
        return full

    def linear(self, index: int) -> nn.Linear:
        module = self.modules[index]
        return getattr(self.projections[module.layer], MODULES[module.kind])

    @torch.no_grad()
    def load(self, state: list[int]) -> None:
        """Write the level `state` names for each module into the working copy (only the modules that change)."""
        for index, level in enumerate(state):
            if self.loaded[index] != level:
                lin = self.linear(index)
                lin.weight.copy_(self._weight(index, level, lin.weight))
                self.loaded[index] = level

    @torch.no_grad()
    def build(self, dense: nn.Module, batch_ids: torch.Tensor, config: TyrConfig, micro_batch: int,
              progress: Progress = None) -> None:  # fmt: skip
        """Prune every level of every module, block by block (module docstring); the working copy ends with the
        centre levels (or, `accumulate="dense"`, the dense weights)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        layers = decoder_layers(self.work)
        dense_proj = layer_projections(dense)
        hidden, kwargs = layer_inputs(self.work, batch_ids, micro_batch)
        by_layer = {i: [(j, m) for j, m in enumerate(self.modules) if m.layer == i] for i in range(len(layers))}
        rounds = {"attn": config.attn_rounds, "mlp": config.mlp_rounds}
        for i, layer in enumerate(layers):
            linears = {j: self.linear(j) for j, _ in by_layer[i]}
            grams = {j: Gram(lin.in_features) for j, lin in linears.items()}
            handles = [lin.register_forward_pre_hook(grams[j]) for j, lin in linears.items()]
            try:
                for h, kw in zip(hidden, kwargs[i]):
                    layer(h, **kw)
            finally:
                for handle in handles:
                    handle.remove()
            for j, module in by_layer[i]:
                weight = getattr(dense_proj[i], MODULES[module.kind]).weight.detach().float().cpu()
                tensors = {}
                for level in module.grid.levels:
                    kept, new = local_prune(weight, grams[j].H, module.grid.removed(level), module.group_size,
                                            rounds[module.kind], damp=config.damp)  # fmt: skip
                    tensors[f"{level}.kept"] = kept.to(torch.int64)
                    tensors[f"{level}.weight"] = new[:, rows_of(kept, module.group_size)].contiguous()
                save_file(tensors, str(self.path(module)))
                if config.accumulate == "centre":
                    linears[j].weight.copy_(self._weight(j, 0, linears[j].weight))
                else:
                    self.loaded[j] = None  # the dense weights: no level of the grid
            hidden = [first_output(layer(h, **kw)) for h, kw in zip(hidden, kwargs[i])]
            if progress:
                progress((i + 1) / len(layers), f"supernet: layer {i + 1}/{len(layers)}")
