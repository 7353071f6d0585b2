"""Importance criteria as a typed table, `CRITERIA[name]`, behind one entry point `compute_scores`.

- `nirvana`: |dF/dW * W| with F = mean over (batch, vocab) of the max over positions of the
  logits (METHOD.md section 2). One forward and one backward, no labels.
- `taylor`: |dLoss/dW * W| with the next-token LM loss (LLM-Pruner's first-order criterion).
- `magnitude`: |W|.  `wanda`: |W| * ||X_col||_2 of the layer input.  `random`: seeded.

All of them score the same units (KV groups, neurons) through `nirvana.scoring.units`. Each is one
`Criterion` row (scorer, what it needs, label, colour): adding a criterion is one row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn

from nirvana.data.calibration import CalibrationBatch
from nirvana.errors import InvalidInput
from nirvana.guard.memory import check_scoring_memory, choose_scoring
from nirvana.models.architectures import layer_projections
from nirvana.models.checkpointing import checkpointed
from nirvana.models.shapes import model_shape
from nirvana.models.weights import dense_weight, input_device
from nirvana.progress import Progress
from nirvana.scoring.hooks import hook_saliency, resolve_method
from nirvana.scoring.objectives import CHUNKED, forward_objective, lm_loss_objective, nirvana_objective, output_head
from nirvana.scoring.scores import Scores, cached_scores
from nirvana.scoring.units import group_units, reduce_to_axis


@contextlib.contextmanager
def only_block_weights_require_grad(model: torch.nn.Module):
    """Gradients only for the seven projections: embeddings and lm_head get no buffers."""
    saved = {p: p.requires_grad for p in model.parameters()}
    try:
        for p in model.parameters():
            p.requires_grad_(False)
        for proj in layer_projections(model):
            for lin in proj.named_linears().values():
                lin.weight.requires_grad_(True)
                if lin.bias is not None:
                    lin.bias.requires_grad_(True)
        yield
    finally:
        for p, flag in saved.items():
            p.requires_grad_(flag)
        model.zero_grad(set_to_none=True)


def gradient_saliency(
    model,
    input_ids: torch.Tensor,
    objective,
    micro_batch: int = 0,
    progress: Progress = None,
    *,
    checkpoint: bool = False,
):
    """Per-layer axis vectors of |dObjective/dW * W| (+ bias terms) via autograd on `.grad`.

    One pass over the whole batch (`micro_batch` 0 or >= N) is *streamed*: each weight's gradient is
    reduced to its unit-axis vector as soon as backward has accumulated it, and freed, so about one
    layer's gradients exist at a time instead of every layer's (the same values: nothing is summed
    after). With micro-batches `.grad` must hold the whole sum until the last one, |sum dW * W| being
    the score. `checkpoint`: activation checkpointing of the decoder layers (`nirvana.models.checkpointing`).

    `.grad` adds up the micro-batches in the weights' dtype; the products and unit sums are fp32. For bf16
    weights, fp32 gradient buffers were measured not to help (a tiny Llama, 64 micro-batches of one
    sequence: 1.48% vs 1.39% max relative difference from fp32 scores, the bf16 forward's own error is
    1.40%) and would double the gradients' memory (13 to 26 GiB on Llama-3.1-8B), so there are none.
    """
    n = input_ids.shape[0]
    micro_batch = min(micro_batch or n, n)
    device = input_device(model)
    with (
        only_block_weights_require_grad(model),
        checkpointed(model, checkpoint),
        _Streamed(model, micro_batch == n) as s,
    ):
        model.zero_grad(set_to_none=True)
        for start in range(0, n, micro_batch):
            chunk = input_ids[start : start + micro_batch].to(device)
            forward_objective(model, chunk, objective, n).backward()
            if progress:
                progress(
                    min(1.0, (start + micro_batch) / n) * 0.9, f"forward+backward {min(start + micro_batch, n)}/{n}"
                )
        if s.enabled:
            return axis_vectors(model, s.weight_vector, s.bias_vector, reduced=True)
        return axis_vectors(model, _weight_saliency, _bias_saliency)


def _weight_saliency(name, lin, _layer) -> torch.Tensor:
    return (lin.weight.grad.float() * lin.weight.detach().float()).abs()


def _bias_saliency(name, lin, _layer) -> torch.Tensor:
    return (lin.bias.grad.float() * lin.bias.detach().float()).abs()


class _Streamed:
    """Post-accumulate-grad hooks that turn each block weight's gradient into its unit-axis vector at once.

    `weight_vector`/`bias_vector` then hand `axis_vectors(..., reduced=True)` the vectors already made."""

    def __init__(self, model, enabled: bool):
        self.model, self.enabled = model, enabled
        self.vectors: dict[torch.Tensor, torch.Tensor] = {}
        self.handles = []

    def __enter__(self):
        if not self.enabled:
            return self
        for proj in layer_projections(self.model):
            for name, lin in proj.named_linears().items():
                self._watch(
                    lin.weight, lambda p, name=name, lin=lin: reduce_to_axis(name, _weight_saliency(name, lin, 0))
                )
                if lin.bias is not None:
                    self._watch(lin.bias, lambda p, name=name, lin=lin: _bias_saliency(name, lin, 0))
        return self

    def _watch(self, param: torch.Tensor, vector) -> None:
        def hook(p):
            self.vectors[p] = vector(p).cpu()
            p.grad = None  # freed now: only the vector is kept

        self.handles.append(param.register_post_accumulate_grad_hook(hook))

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()
        return False

    def weight_vector(self, name, lin, _layer) -> torch.Tensor:
        return self.vectors[lin.weight]

    def bias_vector(self, name, lin, _layer) -> torch.Tensor:
        return self.vectors[lin.bias]


def axis_vectors(model, weight_fn, bias_fn=None, *, reduced: bool = False) -> list[dict[str, torch.Tensor]]:
    """Per-layer axis vectors of an elementwise saliency: `weight_fn(name, lin) -> [out, in]` (`reduced`:
    already the unit-axis vector).

    Biases of q/k/v/gate/up belong to their unit (METHOD.md section 2): `bias_fn(name, lin) -> [out]`
    is added to the row sums. o/down biases live on the hidden axis, which is never pruned.
    """
    layers = []
    for layer_idx, proj in enumerate(layer_projections(model)):
        vectors = {}
        for name, lin in proj.named_linears().items():
            vec = weight_fn(name, lin, layer_idx)
            vec = vec if reduced else reduce_to_axis(name, vec)
            if bias_fn is not None and lin.bias is not None and name not in ("o_proj", "down_proj"):
                vec = vec + bias_fn(name, lin, layer_idx)
            vectors[name] = vec.cpu()
        layers.append(vectors)
    return layers


def input_norms(model, input_ids: torch.Tensor, micro_batch: int = 0) -> list[dict[str, torch.Tensor]]:
    """||X_col||_2 over all calibration tokens for the input of every projection: `[in]` each."""
    sums: dict[nn.Module, torch.Tensor] = {}

    def hook(module, args, _out):
        x = args[0].detach().float()
        sq = x.pow(2).reshape(-1, x.shape[-1]).sum(0)  # (in,)
        sums[module] = sums[module] + sq if module in sums else sq

    projections = layer_projections(model)
    handles = [lin.register_forward_hook(hook) for proj in projections for lin in proj.named_linears().values()]
    try:
        n = input_ids.shape[0]
        micro_batch = micro_batch or n
        with torch.no_grad():
            for start in range(0, n, micro_batch):
                model(input_ids=input_ids[start : start + micro_batch].to(input_device(model)), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return [{name: sums[lin].sqrt() for name, lin in proj.named_linears().items()} for proj in projections]


def _stack(model, layers: list[dict[str, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    shape = model_shape(model)
    attn, mlp = zip(*(group_units(v, shape.head_dim, shape.group_size) for v in layers))
    return torch.stack(attn), torch.stack(mlp)  # (L, Hkv), (L, I)


def _weight(lin) -> torch.Tensor:
    return dense_weight(lin)  # fp32; de-quantizes bitsandbytes layers, reads accelerate-offloaded ones


def _gradient_scores(model, batch, objective, micro_batch, progress, method, checkpoint=False):
    """`method` "autograd": `.grad` (streamed in one pass; `checkpoint` possible); "hooks": dW from layer hooks
    (nirvana.scoring.hooks), the same result."""
    if method == "hooks":
        return _stack(model, hook_saliency(model, batch.input_ids, objective, micro_batch, progress))
    return _stack(
        model, gradient_saliency(model, batch.input_ids, objective, micro_batch, progress, checkpoint=checkpoint)
    )


def _scores_nirvana(model, batch, seed, micro_batch, progress, method="autograd", checkpoint=False):
    return _gradient_scores(model, batch, nirvana_objective, micro_batch, progress, method, checkpoint)


def _scores_taylor(model, batch, seed, micro_batch, progress, method="autograd", checkpoint=False):
    return _gradient_scores(model, batch, lm_loss_objective, micro_batch, progress, method, checkpoint)


def _scores_magnitude(model, batch, seed, micro_batch, progress):
    return _stack(
        model,
        axis_vectors(model, lambda n, lin, _: _weight(lin).abs(), lambda n, lin, _: lin.bias.detach().float().abs()),
    )


def _scores_wanda(model, batch, seed, micro_batch, progress):
    """|W_ij| ||X_j||_2; a bias is a weight on a constant-1 input, so its norm is sqrt(#tokens)."""
    norms = input_norms(model, batch.input_ids, micro_batch)
    tokens = batch.input_ids.numel()
    return _stack(
        model,
        axis_vectors(
            model,
            lambda n, lin, i: _weight(lin).abs() * norms[i][n].to(lin.weight.device)[None, :],
            lambda n, lin, i: lin.bias.detach().float().abs() * tokens**0.5,
        ),
    )


def _scores_random(model, batch, seed, micro_batch, progress):
    shape = model_shape(model)
    gen = torch.Generator().manual_seed(seed)
    attn = torch.rand((shape.num_layers, shape.num_kv_heads[0]), generator=gen)
    mlp = torch.rand((shape.num_layers, shape.intermediate[0]), generator=gen)
    return attn, mlp


@dataclass(frozen=True)
class Criterion:
    """One importance criterion: how it scores, what it needs, and how the app and reports name it.

    `score(model, batch, seed, micro_batch, progress[, method]) -> (attn [L, Hkv], mlp [L, I])`.
    """

    name: str
    score: Callable
    needs_data: bool  # reads the calibration batch (its scores depend on which text)
    uses_gradients: bool  # a backward pass; takes `method=` (autograd | hooks)
    seeded: bool  # depends on `seed` (part of its cache key)
    label: str  # for people: legends, tables, help (its colour: nirvana.charts.CRITERION_COLORS)
    description: str  # one line: what it computes
    objective: Callable | None = None  # what a gradient criterion differentiates (nirvana.scoring.objectives)


DEFAULT_CRITERION = "nirvana"  # the paper's saliency; the other criteria are its ablations

CRITERIA: dict[str, Criterion] = {
    c.name: c
    for c in (
        Criterion(
            DEFAULT_CRITERION,
            _scores_nirvana,
            needs_data=True,
            uses_gradients=True,
            seeded=False,
            label="NIRVANA",
            description="|dF/dW * W|, F = mean over batch and vocab of max over positions of logits",
            objective=nirvana_objective,
        ),
        Criterion(
            "taylor",
            _scores_taylor,
            needs_data=True,
            uses_gradients=True,
            seeded=False,
            label="loss-Taylor",
            description="|dLoss/dW * W| with the LM loss (LLM-Pruner first-order)",
            objective=lm_loss_objective,
        ),
        Criterion(
            "magnitude",
            _scores_magnitude,
            needs_data=False,
            uses_gradients=False,
            seeded=False,
            label="magnitude",
            description="|W|",
        ),
        Criterion(
            "wanda",
            _scores_wanda,
            needs_data=True,
            uses_gradients=False,
            seeded=False,
            label="Wanda-style",
            description="|W| * ||X||_2 of the layer input",
        ),
        Criterion(
            "random",
            _scores_random,
            needs_data=False,
            uses_gradients=False,
            seeded=True,
            label="random",
            description="uniform random, seeded",
        ),
    )
}
# The criteria whose scores depend on calibration data (the ones a calibration search can help).
DATA_CRITERIA = tuple(name for name, c in CRITERIA.items() if c.needs_data)


def get_criterion(name: str) -> Criterion:
    """The table row for `name`; `InvalidInput` listing the accepted names otherwise."""
    if name not in CRITERIA:
        raise InvalidInput(f"unknown criterion {name!r}; accepted: {', '.join(CRITERIA)}.")
    return CRITERIA[name]


def criteria_help(names=None) -> str:
    """`name (label): description; ...` for help texts (all criteria, or `names`)."""
    rows = [CRITERIA[n] for n in (names or CRITERIA)]
    return "; ".join(f"{c.name}{f' ({c.label})' if c.label != c.name else ''}: {c.description}" for c in rows)


def compute_scores(
    model,
    criterion: str = DEFAULT_CRITERION,
    batch: CalibrationBatch | None = None,
    *,
    seed: int = 0,
    micro_batch: int = 0,
    use_cache: bool = True,
    progress: Progress = None,
    method: str = "auto",
    checkpoint: bool | None = None,
) -> Scores:
    """Score every KV group and neuron of `model` with `criterion`, using the disk cache.

    `micro_batch` 0 and `checkpoint` None: both chosen from the memory plan (`choose_scoring`); the
    scores are the same either way (objectives that sum over sequences; one pass streams its gradients).
    `checkpoint` True: activation checkpointing of the decoder layers (autograd gradient criteria).

    `method` (gradient criteria only): "autograd" (weight `.grad`), "hooks" (dW from layer hooks:
    no gradient buffers, works on 8-/4-bit and offloaded models), "auto" (hooks only where
    autograd cannot work). Before running, the peak memory is estimated and `OutOfMemory` raised
    if it cannot fit (nirvana.guard.memory); an OOM while running is reported the same way.

    Example:
        >>> scores = compute_scores(model, "nirvana", calibration_batch(tok, "wikitext2-valid"))
        >>> scores.attn.shape, scores.mlp.shape      # (L, Hkv), (L, I)
    """
    row = get_criterion(criterion)
    needs_data = row.needs_data
    shape = model_shape(model)
    if not shape.is_uniform:
        raise InvalidInput("this model is already pruned (layers differ in width); score the dense model instead.")
    if needs_data and batch is None:
        raise InvalidInput(f"criterion {criterion!r} needs a calibration batch.")
    if needs_data:
        batch.check_vocab(model.get_input_embeddings().num_embeddings)
    calib = batch.describe() if (batch is not None and needs_data) else None
    extra = {"seed": seed} if row.seeded else {}
    kwargs = {}
    if row.uses_gradients:
        kwargs["method"] = extra["method"] = resolve_method(model, method)
    if checkpoint and kwargs.get("method") != "autograd":
        raise InvalidInput(
            f"activation checkpointing needs a gradient criterion scored with autograd; {criterion!r} "
            f"{'uses the hooks method' if kwargs else 'runs no backward pass'}. Leave it off."
        )

    def plan() -> tuple[int, bool]:
        """(micro-batch, checkpointing): as given, or chosen from the memory plan; checked to fit."""
        if not needs_data:
            return micro_batch, False
        n, t = batch.input_ids.shape
        streams = kwargs.get("method") == "autograd"  # one pass streams its gradients, and may checkpoint
        setup = dict(
            method=kwargs.get("method", "autograd"),
            backward=row.uses_gradients,
            chunked_logits=row.objective in CHUNKED and output_head(model) is not None,
            streamed=streams,
        )
        mb, ckpt = micro_batch, checkpoint
        if not mb:
            mb, chosen = choose_scoring(model, n, t, checkpoint_ok=streams and ckpt is None, **setup)
            ckpt = chosen if ckpt is None else ckpt
        check_scoring_memory(model, n, t, micro_batch=mb, checkpoint=bool(ckpt), **setup)
        return mb, bool(ckpt)

    def score(fingerprint: str, planned: tuple[int, bool]) -> Scores:
        mb, ckpt = planned
        attn, mlp = row.score(model, batch, seed, mb, progress, **kwargs, **({"checkpoint": True} if ckpt else {}))
        meta = {"cache_hit": False, "seed": seed if row.seeded else None}
        if needs_data:
            meta["micro_batch"] = mb
            meta["activation_checkpointing"] = ckpt
        if kwargs:
            meta["method"] = kwargs["method"]
        return Scores({"attn": attn.float().cpu(), "mlp": mlp.float().cpu()}, criterion, fingerprint, calib, meta)

    return cached_scores(model, criterion, calib, extra, score, memory=plan, use_cache=use_cache, progress=progress)
