"""Whether a name that is no local path can be a hub id (``org/name``): one test for data, caches and commands.

A source that is neither a file nor a folder is taken as a hub id only when it looks like one: one or two
non-empty parts, no leading ``.`` or ``~`` and no file suffix. Light (no third-party import), so
``destila train`` can refuse a missing ``--cache`` before it imports torch.
"""

from __future__ import annotations

from pathlib import Path


def looks_like_hub_name(source: str) -> bool:
    parts = source.split("/")
    return 1 <= len(parts) <= 2 and all(parts) and not source.startswith((".", "~")) and not Path(source).suffix


def missing_cache_problem(source) -> str | None:
    """The line for a ``--cache`` that is no folder here and cannot be a hub dataset id, else None."""
    if Path(str(source)).expanduser().is_dir():
        return None
    if str(source).startswith((".", "/", "~")) or not looks_like_hub_name(str(source)):
        return (f"cache: no such folder: {source}; expected a cache folder, an export folder "
                "or a hub dataset id such as 'org/name'")
    return None
