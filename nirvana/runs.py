"""The runs folder: every prune or eval run on disk, written atomically so nothing is lost.

Layout under the runs root (`NIRVANA_RUNS_DIR`, default `<cache>/runs`):

    <root>/<run id>/run.json        kind, created/finished (UTC ISO), settings, summary, files
    <root>/<run id>/plan.json       the PruningPlan (prune runs)
    <root>/<run id>/scores.json     a reference to the scores used (criterion, fingerprint, calibration, cache path)
    <root>/<run id>/report.json     what the CLI prints / the app shows
    <root>/<run id>/metrics.json    timings and measured figures
    <root>/.tmp-<run id>/           a run being written (or one that was killed midway)

A run is written into `.tmp-<id>/` and renamed to `<id>/` only after `run.json` (written last)
is in place, so a run that is interrupted, even by SIGKILL, never looks complete:
`list_runs()` shows only renamed folders that hold a readable `run.json`.

    with new_run("prune", settings={"sparsity": 0.5}) as run:
        run.save_plan(plan)
        run.write_json("report.json", report)
        run.summary = {"achieved_block_sparsity": 0.49}
    list_runs()[0].id == run.id

or in one call: `record_run("eval", settings=..., report=..., metrics=..., summary=...)`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from nirvana.errors import CorruptCheckpoint, InvalidInput, NirvanaError
from nirvana.pruning.plan import PruningPlan, load_plan
from nirvana.store.atomic import atomic_write_text
from nirvana.store.paths import cache_dir

RUNS_ENV = "NIRVANA_RUNS_DIR"
RUN_FILE = "run.json"
TMP_PREFIX = ".tmp-"
RUN_SCHEMA_VERSION = 1
_ID = re.compile(r"^[0-9]{8}T[0-9]{12}Z-[a-z0-9_]{1,32}-[0-9a-f]{6}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$")


class RunNotFound(NirvanaError):
    """No completed run with that id under the runs root."""


def runs_root(root: str | Path | None = None) -> Path:
    """`root`, else `NIRVANA_RUNS_DIR`, else `<cache>/runs`."""
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get(RUNS_ENV)
    if env:
        return Path(env).expanduser()

    return cache_dir() / "runs"


def _now() -> datetime:
    return datetime.now(UTC)


def new_run_id(kind: str) -> str:
    """`<UTC time to the microsecond>-<kind>-<6 hex>`: sortable by creation and unique across processes."""
    if not re.fullmatch(r"[a-z0-9_]{1,32}", kind):
        raise InvalidInput(f"run kind must be 1-32 lower-case letters, digits or _, got {kind!r}.")
    return f"{_now():%Y%m%dT%H%M%S%f}Z-{kind}-{secrets.token_hex(3)}"


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, default=str))


class RunWriter:
    """A run being written into `<root>/.tmp-<id>/`; `commit()` renames it into place."""

    def __init__(self, kind: str, *, root: str | Path | None = None, settings: dict | None = None):
        self.kind = kind
        self.id = new_run_id(kind)
        self.root = runs_root(root)
        self.created = _now()
        self.settings = dict(settings or {})
        self.summary: dict = {}
        self.final_path = self.root / self.id
        self.path = self.root / f"{TMP_PREFIX}{self.id}"
        self.path.mkdir(parents=True)
        # Who is writing: lets clean_incomplete() tell a killed run from one still in progress.
        _write_json(self.path / "owner.json", {"pid": os.getpid(), "created": self.created.isoformat()})
        self.committed = False

    def _file(self, name: str) -> Path:
        if not _NAME.fullmatch(name) or name in (RUN_FILE, "owner.json"):
            raise InvalidInput(f"run file name {name!r} is not allowed; use a plain name like report.json.")
        return self.path / name

    def write_json(self, name: str, obj) -> Path:
        path = self._file(name)
        _write_json(path, obj)
        return path

    def write_text(self, name: str, text: str) -> Path:
        path = self._file(name)
        path.write_text(text)
        return path

    def save_plan(self, plan: PruningPlan) -> Path:
        return plan.save(self._file("plan.json"))

    def save_scores_ref(self, metadata: dict, cache_path: str | Path | None = None) -> Path:
        """A reference to the scores (not the tensors): criterion, fingerprint, calibration, cache path."""
        keep = ("criterion", "fingerprint", "calibration", "attn_shape", "mlp_shape", "meta")
        ref = {k: metadata[k] for k in keep if k in metadata}
        ref["cache_path"] = str(cache_path) if cache_path else None
        return self.write_json("scores.json", ref)

    def commit(self) -> Path:
        """Write `run.json` last, then rename the folder into place (atomic on one filesystem)."""
        files = sorted(p.name for p in self.path.iterdir() if p.name != "owner.json")
        (self.path / "owner.json").unlink(missing_ok=True)
        record = {
            "schema_version": RUN_SCHEMA_VERSION,
            "id": self.id,
            "kind": self.kind,
            "created": self.created.isoformat(),
            "finished": _now().isoformat(),
            "settings": self.settings,
            "summary": self.summary,
            "files": files,
        }
        atomic_write_text(self.path / RUN_FILE, json.dumps(record, indent=2, default=str), fsync=True)
        os.replace(self.path, self.final_path)  # fails rather than overwrite: ids are unique
        self.committed = True
        return self.final_path

    def abort(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


@contextlib.contextmanager
def new_run(kind: str, *, root: str | Path | None = None, settings: dict | None = None) -> Iterator[RunWriter]:
    """Write a run; it is committed when the block ends normally and deleted if it raises."""
    writer = RunWriter(kind, root=root, settings=settings)
    try:
        yield writer
    except BaseException:
        writer.abort()
        raise
    writer.commit()


def record_run(
    kind: str,
    *,
    settings: dict | None = None,
    summary: dict | None = None,
    plan: PruningPlan | None = None,
    report: dict | None = None,
    metrics: dict | None = None,
    scores: dict | None = None,
    root: str | Path | None = None,
) -> str:
    """Write a whole run in one call (what the app does after a prune or an evaluation); return its id.

    `scores` is `Scores.metadata()` (a reference, not the tensors).
    """
    with new_run(kind, root=root, settings=settings) as run:
        if plan is not None:
            run.save_plan(plan)
        if scores is not None:
            run.save_scores_ref(scores)
        for name, obj in (("report.json", report), ("metrics.json", metrics)):
            if obj is not None:
                run.write_json(name, obj)
        run.summary = dict(summary or {})
    return run.id


@dataclass
class RunInfo:
    """One completed run as `list_runs` shows it."""

    id: str
    kind: str
    created: str
    finished: str
    summary: dict
    settings: dict
    path: Path


@dataclass
class Run(RunInfo):
    """A reopened run: its plan, report, metrics and scores reference (None when not written)."""

    plan: PruningPlan | None = None
    report: dict | None = None
    metrics: dict | None = None
    scores: dict | None = None
    files: list[str] = field(default_factory=list)


def _read_record(folder: Path) -> dict:
    data = json.loads((folder / RUN_FILE).read_text())
    if not isinstance(data, dict) or data.get("id") != folder.name:
        raise ValueError("run.json does not describe this folder")
    return data


def _info(folder: Path, data: dict) -> RunInfo:
    return RunInfo(
        data["id"], data.get("kind", "?"), data.get("created", ""), data.get("finished", ""),
        data.get("summary") or {}, data.get("settings") or {}, folder,
    )  # fmt: skip


def list_runs(root: str | Path | None = None, kind: str | None = None) -> list[RunInfo]:
    """Completed runs, newest first. Folders being written, killed midway or unreadable are skipped."""
    base = runs_root(root)
    if not base.is_dir():
        return []
    runs = []
    for folder in base.iterdir():
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        try:
            info = _info(folder, _read_record(folder))
        except (OSError, ValueError, KeyError):
            continue
        if kind is None or info.kind == kind:
            runs.append(info)
    return sorted(runs, key=lambda r: (r.created, r.id), reverse=True)


def open_run(run_id: str, root: str | Path | None = None) -> Run:
    """Reopen a completed run by id: its plan, report, metrics and scores reference."""
    base = runs_root(root)
    if not isinstance(run_id, str) or not _ID.fullmatch(run_id):
        raise InvalidInput(f"{run_id!r} is not a run id (like 20260101T120000000000Z-prune-a1b2c3); see list_runs().")
    folder = base / run_id
    if not (folder / RUN_FILE).exists():
        raise RunNotFound(f"no completed run {run_id!r} under {str(base)!r}; list_runs() shows the completed ones.")
    try:
        data = _read_record(folder)
        loaded = {}
        for name in ("report", "metrics", "scores"):
            path = folder / f"{name}.json"
            loaded[name] = json.loads(path.read_text()) if path.exists() else None
    except (OSError, ValueError) as exc:
        raise CorruptCheckpoint(f"run {run_id!r} in {str(base)!r} is unreadable ({exc}); delete its folder.") from exc
    plan = load_plan(folder / "plan.json") if (folder / "plan.json").exists() else None
    info = _info(folder, data)
    return Run(**vars(info), plan=plan, files=list(data.get("files", [])), **loaded)


def incomplete_runs(root: str | Path | None = None) -> list[Path]:
    """Folders of runs that never completed (still running, or killed midway)."""
    base = runs_root(root)
    return sorted(p for p in base.glob(f"{TMP_PREFIX}*") if p.is_dir()) if base.is_dir() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_incomplete(root: str | Path | None = None) -> list[Path]:
    """Delete incomplete run folders whose writer process is gone; return what was deleted."""
    removed = []
    for folder in incomplete_runs(root):
        try:
            pid = int(json.loads((folder / "owner.json").read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            pid = None
            if time.time() - folder.stat().st_mtime < 60:  # its writer may not have written owner.json yet
                continue
        if pid is None or not _alive(pid):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed
