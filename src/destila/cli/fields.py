"""Command-line flags generated from a config dataclass's fields: name, type, default, choices and help.

``transformers.HfArgumentParser`` does this for a whole parser; a verb of
``destila cache`` needs it for a sub-parser, with positional arguments and a
nested spec (:class:`~destila.cache.spec.BuildSpec` holds a
:class:`~destila.targets.spec.TargetSpec`), so this module adds one
dataclass's fields to an existing ``argparse`` parser instead. Nothing about
an option is written here: each flag reads its field's metadata
(``help``, ``choices``, ``aliases``, ``metavar``).

Naming: field ``seq_len`` is ``--seq-len`` (``--seq_len`` works too, as in
``destila train``). A bool field that defaults to True is turned off by
``--no-NAME`` (and by its aliases, e.g. ``--quiet``); one that defaults to
False is turned on by ``--NAME``. Every command's parser is a
:class:`destila.cli.parser.Parser`, which also accepts either spelling of a
flag declared by hand and answers an unknown flag with "did you mean".
"""

from __future__ import annotations

import argparse
import dataclasses
import typing


_SIMPLE = (bool, int, float, str)


def __getattr__(name: str):
    """``MODEL_HELP``, re-exported: every command that loads a model says it so. Imported on first use, since
    destila.models imports torch and this module serves ``destila train``'s parser before torch is imported."""
    if name == "MODEL_HELP":
        # destila.models imports torch: only when a command's parser asks for this help
        from destila.models import MODEL_HELP

        return MODEL_HELP
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _scalar_type(cls, name: str):
    """The flag's type from the field's annotation: ``int | None`` → int; anything else not simple → str."""
    hint = typing.get_type_hints(cls)[name]
    options = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    for simple in _SIMPLE:
        if simple in options:
            return simple
    return str


def add_fields(parser, cls, *, positional=(), exclude=(), only=None, prefix: str = "", defaults=None) -> None:
    """Add one argument per field of dataclass ``cls`` (minus ``exclude``; only ``only`` if given) to ``parser``.

    ``prefix``: flags and destinations named ``prefix + field`` (``prefix="teacher_"``: field
    ``device_map`` is ``--teacher-device-map``, read back by ``values_of(..., prefix="teacher_")``).
    Metadata read besides ``help``: ``flag`` (False: a Python-only field, no flag), ``choices``, ``metavar``, ``aliases``, ``nargs`` and ``const``
    (argparse's: several values, or a value that may be left out), ``type`` (a function reading the
    flag's text, for a field that is not a plain bool/int/float/str) and ``default_text`` (the
    default as the help shows it, when the value itself would not say it: bytes shown in GiB).
    ``defaults``: ``{field: value}`` this command uses instead of the field's default.
    """
    for f in _selected(cls, exclude, only):
        meta, value_type = dict(f.metadata), f.metadata.get("type") or _scalar_type(cls, f.name)
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        default = f.default if f.default is not dataclasses.MISSING else None
        if defaults and f.name in defaults:
            default, has_default = defaults[f.name], True
            meta.pop("default_text", None)
        help_text = meta.get("help", "")
        dest = prefix + f.name
        if f.name in positional:
            parser.add_argument(dest, metavar=meta.get("metavar", f.name.upper()), nargs=meta.get("nargs"),
                                help=help_text)
            continue
        dashed = "--" + dest.replace("_", "-")
        names = [*(a for a in meta.get("aliases", []) if a.startswith("-") and len(a) == 2), dashed]
        if "_" in dest:
            names.append("--" + dest)
        long_aliases = [a for a in meta.get("aliases", []) if a not in names]
        if value_type is bool:
            if default:
                names = ["--no-" + dest.replace("_", "-"), "--no_" + dest, *long_aliases]
                parser.add_argument(*names, dest=dest, action="store_false", default=True, help=help_text)
            else:
                parser.add_argument(*names, *long_aliases, dest=dest, action="store_true", help=help_text)
            continue
        # "%(default)s" where the value says it: a parser whose formatter adds defaults itself (HfArgumentParser's,
        # for `destila train`) sees it there and does not add it a second time.
        shown = meta.get("default_text", ",".join(map(str, default)) if isinstance(default, tuple) else "%(default)s")
        shown = f" (default: {shown})" if default is not None else ""
        parser.add_argument(
            *names, *long_aliases, dest=dest, type=value_type, default=default, required=not has_default,
            choices=meta.get("choices"), metavar=meta.get("metavar"), help=help_text + shown,
            **{k: meta[k] for k in ("nargs", "const") if k in meta},
        )


def _selected(cls, exclude, only) -> list[dataclasses.Field]:
    """The fields that are flags: minus ``exclude``, only ``only`` if given, never one whose metadata says
    ``"flag": False`` (a Python-only field, such as token ids already read)."""
    return [f for f in dataclasses.fields(cls) if f.name not in exclude and (only is None or f.name in only)
            and f.metadata.get("flag", True)]


def values_of(args: argparse.Namespace, cls, *, exclude=(), only=None, prefix: str = "") -> dict:
    """The parsed values of ``cls``'s fields (as :func:`add_fields` selected them), ready for ``cls(**values)``."""
    return {f.name: getattr(args, prefix + f.name) for f in _selected(cls, exclude, only)}


def given_flags(args: argparse.Namespace, cls, *, exclude=(), only=None, prefix: str = "") -> list[str]:
    """The flags of ``cls``'s fields (as :func:`add_fields` selected them) set to something other than their default."""
    given = []
    for f in _selected(cls, exclude, only):
        default = f.default if f.default is not dataclasses.MISSING else None
        if getattr(args, prefix + f.name, default) != default:
            given.append("--" + (prefix + f.name).replace("_", "-"))
    return given
