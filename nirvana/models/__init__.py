"""Models: the architecture table, loading by name, shapes, weights, pruned checkpoints."""
