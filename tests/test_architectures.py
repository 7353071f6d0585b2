"""The adapter table: every supported family resolves; unsupported ones get a useful error."""

from __future__ import annotations

import pytest
import torch

from nirvana.errors import UnsupportedArchitecture
from nirvana.models.architectures import ARCHITECTURES, get_architecture, layer_projections, supported_model_types
from nirvana.models.shapes import head_dim_of, model_shape
from tests.tiny import TINY_FAMILIES, tiny_config, tiny_model


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_every_tiny_family_has_an_adapter_and_a_consistent_shape(family):
    model = tiny_model(family)
    shape = model_shape(model)
    assert shape.num_layers == 2 and shape.group_size == 2 and shape.num_kv_heads == (2, 2)
    assert shape.head_dim == head_dim_of(model.config)
    projections = layer_projections(model)
    assert projections[0].q_proj.out_features == 4 * shape.head_dim
    assert family in ARCHITECTURES


def test_gemma3_head_dim_is_read_from_the_config():
    config = tiny_config("gemma3_text")
    assert head_dim_of(config) == 16 != config.hidden_size // config.num_attention_heads


def test_unsupported_architecture_names_what_is_supported():
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37))
    with pytest.raises(UnsupportedArchitecture) as info:
        get_architecture(model)
    message = str(info.value)
    assert "'bert'" in message and "not a decoder-only" in message
    for name in supported_model_types():
        assert name in message
    del model
    torch.cuda.empty_cache()
