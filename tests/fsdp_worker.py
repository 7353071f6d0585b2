"""The ranks of the FSDP scoring tests (spawned once by tests/test_distributed_scoring.py, gloo on CPU): every
case of the module in one process group, so the two processes import torch and the library once."""

from __future__ import annotations

import os

import torch


def rank_main(rank: int, world: int, port: int, jobs: list[tuple], out_dir: str) -> None:
    """Each job `(family, criterion, checkpoint, meta)` scored sharded; rank 0 writes job i's scores to `i.pt`.

    `meta`: the ranks other than 0 build the model on the meta device and receive their shards from rank 0.
    `criterion` "llm-pruner:<taylor variant>": LLM-Pruner's sharded scorer with that variant.
    """
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    os.environ["LOCAL_RANK"] = str(rank)
    torch.set_num_threads(1)
    import torch.distributed as dist

    from nirvana.scoring.distributed import init_distributed, sharded_gradient_scores
    from tests.conftest import random_batch
    from tests.tiny import tiny_model

    init_distributed()
    try:
        for i, (family, criterion, checkpoint, meta) in enumerate(jobs):
            family, tied = family.removesuffix("-tied"), family.endswith("-tied")  # "llama-tied": tied embeddings
            if meta and rank != 0:
                with torch.device("meta"):
                    model = tiny_model(family, num_hidden_layers=4, tie_word_embeddings=tied)
            else:
                model = tiny_model(family, num_hidden_layers=4, tie_word_embeddings=tied)
            scorer = criterion
            if criterion.startswith("llm-pruner:"):  # llm-pruner:<taylor variant>
                from nirvana.methods.llm_pruner import LLMPrunerConfig
                from nirvana.methods.llm_pruner.importance import sharded_scorer

                scorer = sharded_scorer(LLMPrunerConfig(taylor=criterion.split(":")[1]))
            attn, mlp = sharded_gradient_scores(
                model, scorer, random_batch(n=4, t=16), micro_batch=1, checkpoint=checkpoint
            )
            if rank == 0:
                torch.save({"attn": attn, "mlp": mlp}, os.path.join(out_dir, f"{i}.pt"))
    finally:
        dist.destroy_process_group()
    # Done: leave without the interpreter's teardown, where a native thread (likely gloo's) still running now and
    # then aborts the process (SIGABRT, "terminate called without an active exception") after the work succeeded.
    os._exit(0)
