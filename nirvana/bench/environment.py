"""The machine label every benchmark row carries: what a measured figure was measured on."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch


def machine_label() -> str:
    """CPU model (and GPU), core count, torch version and threads: the context of a measured figure."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if torch.cuda.is_available():
        cpu += f" + {torch.cuda.get_device_name(0)}"
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)"
