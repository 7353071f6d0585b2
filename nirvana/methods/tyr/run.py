"""Tyr-the-Pruner end to end: centres, the supernet, the evolutionary search by sparse KL, coarse to fine; the plan
records the searched distribution (docs/BASELINES.md, docs/notes/tyr-reference.md)."""

from __future__ import annotations

import random
import tempfile
import time
from types import SimpleNamespace

import torch
import torch.nn as nn

from nirvana.data.calibration import CalibrationBatch
from nirvana.errors import InvalidInput
from nirvana.methods.base import build_plan
from nirvana.methods.tyr.config import TyrConfig
from nirvana.methods.tyr.search import dense_topk, minibatch, offspring, sparse_kl_sum
from nirvana.methods.tyr.supernet import MODULES, Module, Supernet, modules_of
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.shapes import ModelShape, model_shape
from nirvana.models.weights import input_device
from nirvana.progress import Progress, sub_progress
from nirvana.store.paths import cache_dir


def initial_centres(shape: ModelShape, sparsity: float) -> dict[str, list[int]]:
    """Units removed per layer at the first iteration's centre: the same in every layer (the reference's uniform
    start). Attention is as close to `sparsity` as whole KV groups allow (one stays); the MLP's count makes the
    block's weights removed meet `sparsity` (the reference gives both types the target, which a model with 3 KV
    groups per layer cannot hold: a group is a third of its attention)."""
    hkv, inter, D = shape.num_kv_heads[0], shape.intermediate[0], shape.hidden_size
    attn = min(hkv - 1, round(sparsity * hkv))
    budget = sparsity * shape.layer_block_weights(0) - attn * shape.attn_unit_cost * D
    mlp = max(0, min(inter - 1, round(budget / (shape.mlp_unit_cost * D))))
    return {"attn": [attn] * shape.num_layers, "mlp": [mlp] * shape.num_layers}


def level_steps(shape: ModelShape, config: TyrConfig, iteration: int) -> dict[str, int]:
    """Units between adjacent levels: `config.step` of the module halved per iteration, at least one KV group and
    `min_channels` neurons (the reference's bounds: one head, 32 channels)."""
    step = config.step / 2**iteration
    return {
        "attn": max(1, round(step * shape.num_kv_heads[0])),
        "mlp": max(min(config.min_channels, shape.intermediate[0] - 1), round(step * shape.intermediate[0])),
    }


@torch.no_grad()
def _logits(model: nn.Module, ids: torch.Tensor, micro_batch: int):
    for chunk in ids.split(micro_batch):
        yield chunk, model(input_ids=chunk.to(input_device(model)), use_cache=False).logits


class Fitness:
    """The sparse KL to the dense model on a stage's minibatch: the dense top-k logits of every calibration
    sequence, computed once; a state's KL is its working copy's logits on the chosen sequences."""

    def __init__(self, dense: nn.Module, ids: torch.Tensor, topk: int, micro_batch: int):
        self.ids, self.micro_batch = ids, micro_batch
        start = time.perf_counter()
        tops = [dense_topk(logits, topk) for _, logits in _logits(dense, ids, micro_batch)]
        self.tokens_per_second = ids.numel() / max(time.perf_counter() - start, 1e-9)
        self.values = torch.cat([v.cpu() for v, _ in tops])
        self.top_ids = torch.cat([i.cpu() for _, i in tops])

    @torch.no_grad()
    def __call__(self, net: Supernet, state: list[int], chosen: list[tuple[int, int]]) -> float:
        net.load(state)
        total = positions = 0
        for take in sorted({t for _, t in chosen}):
            rows = torch.tensor([j for j, t in chosen if t == take])
            for chunk in rows.split(self.micro_batch):
                logits = net.work(input_ids=self.ids[chunk, :take].to(input_device(net.work)), use_cache=False).logits
                s, p = sparse_kl_sum(self.values[chunk, :take], self.top_ids[chunk, :take], logits.cpu())
                total, positions = total + s, positions + p
        return total / max(positions, 1)


def search_tokens(config: TyrConfig) -> int:
    """Tokens the search's forward passes read, per iteration (for the time estimate)."""
    per_generation, candidates = 0, config.offspring
    for stage, (tokens, keep) in enumerate(zip(config.stage_tokens, config.survivors)):
        per_generation += (candidates + (stage == len(config.survivors) - 1)) * tokens
        candidates = keep
    return per_generation * config.generations


