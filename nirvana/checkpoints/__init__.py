"""Models as files: loading by name, id or folder; pruned checkpoints; the GGUF cache; `LoadedModel`."""
