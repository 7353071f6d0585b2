"""Where the time goes in prefill and decode, dense vs 50% pruned (torch.profiler, CPU).

Run from the repository root:
    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/speed/profile_speed.py [THREADS] > benchmarks/speed/profile.txt
Prunes SmolLM2 at 50% with the nirvana criterion (scores from the disk cache when present), then
profiles one prefill (B=8, T=128, last logits only) and one greedy decode (B=1, 128-token prompt,
16 new tokens) of each model, after a warm-up. Groups operator self-time into matmuls, attention,
other tensor ops, and the rest of the wall time (Python, HF generate bookkeeping, dispatch).
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from nirvana.bench.speed import pruned_models
from nirvana.checkpoints.loading import load_model
from nirvana.measure.speed import _generate, _prefill, random_prompts

MATMUL = {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear"}
ATTENTION = {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::scaled_dot_product_attention"}


def groups(prof, wall: float) -> dict[str, float]:
    out = defaultdict(float)
    for e in prof.key_averages():
        if e.key in MATMUL:
            out["matmul"] += e.self_cpu_time_total / 1e6
        elif e.key in ATTENTION:
            out["attention (sdpa)"] += e.self_cpu_time_total / 1e6
        elif e.key.startswith("aten::"):
            out["other aten ops"] += e.self_cpu_time_total / 1e6
    out["outside aten ops (python, generate, dispatch)"] = wall - sum(out.values())
    out["wall"] = wall
    return dict(out)


def run(name, fn):
    fn()  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        fn()
        wall = time.perf_counter() - start
    print(f"\n## {name}: wall {wall:.3f} s")
    for k, v in groups(prof, wall).items():
        print(f"  {k:<48} {v:8.3f} s  {v / wall:6.1%}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=50))


def main():
    if len(sys.argv) > 1:
        torch.set_num_threads(int(sys.argv[1]))  # optional: thread count
    torch.manual_seed(0)
    lm = load_model("smollm2-135m")
    models = pruned_models(lm, [0.0, 0.5])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    vocab = lm.model.get_input_embeddings().weight.shape[0]
    prompts8 = random_prompts(vocab, 8, 128)
    prompts1 = random_prompts(vocab, 1, 128)
    for s, (model, _) in models.items():
        label = "dense" if s == 0 else f"{s:.0%} pruned"
        run(f"{label} prefill B=8 T=128", lambda m=model: _prefill(m, prompts8))
        run(f"{label} decode B=1 16 new tokens", lambda m=model: _generate(m, prompts1, 16, 0))


if __name__ == "__main__":
    main()
