"""Tokenizing a whole corpus (or a list of documents) before it is cut into windows.

A corpus is longer than any model's context, and every caller cuts its ids into windows of the
model's size afterwards, so transformers' "Token indices sequence length is longer than the
specified maximum sequence length" warning (T5: 512 tokens) says nothing true here; it is turned
off for Hugging Face tokenizers (`verbose=False`). Any other callable with the same call shape
(the tests' character tokenizers) is called as it is.
"""

from __future__ import annotations


def corpus_ids(tokenizer, text: str | list[str]) -> list[int] | list[list[int]]:
    """Token ids of `text` (one list per document for a list), without special tokens."""
    # here, not at the top: the CLI's argument checks import this module; transformers costs seconds
    from transformers import PreTrainedTokenizerBase

    quiet = {"verbose": False} if isinstance(tokenizer, PreTrainedTokenizerBase) else {}
    return tokenizer(text, add_special_tokens=False, **quiet)["input_ids"]
