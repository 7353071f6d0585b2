"""The Allocation page's live text: one prompt's greedy continuation, dense beside pruned at the slider's plan.

A slider move re-allocates from cached scores (no gradients), slices a copy (`apply_plan`: the block
weights are sliced, not copied first) and generates `NEW_TOKENS` greedy tokens; the dense text is
computed once per prompt. Both are memoised (shared by every session): a sparsity already seen is
answered from the memo, keyed by the plan's kept units, so two slider values that keep the same
units share one entry. The pruned text's tokens that are not in the dense one are marked.
"""

from __future__ import annotations

import html
import re

import streamlit as st

from nirvana.measure.generation import PRESETS, continue_greedy, continue_pruned, marked_pieces
from nirvana.pruning.slicing import plan_signature
from nirvana.store.keys import content_key
from ui import resources, state
from ui.errors import guard

NEW_TOKENS = 16
CUSTOM = "(your own)"
PREFIX = '<code style="white-space: pre-wrap">'  # every continuation's markup starts so (tests find them by it)


def _controls() -> tuple[str, bool]:
    st.session_state.setdefault("live_preset", next(iter(PRESETS)))
    st.session_state.setdefault("live_prompt", PRESETS[st.session_state.live_preset])
    st.session_state.setdefault("live_chat", False)

    def preset_chosen() -> None:
        if st.session_state.live_preset in PRESETS:
            st.session_state.live_prompt = PRESETS[st.session_state.live_preset]

    c = st.columns([2, 5, 2])
    c[0].selectbox("Prompt", [*PRESETS, CUSTOM], key="live_preset", on_change=preset_chosen)
    prompt = c[1].text_area("Text to continue", key="live_prompt", height=68)
    chat = c[2].checkbox("Chat template", key="live_chat", help="wrap the prompt as a user turn (instruct models)")
    return prompt, chat


def _kept_layout(text: str) -> str:
    """Escaped text whose line breaks and indentation survive streamlit's markdown (which drops a <pre>'s style):
    <br> for newlines, &nbsp; for the second of two spaces and for spaces that start a line."""
    text = html.escape(text).replace("  ", " &nbsp;").replace("\n", "<br>")
    return re.sub(r"(^|<br>) ", r"\1&nbsp;", text)


def marked_html(pieces: list[tuple[str, bool]]) -> str:
    """The continuation as HTML (newlines and indentation kept, monospace), changed tokens highlighted."""
    spans = [f"<mark>{_kept_layout(p)}</mark>" if changed else _kept_layout(p) for p, changed in pieces]
    return f"{PREFIX}{''.join(spans)}</code>"


def _growing(lm, placeholder):
    """`on_token` for a generation: the text so far in `placeholder`, one update per token. Each update is a
    streamlit call, so a slider move made meanwhile stops this generation there instead of waiting for it."""
    ids: list[int] = []

    def on_token(token: int) -> None:
        ids.append(token)
        placeholder.markdown(marked_html([(lm.tokenizer.decode(ids, skip_special_tokens=True), False)]),
                             unsafe_allow_html=True)  # fmt: skip

    return on_token


def show(lm, plan) -> None:
    """The section: controls, then dense | pruned at `plan` (called inside the sliders' fragment)."""
    st.subheader("What this does to the text")
    prompt, chat = _controls()
    spec_key = state.spec().key
    left, right = st.columns(2)
    left_head, left_text, right_head, right_text = left.empty(), left.empty(), right.empty(), right.empty()
    with guard("continuing the prompt") as g:
        base = (spec_key, prompt, NEW_TOKENS, chat)
        left_head.markdown("**Dense** (greedy)")
        dense = resources.memo("live_text").get_or_compute(
            content_key("live-dense", *base),
            lambda: continue_greedy(lm.model, lm.tokenizer, prompt, NEW_TOKENS, chat, _growing(lm, left_text)),
        )
        left_head.markdown(f"**Dense** ({len(dense.tokens)} tokens, greedy)")
        left_text.markdown(marked_html([(p, False) for p in dense.pieces]), unsafe_allow_html=True)
        right_head.markdown(f"**Pruned at {plan.stats['achieved_block_sparsity']:.0%}** (generating)")
        pruned = resources.memo("live_text").get_or_compute(
            content_key("live-pruned", *base, repr(plan_signature(plan))),
            lambda: continue_pruned(lm.model, lm.tokenizer, plan, prompt, NEW_TOKENS, chat, _growing(lm, right_text)),
        )
    if g.failed:
        return
    pieces = marked_pieces(dense, pruned)
    changed = sum(m for _, m in pieces)
    right_head.markdown(
        f"**Pruned at {plan.stats['achieved_block_sparsity']:.0%}** ({changed} of {len(pruned.tokens)} tokens "
        "not in the dense text, highlighted)"
    )
    right_text.markdown(marked_html(pieces), unsafe_allow_html=True)
    st.caption(
        f"Greedy, {NEW_TOKENS} new tokens, the same prompt. Each slider position is sliced and generated once "
        f"(here {pruned.seconds:.1f} s of generation) and then remembered. Next: **5 · Prune & compare** measures "
        "perplexity, accuracy and speed of this plan."
    )
