"""Peak memory of one SmolLM2-135M scoring pass (CPU, fp32), hooks vs autograd, vs nirvana.guard.memory's estimate.

Run one method per process so each peak is its own:
    python benchmarks/memory/measure.py hooks 32 128 [micro_batch]
Peak = ru_maxrss (high-water RSS of the process) minus the RSS just before scoring, i.e. what the
scoring pass added on top of the loaded weights (the same quantity `estimate_scoring` plans).
"""

from __future__ import annotations

import json
import resource
import sys
import time

import psutil
import torch

from nirvana.checkpoints.loading import load_model
from nirvana.data.calibration import CalibrationBatch
from nirvana.guard.memory import GIB, estimate_scoring
from nirvana.scoring.criteria import compute_scores


def main(method: str, n: int, t: int, micro_batch: int = 0) -> dict:
    torch.manual_seed(0)
    lm = load_model("smollm2-135m", dtype="float32", device="cpu")
    ids = torch.randint(0, lm.model.config.vocab_size, (n, t), generator=torch.Generator().manual_seed(0))
    batch = CalibrationBatch(ids, "random-ids", 0)
    base = psutil.Process().memory_info().rss
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    compute_scores(lm.model, "nirvana", batch, micro_batch=micro_batch, use_cache=False, method=method)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    est = estimate_scoring(lm.model.config, samples=n, seq_len=t, micro_batch=micro_batch, method=method)
    return {
        "model": "smollm2-135m fp32 cpu",
        "method": method,
        "N": n,
        "T": t,
        "micro_batch": micro_batch,
        "rss_before_gib": round(base / GIB, 3),
        "peak_rss_gib": round(peak / GIB, 3),
        "peak_before_scoring_gib": round(peak_before / GIB, 3),
        "scoring_added_gib": round((peak - base) / GIB, 3),
        "estimate_gib": round(est.total / GIB, 3),
        "estimate_components_gib": {k: round(v / GIB, 3) for k, v in est.components.items()},
        "seconds": round(seconds, 1),
        "torch_threads": torch.get_num_threads(),
    }


if __name__ == "__main__":
    args = sys.argv[1:]
    result = main(args[0], int(args[1]), int(args[2]), int(args[3]) if len(args) > 3 else 0)
    print(json.dumps(result))
