"""SliceGPT's rotate-and-slice, layer by layer on the calibration batch: forward only.

Transcribes microsoft/TransformerCompression `src/slicegpt/rotate.py` `rotate_and_slice_sequential`
(with `layernorm_fusion.py` `fuse_modules` first), for the families whose layer is
`h = x + attn(norm(x)); y = h + mlp(norm(h))`:

    fold:    W_qkv *= input_layernorm.weight, W_gate/up *= post_attention_layernorm.weight,
             W_head = copy(W_embed) * norm.weight (untied); the norms lose their weight (RMSN, /D)
    Q <- PCA(layer-0 inputs);  W_embed <- (W_embed Q)[:, :d0]
    per layer, with inputs x (previous basis):
        attn_shortcut <- Q^T[:a_in, :];  W_qkv <- (W_qkv Q)[:, :a_in];  x <- (x Q)[..., :a_in]
        Q <- PCA(input of the MLP norm)           (the layer run with o_proj not yet rotated)
        attn_shortcut <- attn_shortcut Q[:, :a_out];  W_o <- (Q^T W_o)[:a_out];  b_o <- (Q^T b_o)[:a_out]
        mlp_shortcut <- Q^T[:m_in, :];  W_gate/up <- (W Q)[:, :m_in]
        Q <- PCA(layer output)                    (the layer run with attention sliced, down_proj not)
        mlp_shortcut <- (mlp_shortcut Q)[:, :m_out];  W_down <- (Q^T W_down)[:m_out];  x <- layer output
    W_head <- (W_head Q)[:, :head]

    PCA(X) = eigenvectors of H = sum X^T X (fp64) + damp mean(diag H) I, by decreasing eigenvalue.

Every product is formed in float64 and cast back to the model's dtype, as the reference does.
Deliberate differences (docs/BASELINES.md): the reference also subtracts each embedding row's mean,
which LayerNorm models need and RMSNorm models do not (it changes their function; QuaRot issue 7
and TransformerCompression issue 129); the weightless norm uses the model's own epsilon, not a
hard-coded 1e-5; the calibration sequences are unpadded, so the reference's padding mask is moot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn as nn

from nirvana.errors import InvalidInput
from nirvana.methods.slicegpt.budget import HiddenDims
from nirvana.methods.slicegpt.config import SliceGPTConfig
from nirvana.models.architectures import decoder_layers, get_architecture, text_config
from nirvana.models.capture import first_output, layer_inputs
from nirvana.progress import Progress

if TYPE_CHECKING:
    from nirvana.models.modeling_nirvana import ShortcutDecoderLayer


def _norm_eps(norm: nn.Module, default: float) -> float:
    return float(getattr(norm, "variance_epsilon", getattr(norm, "eps", default)))


def _norm_weight(norm: nn.Module, where: str) -> torch.Tensor:
    weight = getattr(norm, "weight", None)
    if weight is None or weight.dim() != 1 or getattr(norm, "bias", None) is not None:
        raise InvalidInput(
            f"slicegpt folds RMSNorm scales into the next projections; {where} is a {type(norm).__name__}."
        )
    return weight.detach().double()


def _linear(weight: torch.Tensor, bias: torch.Tensor | None, like: nn.Linear) -> nn.Linear:
    """A new nn.Linear holding `weight` [out, in] (and `bias`) in `like`'s dtype and device."""
    dtype, device = like.weight.dtype, like.weight.device
    new = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device=device, dtype=dtype)
    new.weight.data.copy_(weight.to(device=device, dtype=dtype))
    if bias is not None:
        new.bias.data.copy_(bias.to(device=device, dtype=dtype))
    return new


def _w(lin: nn.Linear) -> torch.Tensor:
    return lin.weight.detach().double()


def _b(lin: nn.Linear) -> torch.Tensor | None:
    return None if lin.bias is None else lin.bias.detach().double()


