"""An append-only journal of finished pieces of one long evaluation, so a stopped or killed run resumes.

A generation task (MBPP, HumanEval, GSM8K) is cached whole when it finishes (`nirvana.store.evalcache`);
on a big model one task is an hour or more, so each completion is also appended here as it is produced,
one JSON line `{"key": ..., "value": ...}` beside the result's cache file. A rerun under the same cache
key generates only the requests the journal lacks; the finished result replaces the journal. A line cut
short by a kill is ignored when read (its request is generated again).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def request_key(*args) -> str:
    """A stable key of one request's arguments (context and generation settings)."""
    return hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()


class Journal:
    """Key -> value lines appended to `path` (JSON lines), flushed to disk one by one."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def read(self) -> dict[str, object]:
        """Every complete line's key -> value (a torn or foreign line is skipped); {} without a file."""
        done: dict[str, object] = {}
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return done
        for line in lines:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("key"), str) and "value" in entry:
                done[entry["key"]] = entry["value"]
        return done

    def append(self, key: str, value) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps({"key": key, "value": value}) + "\n").encode()
        with self.path.open("a+b") as f:  # reads anywhere, writes at the end
            if f.seek(0, os.SEEK_END):
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    line = b"\n" + line  # after a torn line: start a fresh one
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
