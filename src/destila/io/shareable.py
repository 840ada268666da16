"""Names fit for files that leave this machine: a local path becomes its last component.

A cache exported as a dataset, a model card and a training run's record are
meant to be uploaded; the absolute path of a folder on the machine that made
them (``/home/alice/runs/teacher``) means nothing elsewhere and says more
than it should. What stays: hub ids (``org/name``), the embedded default's
name, descriptions such as ``<6 documents given in Python>``. Naive
equivalent::

    Path(value).name if Path(value).is_absolute() or Path(value).exists() else value
"""

from __future__ import annotations

import os
from pathlib import Path


def is_local_path(value: str) -> bool:
    """True when ``value`` names a file or folder on this machine (absolute, ``./``/``~`` relative, or existing)."""
    text = str(value)
    if not text or text.startswith("<"):
        return False
    return os.path.isabs(text) or text.startswith((".", "~")) or Path(text).expanduser().exists()


def shareable_name(value):
    """``value`` with a local path reduced to its last component (a trailing ``/`` ignored); anything else as is."""
    if not isinstance(value, (str, Path)) or not is_local_path(str(value)):
        return value
    name = Path(str(value).rstrip("/")).expanduser().name
    return name or str(value)


def shareable(value):
    """``value`` (a JSON-like tree) with every local path reduced by :func:`shareable_name`."""
    if isinstance(value, dict):
        return {key: shareable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [shareable(item) for item in value]
    return shareable_name(value)


def relative_to(path, folder) -> str:
    """``path`` relative to ``folder`` (``../cache``): what a record inside ``folder`` says of a local path.

    Still names the same file from ``folder`` on this machine, and names nothing above the folders
    the two share."""
    return os.path.relpath(Path(path).expanduser().resolve(), Path(folder).expanduser().resolve())