def fold_norms(model: nn.Module) -> float:
    """Untie the head, fold every RMSNorm's scale into the projections it feeds, and make the norms
    weightless (`HiddenRMSNorm` over the dense width) inside `ShortcutDecoderLayer`s whose shortcuts
    are the identity. The model computes the same function afterwards. Returns the norms' epsilon."""
    # The method table is imported by the CLI's checks, which must not wait for transformers' modeling.
    # here, not at the top: the shipped modeling file imports transformers' modeling (seconds)
    from nirvana.models.modeling_nirvana import HiddenRMSNorm, ShortcutDecoderLayer

    arch, cfg = get_architecture(model), text_config(model.config)
    hidden = cfg.hidden_size
    decoder = model.get_decoder()
    eps = _norm_eps(decoder.norm, getattr(cfg, "rms_norm_eps", 1e-6))
    head = model.get_output_embeddings()
    model.set_output_embeddings(_linear(_w(head) * _norm_weight(decoder.norm, "the final norm"), None, head))
    decoder.norm = HiddenRMSNorm(hidden, eps)
    layers = decoder_layers(model)
    for idx, layer in enumerate(list(layers)):
        attn, mlp = getattr(layer, arch.attn), getattr(layer, arch.mlp)
        scale_in = _norm_weight(layer.input_layernorm, f"layer {idx}'s input_layernorm")
        scale_mid = _norm_weight(layer.post_attention_layernorm, f"layer {idx}'s post_attention_layernorm")
        for parent, names, scale in (
            (attn, ("q_proj", "k_proj", "v_proj"), scale_in),
            (mlp, ("gate_proj", "up_proj"), scale_mid),
        ):
            for name in names:
                lin = getattr(parent, getattr(arch, name))
                setattr(parent, getattr(arch, name), _linear(_w(lin) * scale[None, :], _b(lin), lin))
        wrapped = ShortcutDecoderLayer(layer, (hidden,) * 4, hidden, eps)
        eye = torch.eye(hidden, dtype=wrapped.attn_shortcut_Q.dtype, device=wrapped.attn_shortcut_Q.device)
        wrapped.attn_shortcut_Q.data.copy_(eye)
        wrapped.mlp_shortcut_Q.data.copy_(eye)
        layers[idx] = wrapped
    model.config.tie_word_embeddings = False
    text_config(model.config).tie_word_embeddings = False
    return eps


