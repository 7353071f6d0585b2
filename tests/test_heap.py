"""nirvana.guard.heap: with glibc's mmap threshold pinned, freed temporaries no longer stay resident."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nirvana.guard import heap

GLIBC = sys.platform.startswith("linux") and "glibc" in (os.confstr("CS_GNU_LIBC_VERSION") or "")

# Temporaries of 5-7.5 MiB, each freed after a 1 MiB tensor that stays alive is made behind it: the pattern of
# a forward pass. Prints the RSS growth in MiB (40 MiB are alive at the end).
PATTERN = """
import os, sys, torch
from nirvana.guard.heap import pin_mmap_threshold
if sys.argv[1] == "pin":
    assert pin_mmap_threshold()
MiB = 1 << 20
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
big = torch.ones(8 * MiB // 4); del big  # glibc's threshold slides to 8 MiB (unless pinned)
base, keep = rss(), []
for i in range(40):
    tmp = torch.ones((5 * MiB + i * 64 * 1024) // 4)  # larger each time: no earlier hole fits it
    keep.append(torch.ones(MiB // 4))
    del tmp
print((rss() - base) / MiB)
"""


def _growth_mib(mode: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != heap.ENV}
    done = subprocess.run([sys.executable, "-c", PATTERN, mode], capture_output=True, text=True, env=env, check=True)
    return float(done.stdout.split()[-1])


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator only")
def test_pinned_threshold_keeps_rss_at_the_live_tensors():
    # Unpinned, the same process grew by 57 to 250 MiB (12 runs here; the heap's layout at start varies),
    # so a pin that did nothing fails this.
    pinned = _growth_mib("pin")
    assert pinned < 40 * 1.25, pinned  # the 40 MiB alive, and little else


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator only")
def test_the_users_own_setting_is_left_alone(monkeypatch):
    assert heap.pin_mmap_threshold() is True
    monkeypatch.setenv(heap.ENV, "131072")
    assert heap.pin_mmap_threshold() is False


def test_a_non_positive_threshold_is_refused():
    with pytest.raises(ValueError, match="positive number of bytes"):
        heap.pin_mmap_threshold(0)


def test_the_cli_pins_it_before_any_command_runs(monkeypatch, capsys, tmp_path):
    from nirvana.cli import main

    calls = []
    monkeypatch.setattr(heap, "pin_mmap_threshold", lambda: calls.append(1) or True)
    assert main(["info", "--model", str(tmp_path / "no-such-model")]) == 2  # refused, after the pin
    assert calls == [1] and "no-such-model" in capsys.readouterr().err
