"""Memory planning: estimate a step's peak before running it, and turn OOM into a clear message.

`estimate_scoring` adds up what a scoring pass allocates on top of the loaded weights:

    weight grads      autograd: one `.grad` per block weight (model dtype); hooks: none, but an
                      fp32 dW accumulator per block weight when micro-batching (k > 1 chunks)
    activations       per token and layer, what backward keeps (norm inputs/outputs, q/k/v after
                      RoPE, repeated k/v, attention probabilities [Hq, T], 4 MLP tensors of I)
    logits            [n, T, V] in the model dtype plus fp32 copies for the objective and its
                      gradient (the largest single item for 50k-250k vocabularies)
    transient         the largest [out, in] fp32 temporaries of the saliency product

`estimate_t5_scoring` is T5's counterpart (both stacks; a conservative count from the config).

`check_fits` compares that with what the device has free (CUDA: `torch.cuda.mem_get_info`,
CPU: psutil's available memory) and raises `OutOfMemory` with the numbers and the options
(smaller micro-batch, the hooks method, 8-bit loading, more GPUs). `oom_guard` is a context
manager / decorator that turns an actual CUDA (or CPU allocator) out-of-memory error inside
any step into the same `OutOfMemory`, so the CLI exits with a message and the app keeps running.

Accuracy observed against a measured peak on SmolLM2-135M (CPU, fp32): see
benchmarks/memory/README.md. It is a planning figure, not a guarantee: allocator caching,
fragmentation and kernels' workspaces are not modelled.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import psutil
import torch

from nirvana.errors import OutOfMemory
from nirvana.models.architectures import text_config
from nirvana.models.family import family_name
from nirvana.models.shapes import head_dim_of
from nirvana.models.weights import input_device

GIB = 1024**3
VOCAB_CHUNK = 8192  # most vocabulary entries per chunk of the NIRVANA objective
CHUNK_ELEMENTS = 256 * 8192  # logits per chunk, [n, T, chunk]: 8 MiB in fp32 whatever the micro-batch


def vocab_chunk(tokens: int, vocab: int, largest: int = VOCAB_CHUNK) -> int:
    """Vocabulary entries per chunk of the NIRVANA objective for `tokens` (= n x T) positions: at most
    `largest`, fewer for large passes so that one chunk's logits stay near CHUNK_ELEMENTS (at least 256)."""
    return max(1, min(vocab, largest, max(256, CHUNK_ELEMENTS // max(tokens, 1))))


SKIP_ENV = "NIRVANA_SKIP_MEMORY_CHECK"  # "1" disables the pre-flight check (never the OOM guard)


def dtype_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class ArchSizes:
    """The few numbers of a decoder config that memory depends on."""

    num_layers: int  # L
    hidden_size: int  # D
    intermediate_size: int  # I
    num_heads: int  # Hq
    num_kv_heads: int  # Hkv
    head_dim: int  # d
    vocab_size: int  # V
    tied_embeddings: bool

    @classmethod
    def from_config(cls, config) -> ArchSizes:

        cfg = text_config(config)
        return cls(
            num_layers=cfg.num_hidden_layers,
            hidden_size=cfg.hidden_size,
            intermediate_size=cfg.intermediate_size,
            num_heads=cfg.num_attention_heads,
            num_kv_heads=cfg.num_key_value_heads,
            head_dim=head_dim_of(cfg),
            vocab_size=cfg.vocab_size,
            tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        )

    @property
    def block_weights(self) -> int:
        """Weights of the seven projections of all layers."""
        d, hq, hkv = self.head_dim, self.num_heads, self.num_kv_heads
        per_layer = self.hidden_size * (2 * hq * d + 2 * hkv * d) + 3 * self.hidden_size * self.intermediate_size
        return self.num_layers * per_layer

    @property
    def total_params(self) -> int:
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)
        norms = (2 * self.num_layers + 1) * self.hidden_size
        return self.block_weights + embeddings + norms

    @property
    def largest_projection(self) -> int:
        return max(self.hidden_size * self.intermediate_size, self.hidden_size * self.num_heads * self.head_dim)


@dataclass
class MemoryEstimate:
    """Bytes per component of one step, and the total (the planned peak above resident weights)."""

    step: str
    device: str
    components: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.components.values())

    def describe(self) -> str:
        parts = ", ".join(f"{k} {v / GIB:.2f}" for k, v in self.components.items() if v)
        return f"{self.total / GIB:.2f} GiB ({parts} GiB)"

    def to_dict(self) -> dict:
        return {**asdict(self), "total": self.total}


def _activation_bytes_per_token(a: ArchSizes, seq_len: int, act_bytes: int) -> int:
    """What backward keeps per token for all layers (see the module docstring)."""
    d, hq, hkv = a.head_dim, a.num_heads, a.num_kv_heads
    attn = 3 * hq * d + 2 * hkv * d + 2 * hq * d + 2 * hq * seq_len  # q,k,v (+rope), repeated kv, probs
    per_layer = 4 * a.hidden_size + attn + 4 * a.intermediate_size
    return a.num_layers * per_layer * act_bytes


def estimate_scoring(
    config,
    *,
    samples: int,
    seq_len: int,
    micro_batch: int = 0,
    dtype: torch.dtype = torch.float32,
    method: str = "autograd",
    backward: bool = True,
    quantization: str | None = None,
    device: str = "cpu",
    world_size: int = 1,
    checkpoint: bool = False,
    chunked_logits: bool = False,
    streamed: bool = False,
) -> MemoryEstimate:
    """Planned peak (bytes, above the loaded weights) of scoring `samples x seq_len` tokens.

    `method` is "autograd" (weight `.grad` buffers) or "hooks" (none; fp32 accumulators when
    micro-batching); `backward=False` is a forward-only pass (wanda's input norms).
    `world_size` > 1: per rank of FSDP scoring (`nirvana.scoring.distributed`): each rank holds
    1/world of the weights and of their gradients, scores samples/world sequences, and gathers
    two decoder layers' weights at a time (the one running and the one prefetched).
    `checkpoint` (activation checkpointing, `--activation-checkpointing`): backward keeps each layer's
    input hidden state and recomputes one layer's activations at a time.
    `chunked_logits`: the objective is taken a vocabulary chunk at a time from the final hidden state
    (`nirvana.scoring.objectives`): one `[n, T, chunk]` block and the `[n, V]` maxima instead of the logits.
    `streamed` (autograd, one pass over the whole batch: `nirvana.scoring.criteria.gradient_saliency`):
    each weight's gradient is reduced and freed as soon as it is made, so about one layer's exist at once.
    """
    a = ArchSizes.from_config(config)
    samples = -(-samples // world_size)  # this rank's share of the calibration batch
    n = min(micro_batch or samples, samples)
    chunks = -(-samples // n)
    act = dtype_bytes(dtype)
    tokens = n * seq_len
    est = MemoryEstimate("scoring", device)
    if backward:
        if method == "autograd" and streamed and chunks == 1 and world_size == 1:
            est.components["weight grads (streamed, two layers')"] = 2 * (a.block_weights // a.num_layers) * act
        elif method == "autograd":
            est.components["weight grads"] = a.block_weights * act // world_size
        elif chunks > 1:
            est.components["dW accumulators (fp32)"] = a.block_weights * 4
            est.notes.append("hooks with micro-batches accumulate dW in fp32 to equal the full-batch result")
        every_layer = _activation_bytes_per_token(a, seq_len, act)
        if checkpoint:
            inputs = a.num_layers * a.hidden_size * act  # each checkpointed layer's saved input
            est.components["activations"] = tokens * (inputs + every_layer // a.num_layers)
            est.notes.append("activation checkpointing: one layer's activations at a time, recomputed in backward")
        else:
            est.components["activations"] = tokens * every_layer
        if chunked_logits:  # one chunk in the model dtype, its fp32 copy, its gradient spread; maxima and argmax
            chunk = vocab_chunk(tokens, a.vocab_size)
            est.components["logits (vocabulary chunks)"] = tokens * chunk * (act + 8) + n * a.vocab_size * 12
        else:
            logit_copies = 3 if dtype == torch.float32 else 4  # logits, fp32 copy, objective temp, grad
            est.components["logits"] = tokens * a.vocab_size * (act + (logit_copies - 1) * 4)
        transient = 3 if method == "hooks" else 1
        est.components["saliency temporaries"] = transient * a.largest_projection * 4
    else:
        # Without grad only one layer's activations live at a time; the logits are the bulk.
        est.components["activations"] = tokens * (4 * a.hidden_size + 2 * a.intermediate_size) * act
        est.components["logits"] = tokens * a.vocab_size * act
    if world_size > 1:
        est.components["gathered layers (FSDP)"] = 2 * (a.block_weights // a.num_layers) * act
        est.notes.append(f"per rank of {world_size}: the resident weights are 1/{world_size} of the model's")
    if quantization:
        est.notes.append(f"{quantization} weights are de-quantized one projection at a time for the product")
    return est


# Attention kernels that never form the [Hq, T, T] scores (fused: one block of them at a time); any other
# implementation ("eager", or none recorded) is counted with three copies of them: raw, masked and softmaxed.
FUSED_ATTENTION = frozenset({"sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"})
# Hidden widths per token alive beside a layer's attention or MLP in a no-grad pass: four referenced (the
# embeddings' output, which the decoder keeps for the whole pass; the layer's input; the residual; the norm's
# output) and about two more that the allocator keeps resident between layers (read at every module's entry
# and exit, with the heap pinned: 5.7 widths on Qwen2.5-Coder-0.5B, 6.9 on SmolLM2-135M, 32 x 128 tokens).
RESIDUAL_WIDTHS = 6


def estimate_forward_by_layer(
    config,
    *,
    samples: int,
    seq_len: int,
    micro_batch: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    quantization: str | None = None,
) -> MemoryEstimate:
    """Planned peak of a no-grad pass through the decoder layers only (no lm_head, so no logits).

    Only one layer's tensors are alive at a time, and within it the attention's and then the MLP's, beside the
    residual stream (`RESIDUAL_WIDTHS` hidden widths per token): for the attention, k and v beside four query
    widths (q and three RoPE temporaries; later q, k/v repeated to the query heads and the output), plus the
    [Hq, T] scores three times unless the kernel is fused (`FUSED_ATTENTION`: SDPA on CPU never forms them);
    for the MLP, its gate, up and their product; for `micro_batch` (or all) sequences. The larger of the two
    phases counts. Against FLAP's statistics pass (`bench scale-up`, heap pinned, 2026-12-06), the earlier count
    (three widths; the scores whatever the kernel) was 20% low on Qwen2.5-Coder-0.5B, where the MLP phase
    dominates, and high on attention-heavy configs under SDPA.
    """
    a = ArchSizes.from_config(config)
    n = min(micro_batch or samples, samples)
    d, hq, hkv = a.head_dim, a.num_heads, a.num_kv_heads
    attention = 4 * hq * d + 2 * hkv * d  # q's RoPE (q, q cos, rotated q, its sin product), or q, k/v repeated, output
    if getattr(text_config(config), "_attn_implementation", None) not in FUSED_ATTENTION:
        attention += 3 * hq * seq_len
    per_token = RESIDUAL_WIDTHS * a.hidden_size + max(attention, 3 * a.intermediate_size)
    est = MemoryEstimate("scoring", device)
    est.components["activations (one layer)"] = n * seq_len * per_token * dtype_bytes(dtype)
    if quantization:
        est.notes.append(f"{quantization} weights are de-quantized one projection at a time")
    return est


def t5_parameters(config) -> tuple[int, int]:
    """(block linear weights, all parameters) of a dense T5 config: per block q/k/v/o of its attentions
    (the decoder's two) and the FFN's wi (or wi_0, wi_1) and wo; embeddings, LM head, norms, position bias."""
    d, inner = config.d_model, config.num_heads * config.d_kv
    ffn = (3 if getattr(config, "is_gated_act", False) else 2) * d * config.d_ff
    enc, dec = config.num_layers, config.num_decoder_layers
    block = enc * (4 * d * inner + ffn) + dec * (8 * d * inner + ffn)
    embeddings = config.vocab_size * d * (1 if getattr(config, "tie_word_embeddings", True) else 2)
    norms = (2 * enc + 3 * dec + 2) * d
    bias = 2 * config.relative_attention_num_buckets * config.num_heads
    return block, block + embeddings + norms + bias


def estimate_t5_scoring(
    config,
    *,
    samples: int,
    seq_len: int,
    micro_batch: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    quantization: str | None = None,
) -> MemoryEstimate:
    """Planned peak (bytes, above the loaded weights) of a T5 gradient criterion (`nirvana.t5.scoring`).

    A conservative count from the config, for windows split in halves (T // 2 encoder tokens, the rest decoder
    targets): a `.grad` for every parameter (the scorer lets all of them require grad), what backward keeps per
    token and block of both stacks (residual stream and norms, q/k/v/o, attention scores, biased scores and
    probabilities, the cross-attention's over the encoder tokens and its k/v of them, four d_ff tensors), the
    decoder's logits `[n, T_dec, V]` with three fp32 copies (objective, loss and gradient), and the fp64
    saliency temporaries of the largest projection.
    """
    d, heads, inner, ff = config.d_model, config.num_heads, config.num_heads * config.d_kv, config.d_ff
    n = min(micro_batch or samples, samples)
    t_enc, t_dec = seq_len // 2, seq_len - seq_len // 2
    act = dtype_bytes(dtype)
    est = MemoryEstimate("scoring", device)
    est.components["weight grads (all parameters)"] = t5_parameters(config)[1] * act
    encoder = config.num_layers * t_enc * (4 * d + 4 * inner + 3 * heads * t_enc + 4 * ff)
    decoder = config.num_decoder_layers * (
        t_dec * (6 * d + 6 * inner + 3 * heads * (t_dec + t_enc) + 4 * ff) + t_enc * 2 * inner
    )
    est.components["activations (both stacks)"] = n * (encoder + decoder) * act
    est.components["logits"] = n * t_dec * config.vocab_size * (act + 3 * 4)
    est.components["saliency temporaries (fp64)"] = 4 * d * max(ff, inner) * 8
    est.notes.append("T5: a conservative estimate from the parameter count and both stacks' activations")
    if quantization:
        est.notes.append(f"{quantization} weights: the count assumes dense ones")
    return est


def estimate_load(config, *, dtype: torch.dtype = torch.float32, quantization: str | None = None) -> MemoryEstimate:
    """Bytes the weights take once loaded (8-bit: 1 byte per block weight, 4-bit: ~0.5 + scales)."""
    return LOAD_ESTIMATES[family_name(config)](config, dtype, quantization)


def _t5_load(config, dtype: torch.dtype, quantization: str | None) -> MemoryEstimate:
    act, est = dtype_bytes(dtype), MemoryEstimate("loading", "")
    block, total = t5_parameters(config)
    est.components["block weights"] = block * act
    est.components["embeddings, lm_head, norms"] = (total - block) * act
    return est


def _decoder_load(config, dtype: torch.dtype, quantization: str | None) -> MemoryEstimate:
    act, est = dtype_bytes(dtype), MemoryEstimate("loading", "")
    a = ArchSizes.from_config(config)
    rest = a.total_params - a.block_weights
    if quantization == "8bit":
        est.components["block weights (int8)"] = a.block_weights + a.num_layers * 8 * a.hidden_size * 4
        rest_bytes = rest * 2  # bitsandbytes keeps the rest in fp16/bf16
    elif quantization == "4bit":
        est.components["block weights (4-bit)"] = a.block_weights // 2 + a.block_weights // 64 * 4
        rest_bytes = rest * 2
    else:
        est.components["block weights"] = a.block_weights * act
        rest_bytes = rest * act
    est.components["embeddings, lm_head, norms"] = rest_bytes
    return est


LOAD_ESTIMATES = {"decoder-only": _decoder_load, "t5": _t5_load}  # by family (nirvana.models.family)


def estimate_training(
    config,
    *,
    micro_batch: int,
    seq_len: int,
    trainable_params: int,
    dtype: torch.dtype = torch.float32,
    trainable_dtype: torch.dtype = torch.float32,
    copy_bytes: int = 0,
    gradient_checkpointing: bool = False,
    teacher_config=None,
    teacher_dtype: torch.dtype | None = None,
    teacher_loaded: bool = False,
    device: str = "cpu",
) -> MemoryEstimate:
    """Planned peak (bytes above the loaded student) of recovery training, one micro-batch at a time.

    The trainable parameters (LoRA adapters, or the decoder's own weights with full fine-tuning) carry
    a gradient, AdamW's two moments and the last good copy kept for a non-finite step, all in
    `trainable_dtype`; `copy_bytes` is the copy of the student that is trained when the caller's model
    is left untouched. Activations follow `estimate_scoring`'s count for the dense widths (an upper
    bound for a pruned model), or with `gradient_checkpointing` each layer's input plus one layer.
    A distillation `teacher_config` adds the teacher's weights (unless `teacher_loaded`) and one
    micro-batch of its logits with their fp32 log-probabilities.
    """
    a = ArchSizes.from_config(config)
    act, tokens = dtype_bytes(dtype), micro_batch * seq_len
    est = MemoryEstimate("recovery training", device)
    est.components["copy of the student"] = copy_bytes
    est.components["trainable: gradients, AdamW moments, last good copy"] = (
        4 * trainable_params * dtype_bytes(trainable_dtype)
    )
    every_layer = _activation_bytes_per_token(a, seq_len, act)
    if gradient_checkpointing:
        every_layer = a.num_layers * a.hidden_size * act + every_layer // a.num_layers
    est.components["activations"] = tokens * every_layer
    est.components["logits"] = tokens * a.vocab_size * (act + 2 * 4)  # logits, fp32 log-softmax, its gradient
    if teacher_config is not None:
        t_dtype = teacher_dtype or dtype
        if not teacher_loaded:
            est.components["teacher weights"] = estimate_load(teacher_config, dtype=t_dtype).total
        vocab = ArchSizes.from_config(teacher_config).vocab_size
        est.components["teacher logits"] = tokens * vocab * (dtype_bytes(t_dtype) + 2 * 4)  # + fp32 log-probs, probs
        est.notes.append("distillation: the teacher's forward runs without gradients, one micro-batch at a time")
    return est


def available_bytes(device: str | torch.device = "cpu") -> int:
    """Free memory a new allocation can use: CUDA free + the caching allocator's reserve, or CPU available."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))

    return int(psutil.virtual_memory().available)


def model_devices(model) -> list[str]:
    """Devices holding the model's weights (several for a dispatched `device_map` model)."""
    device_map = getattr(model, "hf_device_map", None)
    if device_map:
        devices = []
        for value in device_map.values():
            name = f"cuda:{value}" if isinstance(value, int) else str(value)
            if name == "disk":
                continue
            if name not in devices:
                devices.append(name)
        return devices or ["cpu"]
    return [str(input_device(model))]  # the execution device of an accelerate-offloaded model


def _options(step: str, device: str) -> str:
    gpu = device.startswith("cuda")
    options = [
        "a smaller calibration batch or sequence length (N, T)",
        "micro-batching (micro_batch / --micro-batch: activations and logits scale with it)",
        "the hooks method (no weight-gradient buffers)",
        "8-bit or 4-bit loading (--quantization 8bit)",
    ]
    if gpu:
        options.append("more GPUs (--device-map auto, with max_memory per GPU)")
    else:
        options.append("a GPU machine (see docs/DEPLOY.md)")
    return "; ".join(options)


def check_fits(estimate: MemoryEstimate, available: int | None = None, headroom: float = 0.9) -> MemoryEstimate:
    """Raise `OutOfMemory` when `estimate.total` exceeds `headroom` x the device's free memory.

    Set NIRVANA_SKIP_MEMORY_CHECK=1 to skip (the estimate is conservative for sdpa attention).
    """
    if os.environ.get(SKIP_ENV, "").lower() in {"1", "true", "yes"}:
        return estimate
    device = estimate.device or "cpu"
    if available is None:
        available = sum(available_bytes(dev) for dev in device.split(","))
    if estimate.total <= headroom * available:
        return estimate
    raise OutOfMemory(
        f"{estimate.step} needs about {estimate.describe()} on {device}, but only "
        f"{available / GIB:.2f} GiB is free there. Options: {_options(estimate.step, device)}. "
        f"(Estimate from the config; set {SKIP_ENV}=1 to try anyway.)"
    )


# Sequences x positions per scoring micro-batch on a CPU: on SmolLM2 (2 cores, fp32) 256 tokens were the
# fastest and among the leanest (benchmarks/memory/microbatch-smollm2-cpu.md); larger ones only add memory.
CPU_MICRO_BATCH_TOKENS = 256
GPU_SHARE = 0.5  # on a GPU, the whole batch at once only when planned to fit this share of its free memory


def choose_scoring(
    model, samples: int, seq_len: int, *, checkpoint_ok: bool = False, estimate: Callable | None = None, **plan
) -> tuple[int, bool]:
    """(micro-batch, activation checkpointing) for scoring when no micro-batch is given (`micro_batch=0`).

    From the memory plan (`estimate`, default `estimate_scoring(..., **plan)`), the first that fits:
    - CPU: CPU_MICRO_BATCH_TOKENS tokens' worth of sequences (the fastest here) within 80% of the free memory;
    - GPU: the whole batch within GPU_SHARE of the free memory;
    - (`checkpoint_ok`: the scorer can checkpoint and streams one pass) the whole batch in one pass with
      activation checkpointing, within 80%: no weight-gradient buffers, activations of one layer;
    - micro-batches halved until the plan fits 80%, down to one sequence (with checkpointing if that is
      what makes it fit).
    Only for objectives that are sums over sequences, where every choice gives the same scores (to
    float rounding)."""
    estimate = estimate or functools.partial(estimate_scoring, **plan)
    devices = model_devices(model)
    weight = next((p for p in model.parameters() if p.is_floating_point()), None)
    dtype = weight.dtype if weight is not None else torch.float32
    available = sum(available_bytes(dev) for dev in devices)

    def fits(mb: int, checkpoint: bool, share: float = 0.8) -> bool:
        kw = {"checkpoint": True} if checkpoint else {}
        planned = estimate(model.config, samples=samples, seq_len=seq_len, micro_batch=mb, dtype=dtype, **kw).total
        return planned <= share * available

    on_cpu = all(torch.device(dev).type == "cpu" for dev in devices)
    first = max(1, min(samples, round(CPU_MICRO_BATCH_TOKENS / seq_len))) if on_cpu else samples
    if fits(first, False, 0.8 if on_cpu else GPU_SHARE):
        return first, False
    if checkpoint_ok and fits(samples, True):
        return samples, True
    for checkpoint in (False, True) if checkpoint_ok else (False,):
        mb = first
        while mb > 1 and not fits(mb, checkpoint):
            mb = -(-mb // 2)
        if fits(mb, checkpoint):
            return mb, checkpoint
    return mb, checkpoint_ok  # nothing fits: the memory check that follows says so, with what would


def choose_micro_batch(model, samples: int, seq_len: int, *, estimate: Callable | None = None, **plan) -> int:
    """`choose_scoring` for a scorer that neither checkpoints nor streams (LLM-Pruner's gradients)."""
    return choose_scoring(model, samples, seq_len, estimate=estimate, **plan)[0]


def check_scoring_memory(
    model,
    samples: int,
    seq_len: int,
    *,
    micro_batch: int = 0,
    method: str = "autograd",
    backward: bool = True,
    estimate: Callable[..., MemoryEstimate] | None = None,
    device: str | None = None,
    **plan,
) -> MemoryEstimate:
    """Estimate and check a scoring pass on a loaded model; suggest a micro-batch that would fit.

    `estimate(config, *, samples, seq_len, micro_batch, dtype, device, quantization)` plans the
    pass; the default is `estimate_scoring` with `method`, `backward` and `plan` (its `checkpoint`,
    `chunked_logits`, `streamed`: NIRVANA's criteria). A
    pruning method passes its own (`nirvana.methods.base.Method.memory`: LLM-Pruner's squared-gradient
    buffers, FLAP's forward one layer at a time).
    For a model dispatched over several devices the free memory of all of them is pooled (an
    approximation: activations follow the layers, the logits land on the last device).
    `device`: where the pass will run when that is not where the weights are now (sharded scoring:
    the weights wait on the CPU, or on the meta device, until `fully_shard` moves each rank's share).
    """
    if estimate is None:
        estimate = functools.partial(estimate_scoring, method=method, backward=backward, **plan)
    devices = [device] if device else model_devices(model)
    weight = next((p for p in model.parameters() if p.is_floating_point()), None)
    dtype = weight.dtype if weight is not None else torch.float32
    quant = getattr(getattr(model, "config", None), "quantization_config", None)
    kwargs = dict(
        samples=samples,
        seq_len=seq_len,
        dtype=dtype,
        device=",".join(devices),
        quantization="quantized" if quant else None,
    )
    try:
        return check_fits(estimate(model.config, micro_batch=micro_batch, **kwargs))
    except OutOfMemory as exc:
        available = sum(available_bytes(dev) for dev in devices)
        hint = ""
        mb = micro_batch or samples
        while mb > 1:
            mb //= 2
            if estimate(model.config, micro_batch=mb, **kwargs).total <= 0.9 * available:
                hint = f" A micro-batch of {mb} would fit by this estimate."
                break
        raise OutOfMemory(f"{exc}{hint}") from None


def is_oom(exc: BaseException) -> bool:
    """CUDA out-of-memory, or the CPU allocator failing to allocate."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "can't allocate memory" in text or "not enough memory" in text or "out of memory" in text.lower()
    )


@contextlib.contextmanager
def oom_guard(step: str, device: str = ""):
    """Turn an out-of-memory error inside `step` into `OutOfMemory` with the options; free the CUDA cache.

    Usable as `with oom_guard("scoring"):` or as a decorator `@oom_guard("evaluation")`.
    """
    try:
        yield
    except Exception as exc:
        if not is_oom(exc):
            raise
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        where = device or ("cuda" if "CUDA" in str(exc) else "cpu")
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise OutOfMemory(f"{step} ran out of {where} memory ({first}). Options: {_options(step, where)}.") from exc
