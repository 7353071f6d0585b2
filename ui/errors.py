"""Error boxes: a failed step shows a message and the rest of the page keeps working.

`NirvanaError`s are the user's to fix (their message says what to do), so they are shown as
they are. Anything else is a bug: the user sees a short, friendly box and the traceback goes to
the server log, never to the page. Streamlit's own control-flow exceptions (rerun, stop) derive
from BaseException and pass through untouched.
"""

from __future__ import annotations

import contextlib
import logging

import streamlit as st

from nirvana.errors import NirvanaError

log = logging.getLogger("nirvana.app")


class Guard:
    """Result holder of `guard`: `failed` is True when the block raised."""

    failed = False


@contextlib.contextmanager
def guard(action: str):
    """Run a block; on error show an `st.error` naming `action` and continue the page.

    Example:
        >>> with guard("computing saliency") as g:
        ...     scores = compute_scores(...)
        >>> if not g.failed: ...
    """
    result = Guard()
    try:
        yield result
    except NirvanaError as exc:
        result.failed = True
        st.error(f"**{action} failed** — {type(exc).__name__}: {exc}", icon="⚠️")
    except MemoryError:
        result.failed = True
        st.error(
            f"**{action} ran out of memory.** Try a smaller calibration batch (N, T), a smaller token budget, "
            "or a smaller model.",
            icon="⚠️",
        )
    except Exception as exc:
        result.failed = True
        log.exception("unexpected error while %s", action)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        st.error(
            f"**{action} failed unexpectedly** ({type(exc).__name__}: {first}). "
            "This is a bug in the explorer, not in your input; the details are in the server log. "
            "Other pages still work; try different settings or reload the model.",
            icon="🐞",
        )
