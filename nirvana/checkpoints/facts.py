"""What a loaded model is, as the CLI's `info` prints it and the app's Model page shows it."""

from __future__ import annotations

from nirvana.checkpoints.loaded import LoadedModel
from nirvana.models.architectures import get_architecture
from nirvana.models.family import family_name
from nirvana.models.shapes import count_block_parameters, model_shape
from nirvana.pruning.allocation import default_gamma
from nirvana.t5.checkpoint import describe_t5


def describe(lm: LoadedModel) -> dict:
    """The facts `info` prints and the app's Model page shows, by the model's family (`DESCRIBE`)."""
    return DESCRIBE[family_name(lm.model)](lm)


def describe_decoder(lm: LoadedModel) -> dict:
    """A decoder-only model's facts: its shape, units, gamma*."""
    shape = model_shape(lm.model)
    return {
        "model": lm.name,
        "source": lm.source,
        "model_type": shape.model_type,
        "layers": shape.num_layers,
        "hidden_size": shape.hidden_size,
        "query_heads": list(sorted(set(shape.num_heads))) if not shape.is_uniform else shape.num_heads[0],
        "kv_heads": list(sorted(set(shape.num_kv_heads))) if not shape.is_uniform else shape.num_kv_heads[0],
        "group_size": shape.group_size,
        "head_dim": shape.head_dim,
        "intermediate_size": shape.intermediate[0] if shape.is_uniform else list(shape.intermediate),
        "vocab_size": shape.vocab_size,
        "tied_embeddings": shape.tied_embeddings,
        "parameters": shape.total_params,
        "block_parameters": count_block_parameters(lm.model),
        "prunable_units": {"kv_groups": sum(shape.num_kv_heads), "mlp_neurons": sum(shape.intermediate)},
        "default_gamma": round(default_gamma(shape), 4) if shape.is_uniform else None,
        "pruned": not shape.is_uniform or lm.plan is not None,
        "dtype": str(next(lm.model.parameters()).dtype).replace("torch.", ""),
        "device": str(next(lm.model.parameters()).device),  # "meta" when accelerate offloaded the weights
        "adapter_tested_on": get_architecture(lm.model).tested,
        "model_load_seconds": round(lm.load_seconds, 3),
        "import_seconds": round(lm.import_seconds, 3),  # one-time Python imports, not part of the load
    }


DESCRIBE = {"decoder-only": describe_decoder, "t5": describe_t5}
