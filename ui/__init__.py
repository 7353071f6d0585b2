"""Streamlit-side helpers for the explorer: state, caching, progress, error boxes, page frame.

Everything that imports streamlit lives here or in `pages/` and `app.py`; the pruning logic
lives in `nirvana/` and is called, never re-implemented.
"""
