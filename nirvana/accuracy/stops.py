"""Stop strings checked row by row, so a batched `generate` ends when its last row has finished.

lm-eval's `stop_sequences_criteria` makes one `StoppingCriteria` per stop string, and each answers for the
whole batch: "done" only once every row has produced that same string. A batch whose rows end on
different stop strings (HumanEval has five: "\\nclass", "\\ndef", "\\n#", "\\nif", "\\nprint"), or some on a
stop string and some on an end-of-sequence token, keeps generating every row until `max_gen_toks` (1,024
for HumanEval). The completions are still right, because lm-eval cuts each at its first stop string
afterwards, but the batch pays for the longest possible one.

`RowStops` detects each stop string exactly as lm-eval does (the row's last `len(tokens(stop)) + 2`
generated tokens, decoded, contain the string) and answers per row, which `transformers.generate` takes
as "this row is finished": from there it appends padding to that row, and it stops when every row is
finished or at the length cap. So each row stops where it would stop generated alone (batch size 1, where
lm-eval's batch-wide answer is that row's answer), and the completions are the same as before, token for
token up to the first stop string, the only part lm-eval keeps (tests/test_batched_generation.py).
"""

from __future__ import annotations

import torch
from transformers import StoppingCriteria


class StopStrings:
    """Whether one row's generated tokens end in one of `stops` (lm-eval's test, for `continuous`).

    Example:
        >>> StopStrings(tokenizer, ["[DONE]"])(tokenizer.encode("x = 1\n[DONE]"))
        True
    """

    def __init__(self, tokenizer, stops: list[str]):
        self.tokenizer = tokenizer
        self.windows = look_back(tokenizer, stops)

    def __call__(self, tokens: list[int]) -> bool:
        texts: dict[int, str] = {}  # stops of the same look-back share one decode
        for stop, window in self.windows:
            if window not in texts:
                texts[window] = self.tokenizer.decode(tokens[-window:])
            if stop in texts[window]:
                return True
        return False


def look_back(tokenizer, stops: list[str]) -> list[tuple[str, int]]:
    """(stop, tokens to decode) per non-empty stop: lm-eval's look-back, the stop's own tokens and two more
    (a model may write "\n", "\n" for "\n\n")."""
    return [(s, len(tokenizer.encode(s, add_special_tokens=False)) + 2) for s in stops if s]


class RowStops(StoppingCriteria):
    """Per-row stop strings for a left-padded batch whose prompts are `prompt_len` tokens long.

    Example (two rows; the second has produced "[DONE]"):
        >>> stops = RowStops(tokenizer, ["[DONE]"], prompt_len=ids.shape[1], batch_size=2)
        >>> stops(generated, None)
        tensor([False,  True])
    """

    def __init__(self, tokenizer, stops: list[str], prompt_len: int, batch_size: int):
        self.tokenizer, self.prompt_len = tokenizer, prompt_len
        self.windows = look_back(tokenizer, stops)
        self.done = torch.zeros(batch_size, dtype=torch.bool)

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        rows = (~self.done).nonzero().flatten().tolist()
        if rows:
            generated = input_ids[rows, self.prompt_len :].cpu()
            for stop, window in self.windows:
                texts = self.tokenizer.batch_decode(generated[:, -window:])
                for row, text in zip(rows, texts, strict=True):
                    if stop in text:
                        self.done[row] = True
        return self.done.to(input_ids.device)
