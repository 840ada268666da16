"""The line of a data file that a record-level failure came from.

``datasets`` reads a file into Arrow and hands the encoder batches of
records without their line numbers, so a record the encoder refuses (a
message without text, ``messages`` given as a string) or bytes that are not
UTF-8 surface without saying where. :func:`located` reads the local file
again, line by line, only on this error path, and names the first line at
fault::

    data: /data/chats.jsonl, line 7: field 'messages', message 2 (role 'assistant') has no content; ...

Naive equivalent: ``for n, line in enumerate(open(path), 1): check(json.loads(line))`` before any reading.
"""

from __future__ import annotations

import json
from pathlib import Path



class RecordError(ValueError):
    """One record of the data is unusable (raised by the encoders); :func:`located` finds its line in the file."""


def located(spec, err: Exception, record_fault) -> Exception:
    """``err`` (a :class:`RecordError` or ``UnicodeDecodeError``) as one ``ValueError`` naming the file and line.

    ``record_fault(record, spec)``: what the encoders refuse in one record, or None
    (:func:`destila.data.render.record_fault`)."""
    path = Path(str(spec.source)).expanduser()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
    for file in files:
        where = _first_fault(file, spec, record_fault if isinstance(err, RecordError) else None)
        if where is not None:
            return ValueError(f"data: {file}, {where}")
    if isinstance(err, UnicodeDecodeError):
        return ValueError(f"data: {spec.source} holds bytes that are not UTF-8 text ({err.reason} at byte "
                          f"{err.start} of a record); expected UTF-8 files; convert it")
    if len(files) == 1:  # a format without lines of its own (.json, .parquet, .csv): the file, at least
        return ValueError(f"data: {files[0]}: {str(err).removeprefix('data: ')}")
    return err


def _first_fault(file: Path, spec, record_fault) -> str | None:
    """``line N: <why>`` for the first line of ``file`` that is not UTF-8 or whose record ``record_fault``
    refuses (None: the bytes only), or None."""
    json_lines = file.suffix.lower() in (".jsonl", ".json")
    with open(file, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as bad:
                return f"line {number}: not UTF-8 text ({bad.reason} at byte {bad.start} of the line); convert it"
            if record_fault is None or not json_lines or not text.strip():
                continue
            try:
                record = json.loads(text)
            except ValueError:
                # a .json document over several lines: its records have no line of their own
                return _record_in_array(file, spec, record_fault) if record_fault is not None else None
            if isinstance(record, list) and number == 1:  # a .json array on one line
                return _record_in_array(file, spec, record_fault)
            if isinstance(record, dict):
                fault = record_fault(record, spec)
                if fault is not None:
                    return f"line {number}: {fault.removeprefix('data: ')}"
    return None


def _record_in_array(file: Path, spec, record_fault) -> str | None:
    """``record N of the JSON array: <why>`` for the first record of a ``.json`` file holding one array of
    records that ``record_fault`` refuses (counted from 1), or None."""
    try:
        records = json.loads(file.read_text(encoding="utf-8"))
    except ValueError:
        return None
    for number, record in enumerate(records if isinstance(records, list) else [], start=1):
        fault = record_fault(record, spec) if isinstance(record, dict) else None
        if fault is not None:
            return f"record {number} of the JSON array: {fault.removeprefix('data: ')}"
    return None
