"""The library's one recovery run (`nirvana.recovery.run`), which the CLI and the app both call:
reproducible for a seed, the stop flag honoured, its summaries the ones the CLI prints and the app records."""

from __future__ import annotations

import threading

import pytest
import torch

from nirvana.recovery.config import RecoveryConfig
from nirvana.recovery.run import brief_summary, recover_and_save, run_recovery, saved_summary

SMALL = dict(r=2, alpha=4, batch_size=2, micro_batch_size=1, seq_len=16, eval_every=1, eval_sequences=2, lr=0.01)


@pytest.fixture(scope="module")
def pruned(pruned_tiny_dir):
    """The pruned tiny folder, loaded; one torch thread meanwhile (tiny matmuls gain nothing from more)."""
    from nirvana.checkpoints.loading import load_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_model(str(pruned_tiny_dir))
    torch.set_num_threads(threads)


def _weights(model) -> dict:
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_same_seed_gives_the_same_result_and_another_seed_does_not(pruned, corpus):
    before = _weights(pruned.model)
    runs = [
        run_recovery(pruned.model, pruned.tokenizer, RecoveryConfig(steps=3, seed=seed, **SMALL), str(corpus))
        for seed in (0, 0, 1)
    ]
    a, b, _ = runs
    assert a.complete and a.steps_done == 3 and a.train_loss == b.train_loss and a.heldout_loss == b.heldout_loss
    wa, wb, wc = (r.model.state_dict() for r in runs)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(not torch.equal(wa[k], wc[k]) for k in wa)  # the seed matters: the check above can fail
    assert all(torch.equal(v, before[k]) for k, v in pruned.model.state_dict().items())  # a copy was trained


def test_stop_flag_is_honoured_and_keeps_the_last_whole_step(pruned, corpus):
    config = RecoveryConfig(steps=6, **SMALL)
    stop = threading.Event()
    steps, lines = [], []

    def progress(step):
        steps.append(step)
        if step.step == 2:
            stop.set()  # what the app's Stop button does

    result = run_recovery(
        pruned.model, pruned.tokenizer, config, str(corpus), progress=progress, log=lines.append, should_stop=stop
    )
    assert result.status == "stopped" and result.steps_done == 2 and result.tokens_trained == 2 * 2 * 16
    assert max(s.step for s in steps) == 2
    assert any(line.startswith(f"training data: {corpus}") for line in lines)
    never = run_recovery(pruned.model, pruned.tokenizer, config, str(corpus), should_stop=lambda: True)
    assert never.status == "stopped" and never.steps_done == 0


def test_summaries_and_the_saved_folder(pruned, corpus, tmp_path):
    config = RecoveryConfig(steps=2, **SMALL)
    out = tmp_path / "rec"
    printed = recover_and_save(pruned.model, pruned.tokenizer, pruned.plan, config, str(corpus), out, base_model="x")
    assert {p.name for p in out.iterdir()} == {"model", "plan.json", "recovery.json", "report.json"}
    assert printed["out"] == str(out.resolve()) and printed["data"]["origin"] == str(corpus)
    result = run_recovery(pruned.model, pruned.tokenizer, config, str(corpus))
    brief = brief_summary(result)
    assert all(isinstance(v, (int, float, str)) or v is None for v in brief.values())  # the runs list shows it
    assert brief["data"] == str(corpus) and brief["steps_done"] == 2
    assert list(saved_summary(result, out)) == list(printed)  # the CLI's JSON keys, in its order
    assert brief["heldout_loss_before"] == printed["heldout_loss_before"]  # same seed, same data: same loss


def test_a_stopped_run_is_not_saved(pruned, corpus, tmp_path):
    from nirvana.errors import InvalidInput

    config = RecoveryConfig(steps=2, **SMALL)
    with pytest.raises(InvalidInput, match="did not finish"):
        recover_and_save(
            pruned.model, pruned.tokenizer, pruned.plan, config, str(corpus), tmp_path / "r", should_stop=lambda: True
        )
    assert not (tmp_path / "r").exists()
