"""Benchmarks behind `python -m nirvana bench ...`; each writes a table (markdown + CSV) and a plot."""
