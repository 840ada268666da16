"""JSON lines: one JSON object per line, appended as records are made, so that an interrupted run keeps
every record it finished (a benchmark's rows, a training log).

- :func:`json_lines`: the text of some records, for a caller that writes it
  its own way (atomically, or with one ``os.write`` and an ``fsync``).
- :func:`start_json_lines` / :func:`append_json_line`: a file grown one
  record at a time.
- :func:`read_json_lines`: every record back; ``skip_damaged`` drops a line
  a crash cut short instead of failing on it.

Naive equivalent::

    with open(path, "a") as f: f.write(json.dumps(record) + "\\n")
    [json.loads(line) for line in open(path) if line.strip()]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path


def json_lines(records: Iterable[dict], *, ensure_ascii: bool = True) -> str:
    """``records`` as JSON-lines text: one ``json.dumps`` per record, each line ending in ``\\n``.

    ``ensure_ascii=False`` keeps non-ASCII characters as they are (text a
    user reads); the default escapes them, as ``json.dumps`` does.
    """
    return "".join(json.dumps(record, ensure_ascii=ensure_ascii) + "\n" for record in records)


def start_json_lines(path: str | os.PathLike) -> Path:
    """An empty file at ``path`` (its folder made), ready for :func:`append_json_line`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    return path


def append_json_line(path: str | os.PathLike, record: dict) -> None:
    """``record`` as one line at the end of ``path`` (created if missing), flushed before returning."""
    with open(path, "a") as handle:
        handle.write(json_lines([record]))


def write_json_lines(path: str | os.PathLike, records: Iterable[dict]) -> None:
    """``path`` holding exactly ``records`` (its folder made; an old file replaced, not atomically)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json_lines(records))


def read_json_lines(path: str | os.PathLike, *, skip_damaged: bool = False) -> list[dict]:
    """Every record of ``path``, in order (blank lines skipped).

    ``skip_damaged``: a line that is not JSON (the last one, when a kill cut
    a write short) is left out instead of raising ``ValueError``.
    """
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            if not skip_damaged:
                raise
    return records
