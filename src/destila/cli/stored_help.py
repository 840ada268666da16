"""`destila train --help` without importing torch or transformers: the help as the live parser writes it, stored.

``destila train``'s flags are generated from ``transformers.TrainingArguments``
(:func:`destila.cli.train.build_parser`), and importing transformers takes
seconds. The help text that parser writes, at :data:`WIDTH` columns, is
stored beside this module with the versions of destila and transformers it
was written with; ``destila train --help`` prints it when both versions
match the installed ones, and builds the live parser otherwise. Options that
change the defaults the help shows (``--config``, ``--resume``) also take the
live parser. The parser's long flags are stored too, so a misspelt flag is
answered ("did you mean") before transformers is imported
(:func:`early_train_error`). A test compares the stored text and flags with
the live ones; after a change to the flags, write them again::

    python -m destila.cli.stored_help

Naive equivalent::

    print(build_parser().format_help())
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

STORED = Path(__file__).with_name("train_help.json")
WIDTH = 100
# Flags whose values change the defaults the help shows: the live parser answers.
_LIVE_FLAGS = ("--config", "--resume")


def versions() -> dict:
    """The installed versions the stored help depends on."""
    from destila import __version__

    try:
        transformers = version("transformers")
    except PackageNotFoundError:
        transformers = None
    return {"destila": __version__, "transformers": transformers}


def stored_train_help(argv: list[str]) -> str | None:
    """The stored help when ``argv`` (``destila train``'s arguments) asks for it and it is current, else None."""
    if not any(arg in ("-h", "--help") for arg in argv) or "--" in argv:
        return None
    if any(arg.partition("=")[0] in _LIVE_FLAGS for arg in argv):
        return None
    record = _current_record()
    return record["help"] if record is not None else None


def _current_record() -> dict | None:
    try:
        record = json.loads(STORED.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if record.get("versions") == versions() else None


def early_train_error(argv: list[str]) -> str | None:
    """What ``destila train ARGV`` prints for flags it does not know (usage, then the error line with "did you
    mean"), found from the stored flags; None when every flag is known, or a known one's abbreviation (argparse
    takes those), or the stored flags are not current."""
    from destila.cli.parser import unrecognized

    record = _current_record()
    if record is None or "flags" not in record:
        return None
    flags = record["flags"]
    known = {flag[2:].replace("-", "_") for flag in flags}
    unknown = []
    for arg in argv:
        if arg == "--":
            break
        name = arg.partition("=")[0]
        if not name.startswith("--"):
            continue
        key = name[2:].replace("-", "_")
        if key not in known and not any(k.startswith(key) for k in known):
            unknown.append(name)
    if not unknown:
        return None
    usage = record["help"].split("\n\n")[0]
    return f"{usage}\ndestila train: error: {unrecognized(unknown, flags)}\n"


def live_train_flags() -> list[str]:
    """The live parser's long flags, both spellings where it declares both."""
    from destila.cli.train import build_parser

    return sorted(build_parser()._long_flags())


def live_train_help() -> str:
    """The help the live parser writes at :data:`WIDTH` columns."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        from destila.cli.train import build_parser

        return build_parser().format_help()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def write_stored_help() -> None:
    record = {"versions": versions(), "width": WIDTH, "help": live_train_help(), "flags": live_train_flags()}
    from destila.io import write_atomic

    write_atomic(STORED, json.dumps(record, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    write_stored_help()
    print(f"wrote {STORED}", file=sys.stderr)
