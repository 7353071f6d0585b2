"""The C heap under CPU tensors (glibc): what the memory plan can and cannot see.

PyTorch's CPU tensors come from `malloc`. glibc serves a large request with its own `mmap` (returned to the
system on free) only above its mmap threshold, and by default that threshold *slides*: each freed mmapped
block raises it to the block's size, up to 32 MiB. After the first vocabulary chunk of NIRVANA's objective
(8 MiB) is freed, every tensor below 8 MiB comes from the heap instead, between short-lived temporaries, and
the holes they leave stay resident. The memory plan counts live tensors, so on CPU the process grew past it:
scoring Gemma-3-270M at micro-batch 2 (4 x 128 tokens, one thread) added 0.99 GiB of RSS where the plan says
0.71 GiB (-28%; the scale-up benchmark's row said -31% at 32 x 128). With the threshold pinned at 4 MiB the
same pass adds 0.76 GiB (-7%) in the same time (9.3 s both); SmolLM2's default scoring (32 x 128) peaks at
1.76 GiB instead of 1.78 GiB (maximum RSS), 44.6 s against 44.9 s.

`pin_mmap_threshold()` pins it (glibc's `mallopt(M_MMAP_THRESHOLD)`, which also stops the sliding). The
entry points call it: the CLI, the app, the scale-up benchmark's rows. The library does not, since allocator
settings belong to the process that embeds it. A `MALLOC_MMAP_THRESHOLD_` in the environment is the user's
choice and is left alone; where glibc is absent nothing happens.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from functools import lru_cache

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
PINNED_THRESHOLD = 4 << 20  # 4 MiB: the smallest of those measured with no time cost (256 KiB cost 14%)
ENV = "MALLOC_MMAP_THRESHOLD_"


@lru_cache(maxsize=1)  # the app calls pin_mmap_threshold on every rerun: load libc once
def _libc():
    if not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(OSError):
        return ctypes.CDLL("libc.so.6")
    return None


def pin_mmap_threshold(nbytes: int = PINNED_THRESHOLD) -> bool:
    """Pin glibc's mmap threshold at `nbytes` (see the module's docstring); True where it was set.

    Example:
        >>> pin_mmap_threshold()     # at the start of a process that scores or prunes on CPU
        True
    """
    if nbytes <= 0:
        raise ValueError(f"the mmap threshold must be a positive number of bytes, got {nbytes}.")
    libc = _libc()
    if libc is None or ENV in os.environ or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, int(nbytes)))


def setting() -> str:
    """How this process's C heap serves large tensors, in words (benchmarks record it beside memory figures)."""
    if ENV in os.environ:
        return f"{ENV}={os.environ[ENV]} (the environment's)"
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return "allocator default (not glibc)"
    return f"glibc mmap threshold pinned at {PINNED_THRESHOLD >> 20} MiB"


def trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc `malloc_trim`), so that RSS counts live memory
    only. Trimming returns the pages, not the free chunks: tensors later carved from them become resident again
    and stay so after they are freed, which is why a large GGUF is converted in a child process
    (`nirvana.checkpoints.gguf_cache`)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
