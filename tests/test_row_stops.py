"""Per-row stop strings (`nirvana.accuracy.stops.RowStops`) against lm-eval's batch-wide ones: the same
completions once cut at the first stop string (all lm-eval keeps), each row's own stop point, and a batch
that ends when its last row has finished. Tiny random Qwen2 with a byte-level tokenizer; no real model."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, StoppingCriteriaList

from nirvana.accuracy.stops import RowStops, StopStrings

lm_eval_utils = pytest.importorskip("lm_eval.models.utils_hf")


@pytest.fixture(scope="module")
def tiny(tiny_tokenizer_dir):
    tok = AutoTokenizer.from_pretrained(tiny_tokenizer_dir, padding_side="left")
    tok.pad_token = tok.pad_token or tok.eos_token
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_tokenizer_dir).eval()
    # as real models have: `generate` pads a finished row only where it knows an end-of-sequence token
    model.generation_config.eos_token_id = tok.eos_token_id
    return model, tok


def _ids(tok, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids and attention mask, as lm-eval batches prompts."""
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return enc["input_ids"], enc["attention_mask"]


def test_row_stops_known_answer(tiny):
    _, tok = tiny
    enc = lambda text: tok.encode(text, add_special_tokens=False)
    prompt = enc("def f():\n  return 1\ndef g():\n")  # the prompt's own "\ndef" must not count
    conts = [enc("  x = 1\ndef h"), enc("  x = 1"), enc("  y\nclass A")]
    longest = max(map(len, conts))
    batch = torch.tensor([prompt + [tok.pad_token_id] * (longest - len(c)) + c for c in conts])
    stops = RowStops(tok, ["\ndef", "\nclass", ""], prompt_len=len(prompt), batch_size=3)
    assert stops(batch, None).tolist() == [True, False, True]
    # sticky: a finished row stays finished once later tokens push its stop out of the look-back window
    later = torch.cat([batch, torch.tensor([enc("z" * 8)] * 3)], dim=1)
    assert stops(later, None).tolist() == [True, False, True]


def test_stop_strings_answer_each_step_as_lm_evals_look_back(tiny):
    """StopStrings (one row, for continuous batching) at every step of some rows: the oracle `_stop_step`."""
    _, tok = tiny
    stops = ["\ndef", "\nclass", "\n#", "[DONE]", ""]
    check = StopStrings(tok, stops)
    for text in ("  x = 1\ndef h():", "  y = [1]\n# done\n", "return 2 [DONE] x", "  z = 3\n  w = 4"):
        row = tok.encode(text, add_special_tokens=False)
        first = _stop_step(tok, row, [s for s in stops if s])  # None: never
        answers = [check(row[:n]) for n in range(1, len(row) + 1)]
        assert (first is None) == (text == "  z = 3\n  w = 4")
        end = len(row) if first is None else first  # a row is finished at the first step that says so
        assert answers[:end] == [False] * (end - 1) + ([False] if first is None else [True])


def _cut(text: str, stops: list[str]) -> str:
    for stop in stops:
        text = text.split(stop)[0]
    return text


def _generate(model, tok, ids, mask, criteria, max_new: int) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_length=ids.shape[1] + max_new,
            stopping_criteria=StoppingCriteriaList(criteria),
            pad_token_id=tok.pad_token_id,
            do_sample=False,
            use_cache=True,
        )


def _stop_step(tok, row: list[int], stops: list[str]) -> int | None:
    """The first generated step at which lm-eval's look-back sees one of `stops` in this row (1-based)."""
    for step in range(1, len(row) + 1):
        for stop in stops:
            window = len(tok.encode(stop, add_special_tokens=False)) + 2
            if stop in tok.decode(row[:step][-window:]):
                return step
    return None


def test_per_row_stops_keep_lm_evals_completions_and_end_the_batch_early(tiny):
    shorter = [_compare(*tiny, seed) for seed in range(3)]
    assert any(shorter), "no batch ended earlier than lm-eval's: the stops picked do not exercise the point"


def _compare(model, tok, seed: int) -> bool:
    """Checks one batch of three prompts; True when it ended before lm-eval's batch-wide stops ended it."""
    gen = torch.Generator().manual_seed(seed)
    prompts = ["".join(chr(97 + int(i)) for i in torch.randint(0, 26, (n,), generator=gen)) for n in (5, 9, 14)]
    ids, mask = _ids(tok, prompts)
    width, max_new = ids.shape[1], 40
    free = _generate(model, tok, ids, mask, [], max_new)[:, width:].tolist()
    # one stop string per row, taken from that row's own free generation at a different depth
    stops = []
    for row, depth in zip(free, (4, 12, 22), strict=True):
        printable = [tok.decode(row[d : d + 1]) for d in range(depth, max_new)]
        text = next((t for t in printable if t.strip()), "")
        if text and text not in stops:
            stops.append(text)
    assert stops, "the tiny model produced no printable token"
    old = _generate(model, tok, ids, mask, lm_eval_utils.stop_sequences_criteria(tok, stops, width, 3), max_new)
    new = _generate(model, tok, ids, mask, [RowStops(tok, stops, width, 3)], max_new)
    decode = lambda out: [_cut(tok.decode(r[width:], skip_special_tokens=True), stops) for r in out.tolist()]
    assert decode(new) == decode(old)
    steps = [_stop_step(tok, row, stops) for row in free]
    expected = max_new if None in steps else max(steps)
    assert new.shape[1] - width == expected <= old.shape[1] - width
    for i, step in enumerate(steps):  # a finished row is padded after its stop step
        if step is not None and step < new.shape[1] - width:
            assert set(new[i, width + step :].tolist()) == {tok.pad_token_id}
    # and each row stops where it stops generated alone
    for i, prompt in enumerate(prompts):
        one_ids, one_mask = _ids(tok, [prompt])
        one = _generate(model, tok, one_ids, one_mask, [RowStops(tok, stops, one_ids.shape[1], 1)], max_new)
        assert _cut(tok.decode(one[0, one_ids.shape[1] :], skip_special_tokens=True), stops) == decode(new)[i]
    return new.shape[1] < old.shape[1]
