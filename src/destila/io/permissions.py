"""Files destila writes get the permissions any file the user creates would get.

safetensors writes ``model.safetensors`` with mode 0600 (owner only) while
everything else beside it is 0644 under the usual umask, so a student or a
trained model could not be read by the user's other accounts (a shared
server, a container running as another user).

Naive equivalent: ``chmod 0644 FOLDER/*`` (with the umask applied).
"""

from __future__ import annotations

import os
from pathlib import Path


def current_umask() -> int:
    mask = os.umask(0)  # the only portable way to read it is to set it
    os.umask(mask)
    return mask


def readable_by_all(folder: Path) -> None:
    """Give every file directly in ``folder`` mode ``0666 & ~umask`` (0644 under the usual umask 022)."""
    mode = 0o666 & ~current_umask()
    for path in Path(folder).iterdir():
        if path.is_file() and not path.is_symlink():
            os.chmod(path, mode)
