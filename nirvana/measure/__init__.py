"""Measurements: perplexity, KL to dense, generation, speed, FLOPs and zero-shot tasks."""
