"""Pruning: scores -> allocation -> plan (JSON) -> physical slicing."""
