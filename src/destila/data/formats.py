"""The data format read from the source's fields, as TRL's trainers detect it.

A spec that names no field (the default ``text_field="text"``) over a source
without a ``text`` field is read by what it holds instead: ``messages``
(conversations, loss on assistant turns) or ``prompt`` + ``completion``
(loss on completions). A source with a ``text`` field, or a spec naming its
fields, is read as given. Naive equivalent::

    columns = first_row.keys()
    if "text" not in columns and "messages" in columns: spec.messages_field = "messages"
    elif "text" not in columns and {"prompt", "completion"} <= columns: spec.prompt_field, ... = ...
"""

from __future__ import annotations

from destila.data.spec import DEFAULT_LOSS_ON, DEFAULT_PACKING, DataSpec

DEFAULT_TEXT_FIELD = "text"


def detect_format(spec: DataSpec) -> DataSpec:
    """``spec`` with the fields of its source's format when it names none; else ``spec`` unchanged."""
    from destila.data.sources import PYDOC, _load, column_names, quiet_datasets

    if spec.kind != "text" or spec.text_field != DEFAULT_TEXT_FIELD or spec.source == PYDOC:
        return spec
    try:
        with quiet_datasets():
            names = set(column_names(_load(spec)) or [])
    except (OSError, ValueError):
        return spec  # the source cannot be read now: reading it for the store reports why, or a built store is reused
    if DEFAULT_TEXT_FIELD in names:
        return spec
    if "messages" in names:
        return _as_kind(spec, "messages", messages_field="messages")
    if {"prompt", "completion"} <= names:
        return _as_kind(spec, "prompt_completion", prompt_field="prompt", completion_field="completion")
    return spec  # the missing "text" field is reported with the fields found


def _as_kind(spec: DataSpec, kind: str, **fields) -> DataSpec:
    """``spec`` read as ``kind``: the kind's default loss positions and packing where the spec has plain text's."""
    keep = {name: getattr(spec, name) for name, defaults in (("loss_on", DEFAULT_LOSS_ON), ("packing", DEFAULT_PACKING))
            if getattr(spec, name) != defaults["text"]}
    return spec.replace(**fields, loss_on=keep.get("loss_on"), packing=keep.get("packing"))
