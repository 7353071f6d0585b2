"""`prune --out` writes each file of its folder once (card, plans, report), with the content it had
when the CLI wrote the card a second time itself."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import nirvana.checkpoints.pruned as pruned_module
import nirvana.export.card as card
from nirvana.cli import main
from nirvana.pruning.plan import PruningPlan


def _prune(model_dir: Path, out: Path) -> dict:
    argv = ["prune", "--model", str(model_dir), "--criterion", "magnitude", "--sparsity", "0.5", "--align", "1"]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        assert main([*argv, "--out", str(out)]) == 0
    return json.loads(stdout.getvalue())


def test_prune_out_writes_card_plan_and_report_once(tiny_with_tokenizer_dir, tmp_path, monkeypatch):
    out = tmp_path / "out"
    cards, plans, texts = [], [], []
    real_render, real_save, real_write = card.render_model_card, PruningPlan.save, pruned_module.atomic_write_text

    def render(*args, **kwargs):
        cards.append(kwargs.get("repo_hint"))
        return real_render(*args, **kwargs)

    def save(self, path):
        plans.append(Path(path))
        return real_save(self, path)

    def write(path, text, **kwargs):
        texts.append(Path(path))
        return real_write(path, text, **kwargs)

    monkeypatch.setattr(card, "render_model_card", render)  # every card writer renders through it
    monkeypatch.setattr(PruningPlan, "save", save)
    monkeypatch.setattr(pruned_module, "atomic_write_text", write)
    printed = _prune(tiny_with_tokenizer_dir, out)

    assert cards == [str(out / "model")]  # one card, showing the folder it ends up in
    in_out = [p for p in plans if out in p.parents]
    assert len(in_out) == 2 and out / "plan.json" in in_out  # model/plan.json (in its temporary sibling) and plan.json
    assert [p for p in texts if p.name == "report.json"] == [out / "report.json"]
    report = json.loads((out / "report.json").read_text())
    assert list(report["timings"]) == ["load", "score", "plan", "slice", "save"]
    assert report["model"] == str(tiny_with_tokenizer_dir) and report["params_after"] == printed["params_after"]


def test_prune_out_files_hold_what_the_two_writes_held(tiny_with_tokenizer_dir, tmp_path):
    """The card is the one the CLI used to write over save_pruned's (the report's figures), the plans are
    the plan's JSON, and a second identical prune gives byte-identical files (report timings aside)."""
    out, again = tmp_path / "out", tmp_path / "again"
    _prune(tiny_with_tokenizer_dir, out)
    _prune(tiny_with_tokenizer_dir, again)
    plan = PruningPlan.load(out / "plan.json")
    assert (out / "plan.json").read_text() == (out / "model" / "plan.json").read_text() == plan.to_json()

    report = json.loads((out / "report.json").read_text())
    old = tmp_path / "old-model"  # what main's prune_cmds did after save_pruned: the card again, from the report
    shutil.copytree(out / "model", old)
    card.write_model_card(old, report, plan, base_model=str(tiny_with_tokenizer_dir), location=out / "model")
    text = (out / "model" / "README.md").read_text()
    assert text == (old / "README.md").read_text()
    assert f"| pruned from | {tiny_with_tokenizer_dir} |" in text

    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for name in files:
        if name == Path("model/README.md"):  # it names its own folder in the loading examples
            assert (again / name).read_text().replace(str(again), str(out)) == text
        elif name != Path("report.json"):
            assert (out / name).read_bytes() == (again / name).read_bytes(), name
