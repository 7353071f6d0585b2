"""The shared helpers: atomic writes leave nothing partial, progress sub-ranges, the model's input device."""

from __future__ import annotations

import pytest
import torch

from nirvana.models.weights import input_device
from nirvana.progress import sub_progress
from nirvana.store.atomic import atomic_path, atomic_write_text


class Boom(RuntimeError):
    pass


def test_atomic_write_text_writes_and_replaces(tmp_path):
    path = tmp_path / "deep" / "a.json"
    assert atomic_write_text(path, "first") == path
    atomic_write_text(path, "second", fsync=True)
    assert path.read_text() == "second"
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.json"]  # no temporary sibling left


def test_a_file_write_that_raises_leaves_no_partial_file_and_keeps_the_old_one(tmp_path):
    path = tmp_path / "scores.json"
    with pytest.raises(Boom), atomic_path(path) as tmp:
        tmp.write_text("half of a new")
        raise Boom
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []

    atomic_write_text(path, "old, complete")
    with pytest.raises(Boom), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise Boom
    assert path.read_text() == "old, complete"
    assert [p.name for p in tmp_path.iterdir()] == ["scores.json"]


def test_a_folder_write_replaces_the_old_folder_or_leaves_it_untouched(tmp_path):
    target = tmp_path / "model"
    with atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text("{}")
    assert [p.name for p in target.iterdir()] == ["config.json"]

    with pytest.raises(Boom), atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "weights.safetensors").write_text("partial")
        raise Boom
    assert [p.name for p in target.iterdir()] == ["config.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"]

    with atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "new.json").write_text("{}")
    assert [p.name for p in target.iterdir()] == ["new.json"]  # the old folder's files are gone


def test_sub_progress_maps_into_the_range_and_prefixes():
    calls = []
    step = sub_progress(lambda f, m: calls.append((f, m)), 0.5, 0.75, "pruned: ")
    step(0.0, "start")
    step(1.0, "done")
    assert calls == [(0.5, "pruned: start"), (0.75, "pruned: done")]
    assert sub_progress(None, 0.0, 1.0) is None


def test_input_device_is_the_embedding_device(tiny_llama):
    assert input_device(tiny_llama) == torch.device("cpu")
