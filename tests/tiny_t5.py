"""Tiny random T5 models and a T5-style tokenizer, built offline (no T5 weights exist on this machine).

    model = tiny_t5("gated-gelu")                # two encoder and three decoder blocks, random weights
    folder = write_tiny_t5(tmp_path / "t5")       # a from_pretrained folder: config, safetensors, tokenizer

The tokenizer is a byte-level BPE trained on the Python documentation CPython ships (the same
embedded text the calibration falls back to), with T5's special tokens: `<pad>` = 0 (also the
decoder start token), `</s>` = 1 appended to every encoded text, `<unk>` = 2. The CLI's acceptance
run of issue 26 prunes the folder `python -m tests.tiny_t5 DIR` writes.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

VOCAB = 384  # the tokenizer's size, and so the model's vocab_size
SPECIALS = ("<pad>", "</s>", "<unk>")


def tiny_t5(
    ff: str = "gated-gelu",
    seed: int = 0,
    decoder_layers: int = 3,
    heads: int = 4,
    d_ff: int = 24,
    vocab_size: int = 64,
    d_model: int = 32,
    encoder_layers: int = 2,
) -> T5ForConditionalGeneration:
    """Two encoder and three decoder blocks by default (so a stack mix-up shows), `heads` heads of 8, `d_ff` neurons."""
    config = T5Config(
        vocab_size=vocab_size, d_model=d_model, d_kv=8, d_ff=d_ff, num_layers=encoder_layers,
        num_decoder_layers=decoder_layers, num_heads=heads, feed_forward_proj=ff, relative_attention_num_buckets=8,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, dropout_rate=0.0, tie_word_embeddings=ff == "relu",
    )  # fmt: skip
    torch.manual_seed(seed)
    return T5ForConditionalGeneration(config).eval()


@functools.cache
def _tokenizer_json() -> str:
    from pydoc_data.topics import topics

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=list(SPECIALS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )  # fmt: skip
    text = [topics[k] for k in sorted(topics)][:60]
    tok.train_from_iterator(text, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return tok.to_str()


def tiny_t5_tokenizer() -> PreTrainedTokenizerFast:
    """A T5-style tokenizer of `VOCAB` tokens (deterministic: the same ids on every machine)."""
    from tokenizers import Tokenizer

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json()), pad_token="<pad>", eos_token="</s>",
        unk_token="<unk>", model_max_length=512,
    )  # fmt: skip


def write_tiny_t5(folder: str | Path, ff: str = "gated-gelu", *, seed: int = 0, layers: int = 2) -> Path:
    """A from_pretrained folder: a random T5 (`layers` blocks in each stack, 8 heads of 8, 64 FFN neurons,
    d_model 64) and the tokenizer. Equal stacks: transformers 5.24's generate() sizes T5's cache by the encoder."""
    tokenizer = tiny_t5_tokenizer()
    model = tiny_t5(
        ff, seed, decoder_layers=layers, heads=8, d_ff=64, vocab_size=len(tokenizer), d_model=64, encoder_layers=layers
    )
    folder = Path(folder)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


if __name__ == "__main__":  # python -m tests.tiny_t5 DIR [relu|gated-gelu]
    out = write_tiny_t5(sys.argv[1], *(sys.argv[2:3] or ["gated-gelu"]))
    print(f"wrote a tiny random T5 to {out}")
