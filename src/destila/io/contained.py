"""Is a path inside a folder once every symbolic link is followed? For files a folder someone else wrote names.

A cache is shared data: its folder may hold a symbolic link (``shard-….safetensors
-> /home/you/.ssh/id_rsa``, ``tokenizer -> /somewhere``) that would make a
reader hash, read or copy a file outside it. Every file a cache names is
checked with :func:`outside_link` before it is opened. Links that stay inside
the folder are harmless and allowed.

Naive equivalent: ``Path(path).resolve().is_relative_to(Path(folder).resolve())``.
"""

from __future__ import annotations

import os


def outside_link(folder: str | os.PathLike, path: str | os.PathLike) -> str | None:
    """Where ``path`` really leads when a symbolic link on the way takes it outside ``folder``; else None.

    None for a path inside ``folder`` (links included, as long as they stay
    inside) and for a path that does not exist (the caller reports it
    missing). ``folder`` itself may be a link (a cache kept on another disk).
    """
    real_folder = os.path.realpath(folder)
    real = os.path.realpath(path)
    if os.path.commonpath([real_folder, real]) == real_folder:
        return None
    if not os.path.lexists(path):
        return None
    return real
