"""`recover` and `prune --recover-steps` on tiny model folders; every bad input exits 2, no traceback."""

from __future__ import annotations

import json

import pytest
import torch

from nirvana.cli import main

FAST = ["--batch-size", "2", "--micro-batch", "1", "--seq-len", "16", "--r", "4", "--eval-every", "1", "--threads", "1"]


def test_recover_then_eval_works_on_the_output(capsys, pruned_tiny_dir, corpus, tmp_path):
    from nirvana.checkpoints.loading import load_model
    from nirvana.models.shapes import model_shape

    out = tmp_path / "rec"
    argv = [
        "recover",
        "--model",
        str(pruned_tiny_dir),
        "--steps",
        "3",
        "--data",
        str(corpus),
        *FAST,
        "--out",
        str(out),
    ]
    assert main([*argv, "--save-adapter"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["status"] == "complete" and summary["steps_done"] == 3 and summary["tokens_trained"] == 3 * 2 * 16
    assert summary["data"]["origin"] == str(corpus) and summary["tokens_per_second"] > 0
    assert {p.name for p in out.iterdir()} == {"adapter", "model", "plan.json", "recovery.json", "report.json"}
    report = json.loads((out / "report.json").read_text())
    assert report["criterion"] == "random" and report["recovery"]["steps_done"] == 3
    base, recovered = load_model(str(pruned_tiny_dir)), load_model(str(out))
    assert model_shape(recovered.model).intermediate == model_shape(base.model).intermediate
    assert recovered.plan == base.plan
    ids = torch.arange(10)[None]
    with torch.no_grad():
        assert not torch.equal(base.model(ids).logits, recovered.model(ids).logits)
    assert (
        main(["eval", "--model", str(out), "--ppl", str(corpus), "--seq-len", "16", "--max-tokens", "64", "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["ppl"][str(corpus)]["ppl"] > 1


def test_prune_with_recover_steps_chains_both(capsys, tiny_with_tokenizer_dir, corpus, tmp_path):
    out = tmp_path / "pr"
    argv = ["prune", "--model", str(tiny_with_tokenizer_dir), "--criterion", "random", "--sparsity", "0.5"]
    recover = ["--recover-steps", "2", "--recover-data", str(corpus), "--recover-batch-size", "2"]
    recover += ["--recover-micro-batch", "1", "--recover-seq-len", "16", "--recover-r", "4"]
    assert main([*argv, "--align", "1", *recover, "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["recovery"]["steps_done"] == 2 and report["recovery"]["status"] == "complete"
    assert {p.name for p in out.iterdir()} == {"model", "plan.json", "recovery.json", "report.json"}
    assert json.loads((out / "report.json").read_text())["target_sparsity"] == 0.5


def _fails(capsys, argv, *needles):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err.replace("\n", " "), err
    return err


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--steps", "0"], ["--steps must be a positive integer"]),
        (["--steps", "-5"], ["--steps must be a positive integer"]),
        (["--steps", "2", "--lr", "0"], ["lr 0.0 is outside (0, 0.1]"]),
        (["--steps", "2", "--lr", "-0.001"], ["must be positive"]),
        (["--steps", "2", "--lr", "3"], ["lr 3.0 is outside", "1e-4"]),
        (["--steps", "2", "--r", "64"], ["r=64 is larger than layer", "Use r <="]),
        (["--steps", "2", "--targets", "q_proj,lm_head"], ["target_modules"]),
        (["--steps", "2", "--batch-size", "3", "--micro-batch", "2"], ["not a multiple"]),
    ],
)
def test_bad_settings_exit_2(capsys, pruned_tiny_dir, corpus, tmp_path, extra, needles):
    out = tmp_path / "rec"
    args = ["--seq-len", "16", "--batch-size", "2", "--micro-batch", "1"]
    if "--batch-size" in extra:
        args = ["--seq-len", "16"]
    _fails(
        capsys,
        ["recover", "--model", str(pruned_tiny_dir), *args, "--data", str(corpus), *extra, "--out", str(out)],
        *needles,
    )
    assert not out.exists()


def _data_file(tmp_path, kind):
    if kind == "missing":
        return tmp_path / "nope.jsonl"
    path = (
        tmp_path
        / {"empty": "e.txt", "binary": "b.txt", "unknown": "d.csv", "badjson": "x.json", "norows": "r.jsonl"}[kind]
    )
    content = {
        "empty": b"   \n\n",
        "binary": b"\x00\x01\x02PK\x03\x04" * 20,
        "unknown": b"a,b\n1,2\n",
        "badjson": b'{"instruction": ',
        "norows": b'{"question": "what?"}\n',
    }[kind]
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    "kind, needles",
    [
        ("missing", ["does not exist", "Accepted training data"]),
        ("empty", ["is empty"]),
        ("binary", ["looks binary"]),
        ("unknown", ["unknown format (.csv)", ".jsonl"]),
        ("badjson", ["not valid JSON"]),
        ("norows", ["neither a string 'instruction' nor a 'text' field"]),
    ],
)
def test_bad_data_files_exit_2(capsys, pruned_tiny_dir, tmp_path, kind, needles):
    out = tmp_path / "rec"
    data = _data_file(tmp_path, kind)
    _fails(
        capsys,
        ["recover", "--model", str(pruned_tiny_dir), "--steps", "2", "--data", str(data), "--out", str(out)],
        *needles,
    )
    assert not out.exists()


def test_training_on_an_evaluation_split_is_refused(capsys, pruned_tiny_dir, tmp_path):
    from nirvana.data.text import data_dir

    out = tmp_path / "rec"
    base = ["recover", "--model", str(pruned_tiny_dir), "--steps", "2", "--out", str(out), "--data"]
    _fails(capsys, [*base, "wikitext2"], "evaluation split (wikitext2:test)", "calibration")
    _fails(capsys, [*base, "ptb"], "evaluation split (ptb:validation)")
    test_file = data_dir() / "wikitext-2-raw" / "wiki.test.raw"
    if test_file.exists():
        copy = tmp_path / "my_notes.txt"  # the test split under another name
        copy.write_text(test_file.read_text()[:200_000])
        _fails(capsys, [*base, str(copy)], "overlaps the evaluation file wiki.test.raw")
    assert not out.exists()


def test_unloadable_model_exits_2(capsys, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    for model in (str(tmp_path / "missing-model"), str(broken)):
        _fails(capsys, ["recover", "--model", model, "--steps", "2", "--data", "pydoc", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_out_is_a_file_exits_2(capsys, pruned_tiny_dir, tmp_path):
    out = tmp_path / "file"
    out.write_text("x")
    _fails(capsys, ["recover", "--model", str(pruned_tiny_dir), "--steps", "2", "--out", str(out)], "is a file")


def test_interrupt_leaves_no_output(capsys, pruned_tiny_dir, corpus, tmp_path, monkeypatch):
    import nirvana.recovery.train as train

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "heldout", interrupted)
    out = tmp_path / "rec"
    code = main(
        [
            "recover",
            "--model",
            str(pruned_tiny_dir),
            "--steps",
            "2",
            "--data",
            str(corpus),
            *FAST,
            "--out",
            str(out),
        ]
    )
    assert code == 130 and "nothing partial was kept" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob(".rec*"))


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--recover-steps", "0"], "--recover-steps must be a positive integer"),
        (["--recover-steps", "2", "--recover-lr", "7"], "lr 7.0 is outside"),
        (["--recover-steps", "2", "--recover-data", "/no/such/file.jsonl"], "does not exist"),
    ],
)
def test_prune_recover_settings_fail_before_scoring(
    capsys, tiny_with_tokenizer_dir, tmp_path, monkeypatch, extra, needle
):
    import nirvana.scoring.criteria as criteria

    monkeypatch.setattr(criteria, "compute_scores", lambda *a, **k: pytest.fail("scored before validating"))
    argv = ["prune", "--model", str(tiny_with_tokenizer_dir), "--sparsity", "0.5", *extra, "--out", str(tmp_path / "o")]
    _fails(capsys, argv, needle)
    assert not (tmp_path / "o").exists()


def test_token_budget_rounds_up_to_whole_steps(capsys, pruned_tiny_dir, corpus, tmp_path):
    out = tmp_path / "rec"
    argv = [
        "recover",
        "--model",
        str(pruned_tiny_dir),
        "--tokens",
        "40",
        "--data",
        str(corpus),
        *FAST,
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps_done"] == 2 and summary["tokens_trained"] == 64  # ceil(40 / (2 x 16)) steps
