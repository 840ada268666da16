"""Helpers for training tests (the tiny cache and fresh student fixtures live in tests/conftest.py)."""

from __future__ import annotations

import json

from conftest import TRAIN_DOCS as DOCS, TRAIN_SEQ_LEN as SEQ_LEN  # noqa: F401 (re-exported)


def read_log(path) -> dict[int, dict]:
    """The last logged training record per step (a resumed run logs some steps twice)."""
    records = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "loss" in record:
            records[record["step"]] = record
    return records
