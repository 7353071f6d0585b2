"""`python -m nirvana serve` without vLLM: which class serves which folder, the command it runs, the refusals,
and the plugin's reading of per-layer widths (vllm_plugin/nirvana_vllm imports only torch and vllm; its widths
module imports neither and is checked here against the modeling file's)."""

from __future__ import annotations

import ast
import json
import shlex
import sys
from pathlib import Path

import pytest
from transformers import LlamaConfig

from nirvana.cli import main
from nirvana.errors import InvalidInput, UnsupportedArchitecture
from nirvana.export.serve import SERVE_ARCHITECTURES, server_command, serving_architecture
from nirvana.models.modeling_nirvana import layer_widths as modeling_widths

PLUGIN = Path(__file__).resolve().parents[1] / "vllm_plugin" / "nirvana_vllm"
sys.path.insert(0, str(PLUGIN.parent))
from nirvana_vllm import widths  # noqa: E402  (the plugin's own module, importable without vLLM)

SHAPES = [{"num_key_value_heads": 3, "intermediate_size": 1536}, {"num_key_value_heads": 1, "intermediate_size": 264}]
PRUNED_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 576,
                "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536,
                "num_hidden_layers": 2, "nirvana_layer_shapes": SHAPES}  # fmt: skip


def _folder(tmp_path: Path, config: dict, name: str = "model") -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_the_plugin_registers_the_classes_the_library_asks_for():
    tree = ast.parse((PLUGIN / "__init__.py").read_text())
    tables = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    assert tables["ARCHITECTURES"] == SERVE_ARCHITECTURES
    assert set(SERVE_ARCHITECTURES.values()) == set(tables["CLASSES"])


def test_a_pruned_llama_is_served_by_the_plugins_class_with_its_folder_unchanged(tmp_path):
    out = _folder(tmp_path / "p50", PRUNED_LLAMA)
    before = (out / "config.json").read_bytes()
    command = server_command(tmp_path / "p50", port=8123, python="/venv/bin/python")  # the prune --out folder
    assert command.folder == str(out) and command.architecture == "NirvanaLlamaForCausalLM"
    argv = command.argv
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--model") + 1] == str(out) and argv[argv.index("--port") + 1] == "8123"
    assert json.loads(argv[argv.index("--hf-overrides") + 1]) == {"architectures": ["NirvanaLlamaForCausalLM"]}
    assert "--enforce-eager" in argv and command.env["VLLM_TARGET_DEVICE"] == "cpu"
    assert shlex.split(command.shell())[len(command.env) :] == argv  # the printed line runs the same command
    assert (out / "config.json").read_bytes() == before


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"model_type": "qwen2"}, "NirvanaQwen2ForCausalLM"),  # vLLM's Qwen2 ignores head_dim: always ours
        ({"model_type": "mistral", "nirvana_output_biases": ["o_proj", "down_proj"]}, "NirvanaMistralForCausalLM"),
        ({"model_type": "gemma3_text", "nirvana_layer_shapes": SHAPES}, "NirvanaGemma3ForCausalLM"),
        ({"model_type": "phi3"}, None),  # a dense model of another family: vLLM's own class
    ],
)
def test_each_family_gets_its_class(config, expected):
    assert serving_architecture(config) == expected


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"model_type": "llama", "nirvana_sliced_hidden": {"embedding": 448}}, ["SliceGPT", "rotated"]),
        ({"model_type": "t5", "is_encoder_decoder": True}, ["decoder-only", "T5"]),
        ({"model_type": "gemma3_text", "nirvana_output_biases": ["o_proj"]}, ["Gemma-3", "bias=false"]),
        ({"model_type": "phi3", "nirvana_layer_shapes": SHAPES}, ["no vLLM class", "served: gemma3_text, llama"]),
    ],
)
def test_what_vllm_cannot_hold_is_refused_with_the_reason(config, words):
    with pytest.raises(UnsupportedArchitecture) as info:
        serving_architecture(config)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_bad_settings_and_a_missing_environment_say_what_to_do(tmp_path, monkeypatch):
    folder = _folder(tmp_path, PRUNED_LLAMA)
    for kwargs, words in (({"port": 0}, "port must be"), ({"dtype": "fp8"}, "dtype must be one of")):
        with pytest.raises(InvalidInput, match=words):
            server_command(folder, python="p", **kwargs)
    with pytest.raises(InvalidInput, match="has no config"):
        server_command(tmp_path / "nowhere", python="p")
    monkeypatch.setenv("NIRVANA_SERVE_PYTHON", str(tmp_path / "no-python"))
    with pytest.raises(InvalidInput, match="make serve-env"):
        server_command(folder)


def test_the_cli_prints_the_command_and_refuses_without_a_traceback(tmp_path, capsys):
    folder = _folder(tmp_path, PRUNED_LLAMA)
    assert main(["serve", "--model", str(folder), "--port", "8124", "--print-command"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["architecture"] == "NirvanaLlamaForCausalLM" and "--port 8124" in printed["command"]
    sliced = _folder(tmp_path, {"model_type": "llama", "nirvana_sliced_hidden": {"embedding": 8}}, "sliced")
    assert main(["serve", "--model", str(sliced), "--print-command"]) == 2
    err = capsys.readouterr().err
    assert "SliceGPT" in err and "Traceback" not in err


def test_the_plugin_reads_each_layers_widths_as_the_modeling_file_does():
    config = LlamaConfig(**{k: v for k, v in PRUNED_LLAMA.items() if k not in ("model_type", "architectures")})
    assert widths.layer_widths(config) == modeling_widths(config) == [(3, 1536), (1, 264)]
    first, second = widths.layer_config(config, 0), widths.layer_config(config, widths.layer_index("model.layers.1"))
    assert (second.num_key_value_heads, second.num_attention_heads, second.intermediate_size) == (1, 3, 264)
    assert first.head_dim == second.head_dim == 64  # 576 / 9: pinned, since 576 / 3 query heads is not
    assert config.num_attention_heads == 9  # the copy, not the model's config, has the layer's widths
    reference = LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=32,
                            num_hidden_layers=2)  # fmt: skip
    reference.modified_head_num, reference.modified_intermediate_dimension = [4, 2], [32, 8]
    assert widths.layer_widths(reference) == modeling_widths(reference) == [(2, 32), (1, 8)]
    dense = LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=32,
                        num_hidden_layers=3)  # fmt: skip
    assert widths.layer_widths(dense) == [(2, 32)] * 3
