"""GGUF export: per-layer widths under llama.cpp's `deci` architecture, weights exact, bad inputs refused.

The llama.cpp run itself needs llama-cpp-python (built from source; not a project dependency),
so that one test is skipped where it is not installed.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from conftest import random_batch

from nirvana.checkpoints.pruned import save_pruned
from nirvana.errors import InvalidInput, UnsupportedArchitecture
from nirvana.export.gguf import unpermute, write_gguf
from nirvana.models.shapes import model_shape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.slicing import apply_plan
from nirvana.scoring.criteria import compute_scores
from tests.tiny import tiny_model


def pruned_folder(tmp_path, tokenizer, family="llama", base_model="smollm2-135m"):
    model = tiny_model(family, attn_implementation="sdpa", vocab_size=len(tokenizer))
    plan = allocate(
        compute_scores(model, "nirvana", random_batch(vocab=100), use_cache=False), model_shape(model), Allocation(0.5)
    )
    pruned = apply_plan(model, plan)
    return save_pruned(pruned, tokenizer, plan, tmp_path / family, base_model=base_model), pruned, plan


def fields(reader: gguf.GGUFReader) -> dict:
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.ggml.")}


def test_gguf_holds_the_per_layer_widths_and_the_exact_weights(tmp_path, smollm2):
    folder, pruned, plan = pruned_folder(tmp_path, smollm2.tokenizer)
    out = write_gguf(folder, tmp_path / "m.gguf")  # the tokenizer comes from the embedded SmolLM2 GGUF
    reader = gguf.GGUFReader(str(out))
    meta = fields(reader)
    assert meta["general.architecture"] == "deci"
    assert meta["deci.attention.head_count_kv"] == plan.kept_kv_groups
    assert meta["deci.attention.head_count"] == [k * 2 for k in plan.kept_kv_groups]  # g = 2 in the tiny config
    assert meta["deci.feed_forward_length"] == plan.kept_neurons
    assert meta["deci.attention.key_length"] == 8 and meta["deci.rope.dimension_count"] == 8
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == len(smollm2.tokenizer)
    tensors = {t.name: np.asarray(t.data) for t in reader.tensors}
    state = {k: v.detach().numpy() for k, v in pruned.state_dict().items()}
    for i, heads in enumerate(meta["deci.attention.head_count"]):
        q = tensors[f"blk.{i}.attn_q.weight"].reshape(state[f"model.layers.{i}.self_attn.q_proj.weight"].shape)
        assert np.array_equal(unpermute(q, heads), state[f"model.layers.{i}.self_attn.q_proj.weight"])
        down = tensors[f"blk.{i}.ffn_down.weight"]
        assert np.array_equal(down.reshape(down.shape), state[f"model.layers.{i}.mlp.down_proj.weight"])
    assert np.array_equal(tensors["token_embd.weight"], state["model.embed_tokens.weight"])


def test_gguf_export_refuses_what_it_cannot_write(tmp_path, smollm2):
    qwen, _, _ = pruned_folder(tmp_path, smollm2.tokenizer, family="qwen2")
    with pytest.raises(UnsupportedArchitecture, match="Llama-family models only"):
        write_gguf(qwen, tmp_path / "q.gguf")
    llama, _, _ = pruned_folder(tmp_path, smollm2.tokenizer, base_model="/nowhere/known")
    (llama / "README.md").unlink()  # no card, no known base: no tokenizer to copy
    with pytest.raises(InvalidInput, match="needs the base model's tokenizer"):
        write_gguf(llama, tmp_path / "l.gguf")
    other = tmp_path / "other.gguf"
    writer = gguf.GGUFWriter(str(other), "llama")
    writer.add_token_list(["a", "b"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(InvalidInput, match="holds a tokenizer of 2 tokens"):
        write_gguf(llama, tmp_path / "l.gguf", tokenizer_gguf=other)
    with pytest.raises(InvalidInput, match="not a GGUF export type"):
        write_gguf(llama, tmp_path / "l.gguf", tokenizer_gguf=other, dtype="q4_0")


def test_llama_cpp_runs_the_export_with_the_same_logits_and_tokens(tmp_path, smollm2):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (optional)")
    folder, pruned, _ = pruned_folder(tmp_path, smollm2.tokenizer)
    out = write_gguf(folder, tmp_path / "m.gguf")
    ids = random_batch(vocab=100, n=1, t=12, seed=4).input_ids[0].tolist()
    with torch.no_grad():
        ref = pruned(torch.tensor([ids])).logits[0].numpy()
        greedy = pruned.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, pad_token_id=0)
    llm = llama_cpp.Llama(model_path=str(out), n_ctx=64, logits_all=True, verbose=False, n_threads=1)
    llm.eval(ids)
    np.testing.assert_allclose(np.array(llm.scores[: len(ids)]), ref, atol=1e-3)
    llm.reset()
    tokens = []
    for token in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, repeat_penalty=1.0):
        tokens.append(token)
        if len(tokens) == 8:
            break
    assert tokens == greedy[0, len(ids) :].tolist()
