"""Every bad input of issue 8 gets a typed exception (library) and exit code 2 with one paragraph (CLI).

Two tables, one row per bad input, each row asserting what the message says: what was wrong and
what is accepted. Inputs are built once per module in a tmp dir: broken text files, broken
plans, broken pruned folders, a tiny encoder-only BERT and a GPT-2 (unsupported layout).
docs/RELIABILITY.md lists the same inputs with the messages they produced.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from nirvana.errors import (
    CorruptCheckpoint,
    DatasetNotFound,
    InvalidInput,
    ModelNotFound,
    NirvanaError,
    PlanMismatch,
    UnsupportedArchitecture,
)

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Inputs:
    """Paths of every bad input, plus a good tiny model to feed them to."""

    dir: Path
    tiny: Path  # a good tiny Llama folder with a real tokenizer
    pruned: Path  # a good `prune --out` folder of `tiny`

    def __getattr__(self, name: str) -> Path:  # inputs.binary_txt -> <dir>/binary.txt etc.
        return self.__dict__["dir"] / name.replace("_txt", ".txt").replace("_json", ".json")


def _write_bad_texts(d: Path) -> None:
    (d / "empty.txt").write_text("")
    (d / "whitespace.txt").write_text("  \n\n\t \n")
    (d / "binary.txt").write_bytes(bytes(range(256)) * 8)
    (d / "latin1.txt").write_bytes("café crème brûlée\n".encode("latin-1"))
    (d / "short.txt").write_text("Only a few words of text.\n")
    (d / "badline.jsonl").write_text('{"text": "fine"}\n{not json}\n')
    (d / "folder.txt").mkdir()
    np.save(d / "out_of_vocab.npy", np.full((2, 8), 10**6, dtype=np.int64))  # ids of another tokenizer
    np.save(d / "floats.npy", np.zeros((2, 8)))
    np.save(d / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)  # would need unpickling


def _write_bad_plans(d: Path, good: dict) -> None:
    (d / "notjson.json").write_text("{this is not json")
    (d / "list.json").write_text("[1, 2, 3]")
    (d / "v99.json").write_text(json.dumps({**good, "schema_version": 99}))
    (d / "nolayers.json").write_text(json.dumps({k: v for k, v in good.items() if k != "layers"}))
    unsorted = json.loads(json.dumps(good))
    unsorted["layers"][0]["kept_neurons"] = [5, 3]
    (d / "unsorted.json").write_text(json.dumps(unsorted))
    empty_kv = json.loads(json.dumps(good))
    empty_kv["layers"][1]["kept_kv_groups"] = []
    (d / "nokv.json").write_text(json.dumps(empty_kv))
    (d / "otherfp.json").write_text(json.dumps({**good, "fingerprint": "0123456789abcdef"}))
    (d / "binary_plan.json").write_bytes(b"\xff\xfe\x00\x01" * 64)


def _damage(pruned: Path, d: Path) -> None:
    def copy(name: str) -> Path:
        shutil.copytree(pruned, d / name)
        return d / name / "model"

    copy("p_missing").joinpath("model.safetensors").unlink()
    with open(copy("p_truncated") / "model.safetensors", "r+b") as f:
        f.truncate(1000)
    cfg_path = copy("p_shapes") / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["nirvana_layer_shapes"][0]["intermediate_size"] += 8
    cfg_path.write_text(json.dumps(cfg))
    (copy("p_badconfig") / "config.json").write_text("{broken")
    (copy("p_noconfig") / "config.json").unlink()
    (copy("p_badplan") / "plan.json").write_text("{broken")
    cfg_path = copy("p_noshapes") / "config.json"
    cfg = json.loads(cfg_path.read_text())
    for key in ("nirvana_layer_shapes", "modified_head_num", "modified_intermediate_dimension"):
        cfg.pop(key)
    cfg_path.write_text(json.dumps(cfg))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_with_tokenizer_dir) -> Inputs:
    return build_inputs(tmp_path_factory.mktemp("bad-inputs"), Path(tiny_with_tokenizer_dir))


def build_inputs(d: Path, tiny_dir: Path) -> Inputs:
    """Write every bad input under `d`, from the good tiny model folder `tiny_dir`."""
    import transformers as tf

    from nirvana.checkpoints.loading import load_model
    from nirvana.checkpoints.pruned import save_pruned
    from nirvana.models.shapes import model_shape
    from nirvana.pruning.allocation import Allocation, allocate
    from nirvana.pruning.slicing import apply_plan
    from nirvana.scoring.criteria import compute_scores

    _write_bad_texts(d)
    lm = load_model(str(tiny_dir))
    plan = allocate(compute_scores(lm.model, "magnitude", use_cache=False), model_shape(lm.model), Allocation(0.5))
    pruned = d / "pruned"
    save_pruned(apply_plan(lm.model, plan), lm.tokenizer, plan, pruned / "model")
    plan.save(pruned / "plan.json")
    _write_bad_plans(d, plan.to_dict())
    _damage(pruned, d)
    other = tf.LlamaForCausalLM(tf.LlamaConfig.from_pretrained(tiny_dir))  # same shapes, new weights
    other.save_pretrained(d / "other_tiny")
    lm.tokenizer.save_pretrained(d / "other_tiny")
    bert = tf.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48
    )
    tf.BertModel(bert).save_pretrained(d / "bert")  # encoder-only, no tokenizer: must fail on the architecture
    gpt2 = tf.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    tf.GPT2LMHeadModel(gpt2).save_pretrained(d / "gpt2")  # decoder-only but another layout
    (d / "weights_only").mkdir()
    shutil.copy(tiny_dir / "model.safetensors", d / "weights_only")
    shutil.copy(tiny_dir / "config.json", d / "weights_only")
    return Inputs(d, tiny_dir, pruned)


@pytest.fixture(scope="module")
def tiny(inputs):
    from nirvana.checkpoints.loading import load_model

    return load_model(str(inputs.tiny))


def _scores(tiny, **overrides):
    from nirvana.models.shapes import model_shape
    from nirvana.scoring.scores import Scores

    shape = model_shape(tiny.model)
    L, hkv, inter = shape.num_layers, shape.num_kv_heads[0], shape.intermediate[0]
    gen = torch.Generator().manual_seed(0)
    attn, mlp = torch.rand((L, hkv), generator=gen), torch.rand((L, inter), generator=gen)
    return Scores({"attn": overrides.get("attn", attn), "mlp": overrides.get("mlp", mlp)}, "random", "fp"), shape


def _allocate(**kwargs):
    def run(inputs, tiny):
        from nirvana.pruning.allocation import Allocation, allocate

        scores, shape = _scores(tiny)
        return allocate(scores, shape, Allocation(**{"sparsity": 0.5, **kwargs}))

    return run


def _calibrate(source="pydoc", samples=2, seq_len=8):
    def run(inputs, tiny):
        from nirvana.data.calibration import calibration_batch

        src = str(getattr(inputs, source)) if source.endswith(("_txt", "_jsonl")) else source
        return calibration_batch(tiny.tokenizer, src, samples=samples, seq_len=seq_len)

    return run


def _score_npy(name):
    def run(inputs, tiny):
        from nirvana.data.calibration import load_npy
        from nirvana.scoring.criteria import compute_scores

        return compute_scores(tiny.model, "nirvana", load_npy(inputs.dir / name), use_cache=False)

    return run


def _text(name):
    def run(inputs, tiny):
        from nirvana.data.text import load_text

        return load_text(str(inputs.dir / name) if "." in name else name)

    return run


def _load(path_of):
    def run(inputs, tiny):
        from nirvana.checkpoints.loading import load_model

        return load_model(path_of(inputs))

    return run


def _plan(name):
    def run(inputs, tiny):
        from nirvana.pruning.plan import PruningPlan

        return PruningPlan.load(inputs.dir / name)

    return run


def _apply_other_plan(inputs, tiny):
    from nirvana.pruning.plan import PruningPlan
    from nirvana.pruning.slicing import apply_plan

    return apply_plan(tiny.model, PruningPlan.load(inputs.dir / "otherfp.json"))


def _scores_of_another_shape(inputs, tiny):
    from nirvana.pruning.allocation import Allocation, allocate

    scores, shape = _scores(tiny, mlp=torch.rand(2, 40))
    return allocate(scores, shape, Allocation(0.5))


def _baseline_scores_of_another_shape(inputs, tiny):
    """A baseline's own allocator (LLM-Pruner's) is guarded by the same check as `allocate`."""
    import dataclasses

    from nirvana.methods import get_method, method_config

    scores, shape = _scores(tiny, attn=torch.rand(3, 1))
    scores = dataclasses.replace(scores, criterion="llm-pruner")
    return get_method("llm-pruner").allocate(scores, shape, 0.5, method_config("llm-pruner", {}))


ACCEPTS_SPARSITY = "sparsity must be a number in [0, 0.95]"
ACCEPTS_GAMMA = "gamma must be a positive number"
ACCEPTS_ALIGN = "align must be a power of two between 1 and the MLP width"  # the width once the model is known
ALIGN_BOUND = f"{ACCEPTS_ALIGN} (48)"
ACCEPTS_N = "samples N must be an integer in [1, 4096]"
ACCEPTS_T = "seq_len T must be an integer in [1, 8192]"

# id -> (call, exception type, substrings the message must contain)
LIBRARY_CASES = {
    "sparsity-above-0.95": (_allocate(sparsity=0.96), InvalidInput, [ACCEPTS_SPARSITY, "got 0.96"]),
    "sparsity-1.5": (_allocate(sparsity=1.5), InvalidInput, [ACCEPTS_SPARSITY, "got 1.5"]),
    "sparsity-negative": (_allocate(sparsity=-0.1), InvalidInput, [ACCEPTS_SPARSITY, "got -0.1"]),
    "sparsity-nan": (_allocate(sparsity=math.nan), InvalidInput, [ACCEPTS_SPARSITY, "got nan"]),
    "sparsity-string": (_allocate(sparsity="0.5"), InvalidInput, [ACCEPTS_SPARSITY, "got '0.5'"]),
    "gamma-zero": (_allocate(gamma=0.0), InvalidInput, [ACCEPTS_GAMMA, "got 0.0", "analytic default"]),
    "gamma-negative": (_allocate(gamma=-2.0), InvalidInput, [ACCEPTS_GAMMA, "got -2.0"]),
    "gamma-nan": (_allocate(gamma=math.nan), InvalidInput, [ACCEPTS_GAMMA, "got nan"]),
    "gamma-inf": (_allocate(gamma=math.inf), InvalidInput, [ACCEPTS_GAMMA, "got inf"]),
    "align-not-power-of-two": (_allocate(align=3), InvalidInput, [ACCEPTS_ALIGN, "got 3", "1 (off), 8, 16"]),
    "align-zero": (_allocate(align=0), InvalidInput, [ACCEPTS_ALIGN, "got 0"]),
    "align-larger-than-layer": (_allocate(align=64), InvalidInput, [ALIGN_BOUND, "got 64"]),
    "align-float": (_allocate(align=8.0), InvalidInput, [ACCEPTS_ALIGN, "got 8.0"]),
    "allocation-unknown": (_allocate(kind="local"), InvalidInput, ["global, uniform", "got 'local'"]),
    "scores-of-another-model": (_scores_of_another_shape, InvalidInput, ["computed for another model"]),
    "baseline-scores-of-another-model": (
        _baseline_scores_of_another_shape,
        InvalidInput,
        ["shapes attn (3, 1)", "computed for another model"],
    ),
    "N-zero": (_calibrate(samples=0), InvalidInput, [ACCEPTS_N, "got 0"]),
    "N-too-large": (_calibrate(samples=5000), InvalidInput, [ACCEPTS_N, "got 5000"]),
    "N-not-an-integer": (_calibrate(samples=2.5), InvalidInput, [ACCEPTS_N, "got 2.5"]),
    "T-zero": (_calibrate(seq_len=0), InvalidInput, [ACCEPTS_T, "got 0"]),
    "T-too-large": (_calibrate(seq_len=100_000), InvalidInput, [ACCEPTS_T, "got 100000"]),
    "T-longer-than-the-text": (
        _calibrate("short_txt", samples=1, seq_len=64),
        InvalidInput,
        ["has no document of at least 64 tokens", "smaller seq_len T or a larger text"],
    ),
    "N-x-T-more-tokens-than-the-text": (
        _calibrate("short_txt", samples=64, seq_len=4),
        InvalidInput,
        ["asked for N x T = 64 x 4 = 256 tokens", "has only", "fewer samples N"],
    ),
    "npy-token-ids-out-of-vocabulary": (
        _score_npy("out_of_vocab.npy"),
        InvalidInput,
        ["holds token ids in [1000000, 1000000]", "vocabulary has 49152 ids", "another model"],
    ),
    "npy-floats": (_score_npy("floats.npy"), InvalidInput, ["must hold a non-empty integer array [N, T]", "float64"]),
    "npy-pickled-objects": (_score_npy("objects.npy"), InvalidInput, ["is not a plain .npy array", "allow_pickle"]),
    "dataset-unknown": (_text("nosuchdata"), DatasetNotFound, ["unknown dataset 'nosuchdata'", "wikitext2", ".txt"]),
    "file-missing": (_text("missing.txt"), DatasetNotFound, ["does not exist", "pass an existing .txt or .jsonl"]),
    "file-is-a-directory": (_text("folder.txt"), DatasetNotFound, ["is a directory", "pass a .txt or .jsonl file"]),
    "file-binary": (_text("binary.txt"), DatasetNotFound, ["looks binary", "pass UTF-8 text"]),
    "file-not-utf8": (_text("latin1.txt"), DatasetNotFound, ["is not UTF-8 text"]),
    "file-empty": (_text("empty.txt"), DatasetNotFound, ["holds no text", "empty or only whitespace"]),
    "file-whitespace-only": (_text("whitespace.txt"), DatasetNotFound, ["holds no text"]),
    "jsonl-bad-line": (_text("badline.jsonl"), DatasetNotFound, ["line 2 is not JSON"]),
    "model-hub-id-offline": (
        _load(lambda i: "no-such-org/no-such-model"),
        ModelNotFound,
        ["could not load 'no-such-org/no-such-model'", "hub is not reachable", "Accepted: a registry name"],
    ),
    "model-path-missing": (
        _load(lambda i: str(i.dir / "nowhere")),
        ModelNotFound,
        ["does not exist", "Accepted: a registry name"],
    ),
    "model-path-is-a-file": (_load(lambda i: str(i.short_txt)), ModelNotFound, ["is not a model directory"]),
    "model-without-tokenizer": (
        _load(lambda i: str(i.weights_only)),
        ModelNotFound,
        ["no usable tokenizer", "tokenizer.json"],
    ),
    "model-encoder-only-bert": (
        _load(lambda i: str(i.bert)),
        UnsupportedArchitecture,
        ["model_type 'bert' is not supported", "not a decoder-only LM", "Supported: gemma", "llama"],
    ),
    "model-unsupported-gpt2": (
        _load(lambda i: str(i.gpt2)),
        UnsupportedArchitecture,
        ["model_type 'gpt2' is not supported", "add a row to nirvana.models.architectures.ARCHITECTURES"],
    ),
    "plan-not-json": (_plan("notjson.json"), PlanMismatch, ["plan is not valid JSON"]),
    "plan-not-an-object": (_plan("list.json"), PlanMismatch, ["must be a JSON object"]),
    "plan-binary": (_plan("binary_plan.json"), PlanMismatch, ["is not text"]),
    "plan-schema-99": (_plan("v99.json"), PlanMismatch, ["schema_version 99 is not supported", "reads 1"]),
    "plan-missing-layers": (_plan("nolayers.json"), PlanMismatch, ["plan is missing layers"]),
    "plan-unsorted-indices": (_plan("unsorted.json"), PlanMismatch, ["must be sorted, unique and in [0, 48)"]),
    "plan-layer-without-kv": (_plan("nokv.json"), PlanMismatch, ["layer 1 keeps no KV group"]),
    "plan-file-missing": (_plan("nofile.json"), PlanMismatch, ["cannot read plan", "No such file"]),
    "plan-for-another-model": (
        _apply_other_plan,
        PlanMismatch,
        ["made for model fingerprint 0123456789abcdef", "recompute it for this model"],
    ),
    "pruned-safetensors-deleted": (
        _load(lambda i: str(i.dir / "p_missing")),
        CorruptCheckpoint,
        ["has no model.safetensors"],
    ),
    "pruned-safetensors-truncated": (
        _load(lambda i: str(i.dir / "p_truncated")),
        CorruptCheckpoint,
        ["unreadable or truncated", "re-save the model"],
    ),
    "pruned-config-shapes-edited": (
        _load(lambda i: str(i.dir / "p_shapes")),
        CorruptCheckpoint,
        [
            "do not match the shapes in its config.json",
            "size mismatch for model.layers.0.mlp.gate_proj.weight",
            "re-save",
        ],
    ),
    "pruned-config-not-json": (_load(lambda i: str(i.dir / "p_badconfig")), CorruptCheckpoint, ["is unreadable"]),
    "pruned-config-missing": (
        _load(lambda i: str(i.dir / "p_noconfig")),
        CorruptCheckpoint,
        ["has no config.json", "nirvana prune --out"],
    ),
    "pruned-config-without-shapes": (
        _load(lambda i: str(i.dir / "p_noshapes")),
        CorruptCheckpoint,
        ["has no per-layer shapes", "not a pruned checkpoint"],
    ),
    "pruned-plan-damaged": (_load(lambda i: str(i.dir / "p_badplan")), CorruptCheckpoint, ["plan.json' is damaged"]),
}


@pytest.mark.parametrize("case", list(LIBRARY_CASES), ids=list(LIBRARY_CASES))
def test_library_raises_a_typed_error_that_says_what_is_wrong(case, inputs, tiny):
    call, error, fragments = LIBRARY_CASES[case]
    with pytest.raises(error) as info:
        call(inputs, tiny)
    assert isinstance(info.value, NirvanaError)
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in {str(info.value)!r}"


def _prune(*extra):
    return lambda i: (
        ["prune", "--model", str(i.tiny), "--samples", "2", "--seq-len", "8", "--out", str(i.dir / "o")]
        + [str(x).format(d=i.dir) for x in extra]
    )


def _eval_tasks(*extra):
    return lambda i: ["eval", "--model", str(i.tiny), *extra]


def _info(target):
    return lambda i: ["info", "--model", str(target).format(d=i.dir, tiny=i.tiny)]


# id -> (argv, error type printed, substrings of the message). The argv is built from the inputs' paths.
CLI_CASES = {
    "accuracy-task-unknown": (
        _eval_tasks("--tasks", "arc_eazy"),
        "InvalidInput",
        ["unknown accuracy task", "zeroshot7", "bpb [gold bits per byte", "lower is better"],
    ),
    "accuracy-limit-zero": (_eval_tasks("--tasks", "piqa", "--limit", "0"), "InvalidInput", ["--limit", "got 0"]),
    "accuracy-limit-negative": (_eval_tasks("--tasks", "piqa", "--limit", "-5"), "InvalidInput", ["got -5"]),
    "accuracy-limit-not-a-number": (_eval_tasks("--tasks", "piqa", "--limit", "many"), "InvalidInput", ["'many'"]),
    "accuracy-mbpp-without-opt-in": (
        _eval_tasks("--tasks", "mbpp"),
        "InvalidInput",
        ["--allow-code-execution", "HF_ALLOW_CODE_EVAL=1", "bubblewrap sandbox"],
    ),
    "accuracy-bpb-of-a-task-without-gold-answers": (
        _eval_tasks("--tasks", "piqa_bpb"),
        "InvalidInput",
        ["gold answers only for mbpp_bpb, humaneval_bpb, gsm8k_bpb", "ask for 'piqa'"],
    ),
    "accuracy-bpb-from-the-hub": (
        _eval_tasks("--tasks", "mbpp_bpb", "--source", "hub"),
        "InvalidInput",
        ["only in the local files", "--source local or auto"],
    ),
    "accuracy-bpb-limit-zero": (
        _eval_tasks("--tasks", "mbpp_bpb,gsm8k_bpb", "--limit", "0"),
        "InvalidInput",
        ["--limit", "got 0"],
    ),
    "accuracy-source-unknown": (
        _eval_tasks("--tasks", "piqa", "--source", "usb"),
        "InvalidInput",
        ["auto, local, hub"],
    ),
    "sparsity-above-0.95": (_prune("--sparsity", "0.96"), "InvalidInput", [ACCEPTS_SPARSITY, "got 0.96"]),
    "sparsity-negative": (_prune("--sparsity", "-0.1"), "InvalidInput", [ACCEPTS_SPARSITY, "got -0.1"]),
    "sparsity-nan": (_prune("--sparsity", "nan"), "InvalidInput", [ACCEPTS_SPARSITY, "got nan"]),
    "sparsity-not-a-number": (_prune("--sparsity", "half"), "argparse", ["argument --sparsity: invalid float"]),
    "gamma-zero": (_prune("--sparsity", "0.5", "--gamma", "0"), "InvalidInput", [ACCEPTS_GAMMA, "got 0.0"]),
    "gamma-negative": (_prune("--sparsity", "0.5", "--gamma", "-1"), "InvalidInput", [ACCEPTS_GAMMA, "got -1.0"]),
    "align-not-power-of-two": (_prune("--sparsity", "0.5", "--align", "3"), "InvalidInput", [ACCEPTS_ALIGN, "got 3"]),
    "align-larger-than-layer": (
        _prune("--sparsity", "0.5", "--align", "64"),
        "InvalidInput",
        [ALIGN_BOUND, "got 64"],
    ),
    "N-zero": (_prune("--sparsity", "0.5", "--samples", "0"), "InvalidInput", [ACCEPTS_N, "got 0"]),
    "T-too-large": (_prune("--sparsity", "0.5", "--seq-len", "9000"), "InvalidInput", [ACCEPTS_T, "got 9000"]),
    "T-longer-than-the-text": (
        _prune("--sparsity", "0.5", "--calib", "{d}/short.txt", "--seq-len", "64"),
        "InvalidInput",
        ["has no document of at least 64 tokens"],
    ),
    "N-x-T-more-tokens-than-the-text": (
        _prune("--sparsity", "0.5", "--calib", "{d}/short.txt", "--samples", "64", "--seq-len", "4"),
        "InvalidInput",
        ["asked for N x T = 64 x 4 = 256 tokens"],
    ),
    "npy-token-ids-out-of-vocabulary": (
        _prune("--sparsity", "0.5", "--calib", "{d}/out_of_vocab.npy"),
        "InvalidInput",
        ["holds token ids in [1000000, 1000000]", "tokenized for another model"],
    ),
    "dataset-unknown": (
        _prune("--sparsity", "0.5", "--calib", "nosuchdata"),
        "DatasetNotFound",
        ["unknown dataset 'nosuchdata'", "wikitext2-valid"],
    ),
    "file-missing": (_prune("--sparsity", "0.5", "--calib", "{d}/missing.txt"), "DatasetNotFound", ["does not exist"]),
    "file-binary": (_prune("--sparsity", "0.5", "--calib", "{d}/binary.txt"), "DatasetNotFound", ["looks binary"]),
    "file-empty": (_prune("--sparsity", "0.5", "--calib", "{d}/empty.txt"), "DatasetNotFound", ["holds no text"]),
    "criterion-unknown": (
        _prune("--sparsity", "0.5", "--criterion", "bogus"),
        "InvalidInput",
        ["unknown criterion 'bogus'", "nirvana, taylor"],
    ),
    "model-hub-id-offline": (_info("no-such-org/no-such-model"), "ModelNotFound", ["hub is not reachable"]),
    "model-path-missing": (_info("{d}/nowhere"), "ModelNotFound", ["does not exist"]),
    "model-encoder-only-bert": (_info("{d}/bert"), "UnsupportedArchitecture", ["not a decoder-only LM"]),
    "model-unsupported-gpt2": (_info("{d}/gpt2"), "UnsupportedArchitecture", ["model_type 'gpt2' is not supported"]),
    "dtype-unknown": (lambda i: ["info", "--model", str(i.tiny), "--dtype", "int3"], "InvalidInput", ["float32"]),
    "device-unknown": (lambda i: ["info", "--model", str(i.tiny), "--device", "tpu"], "InvalidInput", ["cuda:N"]),
    "plan-not-json": (_prune("--sparsity", "0.5", "--plan", "{d}/notjson.json"), "PlanMismatch", ["not valid JSON"]),
    "plan-schema-99": (
        _prune("--sparsity", "0.5", "--plan", "{d}/v99.json"),
        "PlanMismatch",
        ["schema_version 99 is not supported"],
    ),
    "plan-for-another-model": (
        _prune("--sparsity", "0.5", "--plan", "{d}/pruned/plan.json", "--model", "{d}/other_tiny"),
        "PlanMismatch",
        ["this plan was made for model fingerprint", "recompute it for this model"],
    ),
    "scores-for-another-model": (
        _prune("--sparsity", "0.5", "--scores", "{d}/other_scores", "--model", "{d}/other_tiny"),
        "PlanMismatch",
        ["holds scores of model fingerprint", "score this model"],
    ),
    "out-is-a-file": (
        lambda i: ["prune", "--model", str(i.tiny), "--sparsity", "0.5", "--out", str(i.short_txt)],
        "InvalidInput",
        ["is a file; pass a folder"],
    ),
    "generate-max-new-tokens-negative": (
        lambda i: ["generate", "--model", str(i.tiny), "--max-new-tokens", "-1"],
        "InvalidInput",
        ["--max-new-tokens must be an integer in [1, 4096], got -1"],
    ),
    "generate-empty-prompt": (
        lambda i: ["generate", "--model", str(i.tiny), "--prompt", "  "],
        "InvalidInput",
        ["--prompt is empty"],
    ),
    "pruned-safetensors-deleted": (_info("{d}/p_missing"), "CorruptCheckpoint", ["has no model.safetensors"]),
    "pruned-safetensors-truncated": (_info("{d}/p_truncated"), "CorruptCheckpoint", ["unreadable or truncated"]),
    "pruned-config-shapes-edited": (
        _info("{d}/p_shapes"),
        "CorruptCheckpoint",
        ["do not match the shapes in its config.json"],
    ),
    "pruned-plan-damaged": (_info("{d}/p_badplan"), "CorruptCheckpoint", ["plan.json' is damaged"]),
}


PROGRESS = re.compile(r"^\[\s*\d+%\] |^(Loading weights|Writing model shards)")  # ours and transformers' bars


def run_cli(argv: list[str]) -> tuple[int, str]:
    """`nirvana.cli.main(argv)` in-process: (exit code, stderr without progress lines)."""
    from nirvana.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse rejects the argument before our code runs
            code = exc.code
    lines = [line for line in err.getvalue().splitlines() if not PROGRESS.match(line)]
    return code, "\n".join(lines)


@pytest.fixture(scope="module")
def other_scores(inputs):
    """Scores of the tiny model, to be offered to a different model (`--scores`)."""
    from nirvana.checkpoints.loading import load_model
    from nirvana.scoring.criteria import compute_scores

    compute_scores(load_model(str(inputs.tiny)).model, "magnitude", use_cache=False).save(inputs.dir / "other_scores")


@pytest.mark.parametrize("case", list(CLI_CASES), ids=list(CLI_CASES))
def test_cli_exits_2_with_one_paragraph_that_says_what_is_wrong(case, inputs, other_scores):
    build, error, fragments = CLI_CASES[case]
    code, err = run_cli(build(inputs))
    assert code == 2, err
    assert "Traceback" not in err
    if error == "argparse":
        assert "usage:" in err
    else:
        message = err[err.index("error: ") :]
        assert "\n\n" not in message.strip()  # one paragraph
        message = " ".join(message.split())  # undo the wrapping at 100 columns
        assert message.startswith(f"error: {error}: ")
        for fragment in fragments:
            assert fragment in message, f"{fragment!r} not in {message!r}"
    assert not (inputs.dir / "o" / "report.json").exists()


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (lambda i: ["prune", "--model", str(i.tiny), "--sparsity", "1.5", "--out", str(i.dir / "o")], ACCEPTS_SPARSITY),
        (lambda i: ["info", "--model", str(i.dir / "p_truncated")], "unreadable or truncated"),
    ],
    ids=["sparsity-1.5", "pruned-truncated"],
)
def test_cli_in_a_real_process_exits_2_without_a_traceback(argv, fragment, inputs):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("NIRVANA_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "nirvana", *argv(inputs)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert fragment in " ".join(proc.stderr.split())
