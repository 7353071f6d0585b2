"""The bench commands' flags become their typed configs field by field (`config_from_args`)."""

from __future__ import annotations

from pathlib import Path

from nirvana.bench.accuracy import AccuracyConfig
from nirvana.bench.gamma import GammaBenchConfig
from nirvana.bench.quality_config import QualityConfig
from nirvana.bench.recovery import RecoveryBenchConfig
from nirvana.cli import build_parser
from nirvana.cli.bench_cmds import accuracy_config, gamma_config, quality_config
from nirvana.cli.common import config_from_args
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
