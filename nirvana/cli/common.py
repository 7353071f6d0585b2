"""Arguments and output helpers shared by the CLI commands."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from nirvana.checkpoints.options import DEFAULT_MODEL
from nirvana.cluster.ray_tasks import ENV, connect, ray_address
from nirvana.guard.locks import heavy_work
from nirvana.runs import record_run


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
        p.add_argument(
            "--max-memory",
            default=None,
            type=parse_max_memory,
            help='per-device caps for device_map="auto", e.g. "0=70GiB,1=70GiB,cpu=200GiB"',
        )
        p.add_argument("--quantization", choices=["8bit", "4bit"], default=None, help="bitsandbytes loading")
        p.add_argument("--trust-remote-code", action="store_true", help="run code from the model's repository")


def load_from_args(args, name: str | None = None, weights: bool = True):
    # here, not at the top: the loader imports transformers' modeling (seconds), a refused argument needs none of it
    from nirvana.checkpoints.loading import load_model

    return load_model(
        name or args.model,
        dtype=getattr(args, "dtype", "auto"),
        device=getattr(args, "device", "auto"),
        device_map=getattr(args, "device_map", None),
        max_memory=getattr(args, "max_memory", None),
        quantization=getattr(args, "quantization", None),
        trust_remote_code=getattr(args, "trust_remote_code", False),
        progress=stderr_progress,
        weights=weights,
    )


def hold_device(args, what: str, model: str | None = None):
    """Hold the device for this command; while another job holds it, say so on stderr."""

    return heavy_work(
        getattr(args, "device", "auto"),
        on_wait=lambda message: stderr_progress(0.0, message),
        who=f"`{what}` of {model or getattr(args, 'model', '?')} (pid {os.getpid()})",
    )


def record_command(kind: str, args, metrics: dict, summary: dict) -> str:
    """Write this command's settings and results under the runs folder; return the run id."""

    settings = {k: v for k, v in vars(args).items() if k != "func"}
    return record_run(kind, settings=settings, metrics=metrics, summary=summary)


def stderr_progress(fraction: float, message: str) -> None:
    print(f"[{fraction:4.0%}] {message}", file=sys.stderr, flush=True)


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


def parse_float_list(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def parse_name_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_max_memory(text: str) -> dict:
    """ "0=70GiB,cpu=200GiB" -> {0: "70GiB", "cpu": "200GiB"} (accelerate's max_memory)."""

    out: dict = {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not value:
            raise argparse.ArgumentTypeError(f"{part!r} is not DEVICE=SIZE; use e.g. 0=70GiB,cpu=200GiB")
        out[int(key) if key.isdigit() else key] = value
    return out


def config_from_args(cls, args: argparse.Namespace, **overrides):
    """`cls(name=args.name, ...)` for every field of the dataclass `cls` that has a flag of the same
    name (lists become tuples); `overrides` set the fields built some other way."""
    values = dict(overrides)
    for f in dataclasses.fields(cls):
        if f.name not in values and hasattr(args, f.name):
            value = getattr(args, f.name)
            values[f.name] = tuple(value) if isinstance(value, list) else value
    return cls(**values)


def add_ray_flag(p) -> None:
    p.add_argument(
        "--ray",
        metavar="auto|ADDRESS",
        default=None,
        help=f"run each row as a task on this Ray cluster (auto: the one started here; default ${ENV}, "
        "else in this process); docs/SCALE.md",
    )


def cluster_from_args(args):
    """The Ray cluster of `--ray` (or NIRVANA_RAY_ADDRESS), connected; None: run in this process."""
    address = ray_address(getattr(args, "ray", None))
    if address is None:
        return None
    cluster = connect(address)
    print(cluster.describe(), file=sys.stderr, flush=True)
    return cluster
