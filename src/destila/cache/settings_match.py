"""Data options given beside a cache, compared with the settings the cache was built with.

A cache holds its sequences already, so the data options of online training
(``--seq-len``, ``--packing``, TRL's ``max_length``, ``packing``, ...) cannot
change them. Given anyway, an option that equals the cache's setting says
nothing new and is accepted; one that differs is refused, naming both values,
because training would silently run on other rows than the ones asked for.

Naive equivalent::

    problems = [name for name, value in given.items() if manifest.data[name] != value]
"""

from __future__ import annotations

from pathlib import Path

# Options that decide nothing about the rows (how the corpus was tokenised, not what it became).
_NOT_SETTINGS = ("num_proc",)


def _settings(manifest) -> dict:
    """The data settings a cache was built with: its DataSpec description, ``data`` as the source."""
    settings = dict(getattr(manifest, "data", None) or {})
    settings.setdefault("seq_len", manifest.seq_len)
    settings["data"] = settings.pop("source", None)
    return settings


def _same_source(given, built) -> bool:
    if str(given) == str(built):
        return True
    mine, theirs = Path(str(given)).expanduser(), Path(str(built or "")).expanduser()
    return mine.exists() and theirs.exists() and mine.resolve() == theirs.resolve()


def settings_problems(given: dict, manifest, where: str) -> list[str]:
    """One line per option of ``given`` (``{option: (name as the user spelt it, value)}``) that differs from the
    cache's setting, or that the cache does not record; ``[]`` when every one equals the cache's."""
    settings, problems = _settings(manifest), []
    for option, (spelt, value) in given.items():
        if option in _NOT_SETTINGS or option not in settings:
            problems.append(f"{spelt} {value!r} (the cache in {where} records no such setting; drop it)")
            continue
        built = settings[option]
        same = _same_source(value, built) if option == "data" else value == built
        if not same:
            problems.append(f"{spelt} {value!r} (the cache in {where} was built with {option} {built!r})")
    return problems
