"""JSON lines: one JSON object per line, appended as records are made, so that an interrupted run keeps
every record it finished (a benchmark's rows, a training log).

Naive equivalent::

    with open(path, "a") as f: f.write(json.dumps(record) + "\n")
    [json.loads(line) for line in open(path) if line.strip()]
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def start_json_lines(path: str | os.PathLike) -> Path:
    """An empty file at ``path`` (its folder made), ready for :func:`append_json_line`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    return path


def append_json_line(path: str | os.PathLike, record: dict) -> None:
    """``record`` as one line at the end of ``path``, flushed before returning."""
    with open(path, "a") as handle:
        handle.write(json.dumps(record) + "\n")


def read_json_lines(path: str | os.PathLike) -> list[dict]:
    """Every record of ``path`` (blank lines skipped)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
