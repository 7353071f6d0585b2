"""Perplexity: exact windowing, exp(mean NLL) against a hand computation, determinism, cache."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from nirvana.data.text import Text
from nirvana.errors import InvalidInput
from nirvana.measure.perplexity import make_windows, perplexity, window_nll


class CharTokenizer:
    """Characters to ids 1..63 (0 is BOS): a tokenizer for the 64-token tiny models."""

    def __init__(self, bos: bool = True):
        self.bos_token_id = 0 if bos else None

    def __call__(self, text, add_special_tokens=False):
        ids = [ord(c) % 63 + 1 for c in text]
        return {
            "input_ids": ([self.bos_token_id] if add_special_tokens and self.bos_token_id is not None else []) + ids
        }


def _text(n_docs=40):
    return Text(
        "toy", "test", [f"document {i}: the quick brown fox jumps over the lazy dog" for i in range(n_docs)], "toy"
    )


def test_windows_are_exact_and_have_one_bos_at_the_start():
    text = "abcdefghij" * 10  # 100 characters -> 101 ids with BOS
    windows, n = make_windows(CharTokenizer(), text, seq_len=16)
    assert n == 101
    assert windows.shape == (101 // 16, 16)  # remainder of 5 dropped
    assert windows[0, 0].item() == 0 and (windows.view(-1)[1:] != 0).all()
    assert windows.view(-1)[1:].tolist() == CharTokenizer()(text)["input_ids"][: 6 * 16 - 1]


def test_max_tokens_caps_whole_windows_and_no_bos_without_one():
    windows, _ = make_windows(CharTokenizer(bos=False), "x" * 1000, seq_len=32, max_tokens=100)
    assert windows.shape == (3, 32)
    assert (windows != 0).all()


@pytest.mark.parametrize(
    "kwargs", [{"seq_len": 1}, {"seq_len": 16, "max_tokens": 8}, {"seq_len": 4096}, {"seq_len": 16.0}]
)
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(InvalidInput):
        make_windows(CharTokenizer(), "short text " * 20, **kwargs)


def test_ppl_is_exp_of_mean_token_nll_computed_by_hand(tiny_llama):
    tok = _text()
    result = perplexity(tiny_llama, CharTokenizer(), tok, seq_len=24, batch_size=3, use_cache=False)
    windows, _ = make_windows(CharTokenizer(), tok.joined("\n\n"), seq_len=24)
    nlls = []
    with torch.no_grad():
        for w in windows:
            logp = F.log_softmax(tiny_llama(w[None]).logits[0].double(), dim=-1)  # (S, V)
            nlls.append(-logp[:-1].gather(1, w[1:, None]).squeeze(1))
    manual = torch.cat(nlls).mean().item()
    assert result.windows == windows.shape[0]
    assert result.tokens == windows.shape[0] * 24
    assert result.predicted_tokens == windows.shape[0] * 23
    assert result.nll == pytest.approx(manual, rel=1e-5)
    assert result.ppl == pytest.approx(math.exp(manual), rel=1e-5)


def test_deterministic_and_independent_of_batch_size(tiny_llama):
    a = perplexity(tiny_llama, CharTokenizer(), _text(), seq_len=16, batch_size=1, use_cache=False)
    b = perplexity(tiny_llama, CharTokenizer(), _text(), seq_len=16, batch_size=1, use_cache=False)
    c = perplexity(tiny_llama, CharTokenizer(), _text(), seq_len=16, batch_size=5, use_cache=False)
    assert a.ppl == b.ppl
    assert c.ppl == pytest.approx(a.ppl, rel=1e-5)


def test_cache_hit_returns_the_same_figure_and_settings_change_the_key(tiny_llama):
    first = perplexity(tiny_llama, CharTokenizer(), _text(), seq_len=16)
    again = perplexity(tiny_llama, CharTokenizer(), _text(), seq_len=16)
    other = perplexity(tiny_llama, CharTokenizer(), _text(), seq_len=16, max_tokens=64)
    assert not first.cache_hit and again.cache_hit and not other.cache_hit
    assert again.ppl == first.ppl and other.tokens == 64


def test_progress_is_called_once_per_batch(tiny_llama):
    calls = []
    windows = torch.randint(1, 64, (7, 8))
    total, count = window_nll(tiny_llama, windows, batch_size=3, progress=lambda f, m: calls.append(f))
    assert calls == pytest.approx([3 / 7, 6 / 7, 1.0])
    assert count == 7 * 7 and math.isfinite(total)


def test_text_file_dataset_records_origin(tiny_llama, tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(f"line {i} of a small corpus" for i in range(30)))
    r = perplexity(tiny_llama, CharTokenizer(), str(path), seq_len=32, use_cache=False)
    assert r.origin == str(path) and r.fallback_reason is None and r.bos


@pytest.mark.slow
def test_smollm2_wikitext2_budget(smollm2):
    r = perplexity(smollm2.model, smollm2.tokenizer, "wikitext2", seq_len=512, max_tokens=1024, batch_size=2)
    assert (r.dataset, r.split, r.windows, r.tokens, r.predicted_tokens) == ("wikitext2", "test", 2, 1024, 1022)
    assert r.origin.endswith("wiki.test.raw")
    assert 3 < r.ppl < 200  # a trained 135M model on English text; a broken pipeline gives ~1e4+
