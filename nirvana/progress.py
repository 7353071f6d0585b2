"""The `progress` callback every long step takes, and how a step hands part of its bar to a sub-step.

`progress(fraction, message)`: `fraction` in [0, 1] of the whole step, `message` what is running.
`None` means nobody is watching (the library then skips the bookkeeping).
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[float, str], None] | None


def sub_progress(progress: Progress, lo: float, hi: float, prefix: str = "") -> Progress:
    """Map a sub-step's [0, 1] into [lo, hi] of the caller's bar, its messages prefixed with `prefix`.

    Example:
        >>> dense = perplexity(model, tok, text, progress=sub_progress(progress, 0.0, 0.5, "dense: "))
    """
    if progress is None:
        return None
    return lambda fraction, message: progress(lo + (hi - lo) * fraction, prefix + message)