def evolve(net: Supernet, fitness: Fitness, config: TyrConfig, rng: random.Random, progress: Progress = None):
    """(best state, its KL, the best KL per generation): `config.generations` generations from the centre."""
    modules = net.modules
    types = [m.kind for m in modules]
    bounds = [(-m.grid.lo, m.grid.hi) for m in modules]
    lengths = [fitness.ids.shape[1]] * fitness.ids.shape[0]
    parent, best, history = [0] * len(modules), None, []
    last = len(config.survivors) - 1
    for generation in range(config.generations):
        candidates = offspring(parent, config.offspring, types, bounds, rng)
        fits: list[float] = []
        for stage, (tokens, keep) in enumerate(zip(config.stage_tokens, config.survivors)):
            if stage == last and parent not in candidates:
                candidates.append(parent)  # elitism: the parent meets the last stage's survivors
            chosen = minibatch(lengths, tokens, rng)
            fits = []
            for i, candidate in enumerate(candidates):  # a progress line per candidate: a stop is seconds away
                fits.append(fitness(net, candidate, chosen))
                if progress:
                    where = f"generation {generation + 1}/{config.generations}, stage {stage + 1}"
                    progress(generation / config.generations, f"search: {where}: candidate {i + 1}/{len(candidates)}")
            order = sorted(range(len(candidates)), key=fits.__getitem__)[:keep]
            candidates, fits = [candidates[i] for i in order], [fits[i] for i in order]
        parent, best = candidates[0], fits[0]
        history.append(round(best, 6))
        if progress:
            progress((generation + 1) / config.generations,
                     f"search: generation {generation + 1}/{config.generations}, best KL {best:.4f}")  # fmt: skip
    return parent, best, history


def tyr_plan(model: nn.Module, sparsity: float, config: TyrConfig, batch: CalibrationBatch, *,
             micro_batch: int = 0, progress: Progress = None, fingerprint: str | None = None):  # fmt: skip
    """The plan Tyr-the-Pruner searches at `sparsity` on `batch`: per layer the kept KV groups and neurons of the
    levels the search chose, the searched distribution in `stats["tyr"]` (`fingerprint`: the model's, when the
    caller has hashed it)."""
    if batch is None:
        raise InvalidInput("tyr prunes and searches on calibration activations: it needs a calibration batch.")
    shape = model_shape(model)
    ids = batch.input_ids
    n, seq_len = ids.shape
    if max(config.stage_tokens) > ids.numel():
        raise InvalidInput(
            f"tyr's selection stages read up to {max(config.stage_tokens)} tokens, but the calibration batch has "
            f"{ids.numel()} ({n} x {seq_len}); draw more (--samples, --seq-len) or lower stage_tokens."
        )
    micro_batch = micro_batch or min(n, 8)
    was_training = model.training
    model.eval()
    rng = random.Random(config.seed)
    fitness = Fitness(model, ids, config.kl_topk, micro_batch)
    estimate = search_tokens(config) * config.iterations / fitness.tokens_per_second
    tokens = search_tokens(config) * config.iterations
    if progress:
        rate = fitness.tokens_per_second
        progress(0.0, f"tyr: the search reads {tokens:,} tokens: about {estimate / 60:.1f} min at {rate:,.0f} tokens/s")
    centres, iterations = initial_centres(shape, sparsity), []
    kept: dict[str, list[list[int]]] = {}
    for it in range(config.iterations):
        steps = level_steps(shape, config, it)
        modules = modules_of(shape, centres, steps, config.levels)
        lo, hi = it / config.iterations, (it + 1) / config.iterations
        folder = cache_dir() / "tyr-supernet"
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            net = Supernet(model, modules, tmp)
            net.build(
                model, ids, config, micro_batch, sub_progress(progress, lo, (lo + hi) / 2, f"iteration {it + 1}: ")
            )
            state, kl, history = evolve(
                net, fitness, config, rng, sub_progress(progress, (lo + hi) / 2, hi, f"iteration {it + 1}: ")
            )
            kept = {kind: [net.kept(j, state[j]) for j, m in enumerate(modules) if m.kind == kind] for kind in MODULES}
            del net
        centres = _centres(modules, state)
        levels = {kind: [state[j] for j, m in enumerate(modules) if m.kind == kind] for kind in MODULES}
        iterations.append({"steps": steps, "best_kl": round(kl, 6), "kl_per_generation": history, "levels": levels})
    model.train(was_training)
    removed = {kind: centres[kind] for kind in MODULES}
    stats = {"tyr": {"iterations": iterations, "removed_per_layer": removed,
                     "seconds_estimated_for_search": round(estimate, 1)}}  # fmt: skip
    source = SimpleNamespace(fingerprint=fingerprint or model_fingerprint(model), calibration=batch.describe())
    return build_plan(source, shape, sparsity, "tyr", config, kept["attn"], kept["mlp"], allocation="global",
                      stats=stats)  # fmt: skip


def _centres(modules: list[Module], state: list[int]) -> dict[str, list[int]]:
    """The next iteration's centres: the units each module removes at its chosen level."""
    out: dict[str, list[int]] = {kind: [] for kind in MODULES}
    for module, level in zip(modules, state):
        out[module.kind].append(module.grid.removed(level))
    return out
