"""Accuracy the paper's way: lm-eval's own tasks on local data, MBPP/HumanEval in a sandbox."""