def pca(signals: list[torch.Tensor], damp: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(eigenvalues [D] of the undamped covariance, descending; eigenvectors Q [D, D] as columns), fp64."""
    cov = None
    for x in signals:
        x = x.reshape(-1, x.shape[-1]).double()  # (B T, D)
        cov = x.T @ x if cov is None else cov + x.T @ x
    shift = damp * torch.mean(torch.diag(cov))
    cov.diagonal().add_(shift)
    values, vectors = torch.linalg.eigh(cov)
    order = torch.argsort(values, descending=True)
    return values[order] - shift, vectors[:, order]


def _run(layer: ShortcutDecoderLayer, inputs: list[torch.Tensor], kwargs: list[dict]):
    """(inputs of the MLP norm, outputs) of `layer` on every micro-batch."""
    mids, outs = [], []
    handle = layer.post_attention_layernorm.register_forward_hook(lambda _m, args, _o: mids.append(args[0].detach()))
    try:
        for x, kw in zip(inputs, kwargs):
            out = layer(x, **kw)
            outs.append(first_output(out).detach())
    finally:
        handle.remove()
    return mids, outs


def check_pca_tokens(samples: int, seq_len: int, hidden: int) -> None:
    """The covariance of a D-wide stream needs at least D tokens to have full rank."""
    if samples * seq_len < hidden:
        raise InvalidInput(
            f"slicegpt's PCA needs at least as many calibration tokens as hidden dimensions: {samples} x {seq_len} = "
            f"{samples * seq_len} < {hidden}. Use more samples or longer sequences."
        )


def _variance_kept(values: torch.Tensor, width: int) -> float:
    values = values.clamp(min=0)
    return float(values[:width].sum() / values.sum()) if values.sum() > 0 else 1.0


@torch.no_grad()
def rotate_and_slice(
    model: nn.Module,
    input_ids: torch.Tensor,
    dims: HiddenDims,
    config: SliceGPTConfig,
    *,
    micro_batch: int = 0,
    progress: Progress = None,
    eigenvalues: dict | None = None,
) -> dict:
    """Rotate and slice `model` in place to `dims`; returns the PCA spectra (fraction of variance kept).

    `input_ids: [N, T]`, the calibration batch; N T must be at least D (the covariance needs rank).
    `eigenvalues`, when given, receives each PCA's whole spectrum (descending, undamped):
    `{"embedding": [...], "attention": [[...] per layer], "mlp": [[...] per layer]}`.
    """
    cfg = text_config(model.config)
    n, t = input_ids.shape
    check_pca_tokens(n, t, cfg.hidden_size)
    arch = get_architecture(model)
    model.eval()
    eps = fold_norms(model)
    inputs, layer_kwargs = layer_inputs(model, input_ids, micro_batch or n)  # each layer's own masks and rotary
    record = eigenvalues if eigenvalues is not None else {}
    record.update(embedding=[], attention=[], mlp=[])
    values, q = pca(inputs, config.damp)
    record["embedding"] = values.tolist()
    spectra = {"embedding": _variance_kept(values, dims.embedding), "attention": [], "mlp": []}
    embed = model.get_input_embeddings()
    rotated = (embed.weight.detach().double() @ q)[:, : dims.embedding]
    new_embed = nn.Embedding(embed.num_embeddings, dims.embedding, padding_idx=embed.padding_idx)
    new_embed = new_embed.to(device=embed.weight.device, dtype=embed.weight.dtype)
    new_embed.weight.data.copy_(rotated.to(new_embed.weight.dtype))
    model.set_input_embeddings(new_embed)
    layers = decoder_layers(model)
    for idx, layer in enumerate(layers):
        attn_in, attn_out, mlp_in, mlp_out = dims.layers[idx]
        kwargs = layer_kwargs[idx]
        attn, mlp = getattr(layer, arch.attn), getattr(layer, arch.mlp)
        dtype, dev = layer.attn_shortcut_Q.dtype, layer.attn_shortcut_Q.device
        shortcut = q.T[:attn_in, :]  # (a_in, D): back from the previous basis
        for name in ("q_proj", "k_proj", "v_proj"):
            lin = getattr(attn, getattr(arch, name))
            setattr(attn, getattr(arch, name), _linear((_w(lin) @ q)[:, :attn_in], _b(lin), lin))
        inputs = [(x.double() @ q)[..., :attn_in].to(x.dtype) for x in inputs]
        layer.attn_shortcut_Q = nn.Parameter(shortcut.to(device=dev, dtype=dtype))
        mids, _ = _run(layer, inputs, kwargs)
        values, q = pca(mids, config.damp)
        record["attention"].append(values.tolist())
        spectra["attention"].append(_variance_kept(values, attn_out))
        layer.attn_shortcut_Q = nn.Parameter((shortcut @ q[:, :attn_out]).to(device=dev, dtype=dtype))
        o = getattr(attn, arch.o_proj)
        bias = None if o.bias is None else (q.T @ _b(o))[:attn_out]
        setattr(attn, arch.o_proj, _linear((q.T @ _w(o))[:attn_out, :], bias, o))
        shortcut = q.T[:mlp_in, :]  # (m_in, D)
        for name in ("gate_proj", "up_proj"):
            lin = getattr(mlp, getattr(arch, name))
            setattr(mlp, getattr(arch, name), _linear((_w(lin) @ q)[:, :mlp_in], _b(lin), lin))
        layer.mlp_shortcut_Q = nn.Parameter(shortcut.to(device=dev, dtype=dtype))
        _, outs = _run(layer, inputs, kwargs)
        values, q = pca(outs, config.damp)
        record["mlp"].append(values.tolist())
        spectra["mlp"].append(_variance_kept(values, mlp_out))
        layer.mlp_shortcut_Q = nn.Parameter((shortcut @ q)[:, :mlp_out].to(device=dev, dtype=dtype))
        down = getattr(mlp, arch.down_proj)
        bias = None if down.bias is None else (q.T @ _b(down))[:mlp_out]
        setattr(mlp, arch.down_proj, _linear((q.T @ _w(down))[:mlp_out, :], bias, down))
        inputs = outs
        if progress:
            progress((idx + 1) / len(layers), f"rotated and sliced layer {idx + 1}/{len(layers)} (forward only)")
    head = model.get_output_embeddings()
    model.set_output_embeddings(_linear((_w(head) @ q)[:, : dims.head], None, head))
    model.config.nirvana_sliced_hidden = dims.to_config(eps)
    return spectra
