"""Scoring: the criteria table, unit grouping and the score container (KV groups and MLP neurons)."""
