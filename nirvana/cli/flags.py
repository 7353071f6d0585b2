"""Command-line flags made from a config dataclass's fields, so that a default is written once.

`add_config_flags(parser, QualityConfig, {"candidates": "K calibration candidates", ...})` adds
`--candidates` with the field's type and default; the table gives only the help text (and, by
its order, the order `--help` lists them). `config_from_args` (nirvana.cli.common) turns the
parsed flags back into the dataclass, field by field.

    field annotation            flag
    bool                        --name (store_true; the field's default must be False)
    int, float, str, Path       --name VALUE of that type
    X | None                    --name VALUE of type X (default None)
    dict | None                 --name JSON (an object)
    tuple[float | int | str]    --name A,B,C (comma-separated; a tuple default stays a tuple)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from pathlib import Path


def _list_of(kind: type, example: str):
    """An argparse type for a comma-separated list of `kind`, with a message that says what is accepted."""

    def parse(text: str) -> list:
        try:
            return [kind(x.strip()) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a comma-separated list of {kind.__name__} values; write e.g. {example}"
            ) from None

    parse.__name__ = f"{kind.__name__}_list"
    return parse


def json_object(text: str) -> dict:
    """A flag holding a JSON object (`--method-settings`), or a clear argparse error (exit 2)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f'not valid JSON ({exc.msg}); pass an object like \'{{"taylor": "param_mix"}}\''
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r}")
    return value


json_object.__name__ = "JSON object"

# The argparse `type` of each field annotation that has a flag.
SCALARS: dict[object, object] = {int: int, float: float, str: str, Path: Path, dict: json_object}
LISTS: dict[object, object] = {
    float: _list_of(float, "0.2,0.5"),
    int: _list_of(int, "1,8,32"),
    str: _list_of(str, "nirvana,taylor"),
}


def field_default(f: dataclasses.Field):
    """The value a dataclass field takes when it is not given."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise TypeError(f"field {f.name!r} has no default, so it cannot become an optional flag")


def flag_kwargs(annotation, default) -> dict:
    """`add_argument` keywords (type/action) for a field of this annotation."""
    if annotation is bool:
        if default is not False:
            raise TypeError("a bool field becomes a store_true flag, so its default must be False")
        return {"action": "store_true"}
    if isinstance(annotation, types.UnionType):  # X | None
        (annotation,) = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is tuple:
        return {"type": LISTS[typing.get_args(annotation)[0]]}
    if annotation is dict:
        return {"type": json_object, "metavar": "JSON"}
    return {"type": SCALARS[annotation]}


def add_config_flags(parser, cls, helps: dict[str, str], *, prefix: str = "") -> None:
    """Add `--<prefix><field>` (underscores as dashes) for each field of the dataclass `cls` named in
    `helps`, with the field's type and default; `helps[name]` is its help text ("" for none)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for name, text in helps.items():
        default = field_default(fields[name])
        flag = "--" + (prefix + name).replace("_", "-")
        parser.add_argument(flag, default=default, help=text or None, **flag_kwargs(hints[name], default))
