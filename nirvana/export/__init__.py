"""Export: pruned folders that stock transformers loads, their Hub model card, and `push`."""
