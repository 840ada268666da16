"""The cache's copy of the teacher's tokenizer: written safely, fingerprinted, checked.

A student trained from a cache ships the cache's ``tokenizer/`` folder, so
an edited file there (two tokens swapped in ``tokenizer.json``) would train
and ship a model whose ids mean something else. At build time every file of
the copy is hashed into the manifest (``tokenizer_files``: relative name →
SHA-256); :func:`tokenizer_faults` compares the folder with that record
(``cache verify``), :func:`check_tokenizer_files` refuses a mismatch
(``TopKCache``, hence ``train`` and ``eval``).

The copy is staged in ``.tokenizer.tmp-RANDOM`` and renamed into place. A
build killed or failing mid-copy (say, on a full disk) leaves that folder
behind; the next build of the same folder deletes every such leftover first
(it holds the folder's lock, so no other build is copying), so retries never
pile up copies and a build needs no more space than a fresh one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path

from destila.cache.format import TOKENIZER_DIR
from destila.io import create_staging_dir, outside_link, publish_folder, remove_staging_leftovers, reported_os_error

log = logging.getLogger("destila.cache")


def file_digests(folder: Path) -> dict[str, str]:
    """``{relative posix name: sha256}`` of every file under ``folder`` (sorted by name)."""
    folder = Path(folder)
    digests = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digests[path.relative_to(folder).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def tokenizer_class(folder: Path) -> str | None:
    """The ``tokenizer_class`` a tokenizer folder's ``tokenizer_config.json`` names, or None."""
    try:
        return json.loads((folder / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return None


def tokenizer_faults(cache: Path, recorded: dict[str, str]) -> list[str]:
    """One line per difference between ``cache/tokenizer/`` and the manifest's ``recorded`` digests.

    A cache written before digests were recorded (``recorded`` empty) is only
    checked for the folder's presence.
    """
    folder = Path(cache) / TOKENIZER_DIR
    restore = "run the same `destila cache build` command again to restore it from the teacher"
    outside = sorted({link for p in [folder, *_entries(folder)] if (link := outside_link(cache, p)) is not None})
    if outside:  # read nothing through it: the tokenizer a student ships would come from elsewhere
        return [f"{TOKENIZER_DIR}/: a symbolic link leads outside the cache folder (to {outside[0]}); a cache reads "
                f"only its own files: {restore}"]
    if not (folder / "tokenizer_config.json").is_file():
        return [f"{TOKENIZER_DIR}/: the tokenizer copied from the teacher is missing at {folder}; {restore}"]
    if not recorded:
        return []
    found = file_digests(folder)
    faults = []
    for name in sorted(set(recorded) | set(found)):
        if name not in found:
            faults.append(f"{TOKENIZER_DIR}/{name}: missing at {folder / name}; {restore}")
        elif name not in recorded:
            faults.append(f"{TOKENIZER_DIR}/{name}: not part of the tokenizer recorded at build time "
                          f"({folder / name}); remove it")
        elif found[name] != recorded[name]:
            faults.append(
                f"{TOKENIZER_DIR}/{name}: changed since the build at {folder / name} (manifest sha256 "
                f"{recorded[name][:16]}…, file {found[name][:16]}…); {restore}"
            )
    return faults


def _entries(folder: Path) -> list[Path]:
    """Everything under ``folder`` (links not followed into), or nothing when it is not a folder."""
    if folder.is_symlink() or not folder.is_dir():
        return []
    return sorted(folder.rglob("*"))


def check_tokenizer_files(cache: Path, recorded: dict[str, str]) -> None:
    """Raise ``ValueError`` naming the first tokenizer file that differs from the build's record."""
    faults = tokenizer_faults(cache, recorded)
    if faults:
        more = f" (and {len(faults) - 1} more; see `destila cache verify {cache}`)" if len(faults) > 1 else ""
        raise ValueError(faults[0] + more)


def copy_tokenizer(tokenizer, output: Path, recorded: dict[str, str]) -> dict[str, str]:
    """Make ``output/tokenizer/`` the teacher's tokenizer; return its digests for the manifest.

    Nothing is written when the folder already matches ``recorded``. The
    caller holds the cache folder's lock.
    """
    output = Path(output)
    target = output / TOKENIZER_DIR
    if target.is_symlink():  # never written by a build (see tokenizer_faults): replaced by a real copy
        target.unlink()
    if recorded and target.is_dir() and not tokenizer_faults(output, recorded):
        return recorded
    remove_staging_leftovers(target)  # from killed or failed builds: ours to delete
    staging = None
    try:
        staging = create_staging_dir(target)
        tokenizer.save_pretrained(staging)
        digests = file_digests(staging)
        if target.exists():
            log.info("%s does not match the manifest's record: copied again from the teacher", target)
            shutil.rmtree(target)
        publish_folder(staging, target)
    except BaseException as err:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        # tokenizers' Rust writer says "(os error 28)" and names no file; Python's names the staging copy
        reported = reported_os_error(err, target) if isinstance(err, Exception) else None
        if reported is not None:
            raise reported from err
        raise
    return digests
