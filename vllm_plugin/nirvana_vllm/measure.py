"""Greedy outputs and generation throughput of one model folder through vLLM's engine (the `LLM` class), for
`python -m nirvana bench serve`, which runs this in the serving environment:

    .venv-serve/bin/python -m nirvana_vllm.measure '{"model": DIR, "architecture": "NirvanaLlamaForCausalLM",
        "prompts": [...], "new_tokens": 24, "batch_sizes": [1, 32], "prompt_len": 64, "gen_tokens": 64}'

prints one JSON line: each prompt's greedy token ids and text (`"ignore_eos": true` makes every prompt run its
`new_tokens`), and per batch size (`"batch_sizes": []`: no timing) the output tokens per second
of `generate` on that many prompts of `prompt_len` tokens with `gen_tokens` new tokens each (EOS ignored, so
every request makes them all), the median of `repeats` timed runs after one untimed warm-up.
"""

from __future__ import annotations

import json
import statistics
import sys
import time


def measure(spec: dict) -> dict:
    from vllm import LLM, SamplingParams

    overrides = {"hf_overrides": {"architectures": [spec["architecture"]]}} if spec.get("architecture") else {}
    batches = [int(b) for b in spec.get("batch_sizes", [1, 32])]
    start = time.perf_counter()
    llm = LLM(model=spec["model"], dtype=spec.get("dtype", "float32"), enforce_eager=True, seed=0,
              max_model_len=int(spec.get("max_model_len", 512)),
              max_num_seqs=max(batches, default=len(spec["prompts"])), **overrides)  # fmt: skip
    start_s = time.perf_counter() - start
    ignore_eos = bool(spec.get("ignore_eos"))
    greedy = SamplingParams(temperature=0.0, max_tokens=int(spec["new_tokens"]), ignore_eos=ignore_eos)
    outputs = llm.generate(spec["prompts"], greedy, use_tqdm=False)
    texts = [{"text": o.outputs[0].text, "token_ids": list(o.outputs[0].token_ids)} for o in outputs]
    vocab = llm.get_tokenizer().vocab_size
    prompt_len, gen_tokens = int(spec.get("prompt_len", 64)), int(spec.get("gen_tokens", 64))
    fixed = SamplingParams(temperature=0.0, max_tokens=gen_tokens, ignore_eos=True)
    speed = {}
    for batch in batches:
        prompts = [{"prompt_token_ids": [(17 + 31 * i + 7 * j) % (vocab - 1) + 1 for j in range(prompt_len)]}
                   for i in range(batch)]  # fmt: skip
        llm.generate(prompts, fixed, use_tqdm=False)  # warm-up
        seconds = []
        for _ in range(int(spec.get("repeats", 3))):
            t = time.perf_counter()
            llm.generate(prompts, fixed, use_tqdm=False)
            seconds.append(time.perf_counter() - t)
        median = statistics.median(seconds)
        speed[str(batch)] = {"seconds": seconds, "output_tokens_per_s": batch * gen_tokens / median}
    return {"start_s": start_s, "greedy": texts, "speed": speed}


if __name__ == "__main__":
    print("NIRVANA-MEASURE " + json.dumps(measure(json.loads(sys.argv[1]))), flush=True)
