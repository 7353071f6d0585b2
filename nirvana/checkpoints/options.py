"""The loader's options that are checked before anything loads: the default model, the dtype and device
names, and whether the hub answers. Light (torch only, no transformers): the CLI checks its arguments with
them before it waits for the device lock or imports the model code."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

import torch

from nirvana.errors import InvalidInput

DEFAULT_MODEL = "smollm2-135m"

DTYPES = {
    "auto": "auto",
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_dtype(dtype, device: str) -> torch.dtype:
    """`auto` picks bf16 on GPUs that support it and fp32 elsewhere (bf16 is slower on CPUs)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).lower().replace("torch.", "")
    if key not in DTYPES:
        raise InvalidInput(f"dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}.")
    value = DTYPES[key]
    if value != "auto":
        return value
    if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def resolve_device(device: str = "auto") -> str:
    device = (device or "auto").lower()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InvalidInput(f"device {device!r} was asked for but CUDA is not available here; use 'cpu' or 'auto'.")
    if device not in {"cpu"} and not device.startswith("cuda"):
        raise InvalidInput(f"device {device!r} is not supported; use auto, cpu, cuda or cuda:N.")
    return device


_HUB_REACHABLE: bool | None = None


def hub_reachable(timeout: float = 3.0) -> bool:
    """One quick TCP probe of the hub endpoint per process (False when HF_HUB_OFFLINE is set)."""
    global _HUB_REACHABLE
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}:
        return False
    if _HUB_REACHABLE is None:
        host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
        try:
            socket.create_connection((host, 443), timeout=timeout).close()
            _HUB_REACHABLE = True
        except OSError:
            _HUB_REACHABLE = False
    return _HUB_REACHABLE
