"""LLM-Pruner (Ma, Fang, Wang; NeurIPS 2023), faithful to horseee/LLM-Pruner: see docs/BASELINES.md."""

from __future__ import annotations

from nirvana.methods.base import ScoredMethod
from nirvana.methods.llm_pruner.allocation import allocate_llm_pruner, solve_ratio
from nirvana.methods.llm_pruner.config import LLMPrunerConfig
from nirvana.methods.llm_pruner.importance import sharded_scorer, taylor_scores
from nirvana.methods.llm_pruner.memory import llm_pruner_memory


def check(model, shape, sparsity: float, config: LLMPrunerConfig) -> None:
    config.check(model, shape, sparsity)
    solve_ratio(shape, sparsity, config)  # refuses a target the layer range cannot reach


METHOD = ScoredMethod(
    name="llm-pruner",
    label="LLM-Pruner",
    config=LLMPrunerConfig,
    scorer=taylor_scores,
    allocator=allocate_llm_pruner,
    compensator=None,
    checker=check,
    needs_data=True,
    uses_gradients=True,
    memory=llm_pruner_memory,
    sharded=sharded_scorer,
    description="Taylor importance of the LM loss per coupled group; the same ratio in every layer of a range "
    "(first and last layers untouched), where NIRVANA ranks all layers together",
    reference="horseee/LLM-Pruner: llama3.py, hf_prune.py, LLMPruner/pruner/hf_llama_pruner.py, "
    "LLMPruner/torch_pruning/pruner/algorithms/metapruner.py",
)

__all__ = ["METHOD", "LLMPrunerConfig"]
