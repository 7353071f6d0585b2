"""The bench commands' flags are made from their typed configs (one default, in the dataclass)
and become those configs again field by field (`config_from_args`)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from nirvana.bench.accuracy import AccuracyConfig
from nirvana.bench.baselines import BaselinesConfig
from nirvana.bench.distill import DistillConfig
from nirvana.bench.gamma import GammaBenchConfig
from nirvana.bench.gpu import GpuBenchConfig
from nirvana.bench.quality_config import QualityConfig
from nirvana.bench.recovery import RecoveryBenchConfig
from nirvana.bench.scale import ScaleConfig
from nirvana.bench.scale_up import ScaleUpConfig
from nirvana.bench.serve import ServeConfig
from nirvana.bench.speed import SpeedBenchConfig
from nirvana.cli import build_parser
from nirvana.cli.bench_cmds import accuracy_config, gamma_config, quality_config, speed_config
from nirvana.cli.common import config_from_args
from nirvana.cli.flags import add_config_flags
from nirvana.search.calibration import AnchorSpec


def parse(*argv):
    return build_parser().parse_args(["bench", *argv])


def test_every_flag_lands_in_its_field_and_lists_become_tuples(tmp_path):
    args = parse("quality", "--criteria", "nirvana,taylor", "--sparsities", "0.1,0.3", "--candidates", "2")
    args.out_dir = tmp_path
    config = quality_config(args)
    assert config.criteria == ("nirvana", "taylor") and config.sparsities == (0.1, 0.3) and config.candidates == 2
    assert config.anchor == AnchorSpec(samples=args.anchor_samples, seq_len=args.anchor_seq_len)
    assert config.out_dir == tmp_path and config.window == QualityConfig().window  # no flag: the default

    config = gamma_config(parse("gamma", "--gammas", "1,2", "--anchor-samples", "16", "--out-dir", str(tmp_path)))
    assert config == GammaBenchConfig(gammas=(1.0, 2.0), anchor_samples=16, out_dir=Path(tmp_path))

    args = parse("recovery", "--steps", "3", "--acc-limit", "0", "--seed", "7")
    assert config_from_args(RecoveryBenchConfig, args) == RecoveryBenchConfig(steps=3, acc_limit=0, seed=7)

    config = accuracy_config(parse("accuracy", "--limit", "50", "--sparsities", "0.2", "--mbpp-limit", "0"))
    assert (config.limit, config.sparsities, config.mbpp_limit) == (50, (0.2,), 0)
    assert config.allow_code_execution is False and set(config.best_gamma) <= {0.2}
    assert isinstance(config, AccuracyConfig)


# Each bench command's config; flags named `anchor-*` of quality fill its AnchorSpec.
CONFIGS = {
    "speed": SpeedBenchConfig,
    "gpu": GpuBenchConfig,
    "quality": QualityConfig,
    "gamma": GammaBenchConfig,
    "recovery": RecoveryBenchConfig,
    "accuracy": AccuracyConfig,
    "baselines": BaselinesConfig,
    "distill": DistillConfig,
    "scale": ScaleConfig,
    "scale-up": ScaleUpConfig,
    "serve": ServeConfig,
}
NOT_FIELDS = {
    "help",
    "report_only",
    "backfill_passes",
    "json",
    "ray",
}  # flags that steer the command, not the benchmark


def bench_parsers() -> dict[str, argparse.ArgumentParser]:
    (bench,) = [a for a in build_parser()._subparsers._group_actions if "bench" in a.choices]
    (sub,) = [a for a in bench.choices["bench"]._subparsers._group_actions]
    return dict(sub.choices)


def test_every_flag_default_is_its_config_fields_default():
    parsers = bench_parsers()
    assert set(parsers) == set(CONFIGS)
    checked = 0
    for name, parser in parsers.items():
        fields = {f.name: f for f in dataclasses.fields(CONFIGS[name])}
        defaults = vars(CONFIGS[name]())
        if name == "quality":
            defaults |= {f"anchor_{k}": v for k, v in vars(AnchorSpec()).items()}
        for action in parser._actions:
            if action.dest in NOT_FIELDS:
                continue
            assert action.dest in defaults, f"bench {name} {action.option_strings}: no config field {action.dest!r}"
            assert action.default == defaults[action.dest], (name, action.dest, action.default)
            assert type(action.default) is type(defaults[action.dest])
            checked += 1
        assert set(fields) >= {a.dest for a in parser._actions} - NOT_FIELDS - {"anchor_samples", "anchor_seq_len"}
    assert checked >= 60


def test_flags_are_typed_by_their_fields():
    @dataclasses.dataclass(frozen=True)
    class Config:
        names: tuple[str, ...] = ("a", "b")
        ratios: tuple[float, ...] = (0.5,)
        count: int | None = None
        out: Path = Path("x")
        loud: bool = False

    parser = argparse.ArgumentParser()
    add_config_flags(parser, Config, {"names": "", "ratios": "", "count": "how many", "out": "", "loud": ""})
    args = parser.parse_args(["--names", "c, d", "--ratios", "0.1,0.2", "--count", "3", "--out", "y", "--loud"])
    assert config_from_args(Config, args) == Config(("c", "d"), (0.1, 0.2), 3, Path("y"), True)
    assert config_from_args(Config, parser.parse_args([])) == Config()


def test_a_bad_list_is_refused_with_what_is_accepted(capsys):
    from nirvana.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["bench", "speed", "--sparsities", "0,half"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--sparsities" in err and "comma-separated list of float values" in err and "0.2,0.5" in err


def test_speed_and_gpu_flags_land_in_their_configs(tmp_path):
    args = parse("speed", "--sparsities", "0,0.3", "--batch-sizes", "1,4", "--out", str(tmp_path), "--dtype", "float32")
    assert speed_config(args) == SpeedBenchConfig(
        sparsities=(0.0, 0.3), batch_sizes=(1, 4), out=tmp_path, dtype="float32"
    )
    args = parse("gpu", "--tiny", "--repeats", "1")
    assert config_from_args(GpuBenchConfig, args) == GpuBenchConfig(tiny=True, repeats=1)


def test_every_grid_runs_on_a_ray_cluster_when_asked():
    """docs/SCALE.md "Past one machine": every grid takes --ray; gpu is one machine's table, scale starts its own, and
    scale-up measures each row's own peak memory in a fresh process on this machine."""
    parsers = bench_parsers()
    with_ray = {name for name, parser in parsers.items() if any(a.dest == "ray" for a in parser._actions)}
    assert with_ray == set(CONFIGS) - {"gpu", "scale", "scale-up", "serve"}
    assert parse("distill", "--ray", "auto").ray == "auto"
