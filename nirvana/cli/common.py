"""Arguments and output helpers shared by the CLI commands."""

from __future__ import annotations

import json
import sys

from nirvana.models import DEFAULT_MODEL


def add_model_args(p, default: str | None = DEFAULT_MODEL, flag: str = "--model") -> None:
    p.add_argument(
        flag,
        default=default,
        required=default is None,
        help=f"registry name, Hugging Face id, local directory or pruned folder (default: {default})",
    )
    if flag == "--model":
        p.add_argument(
            "--dtype", default="auto", help="auto (bf16 on capable GPUs, else fp32), float32, bfloat16, float16"
        )
        p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
        p.add_argument("--device-map", default=None, help='passed to from_pretrained, e.g. "auto" for several GPUs')
        p.add_argument("--quantization", choices=["8bit", "4bit"], default=None, help="bitsandbytes loading")
        p.add_argument("--trust-remote-code", action="store_true", help="run code from the model's repository")


def load_from_args(args, name: str | None = None):
    from nirvana.models import load_model

    return load_model(
        name or args.model,
        dtype=getattr(args, "dtype", "auto"),
        device=getattr(args, "device", "auto"),
        device_map=getattr(args, "device_map", None),
        quantization=getattr(args, "quantization", None),
        trust_remote_code=getattr(args, "trust_remote_code", False),
        progress=stderr_progress,
    )


def stderr_progress(fraction: float, message: str) -> None:
    print(f"[{fraction:4.0%}] {message}", file=sys.stderr, flush=True)


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


def parse_float_list(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def parse_int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]
