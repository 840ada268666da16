"""Command-line flags derived from a settings dataclass: one ``--flag`` per field, with the type, default,
choices and help declared once on the field."""

from __future__ import annotations

from dataclasses import MISSING, fields


def add_dataclass_flags(parser, spec_class) -> None:
    """Add ``--field-name`` for every field of ``spec_class`` (help from ``metadata["help"]``)."""
    for spec_field in fields(spec_class):
        default = spec_field.default if spec_field.default is not MISSING else None
        parser.add_argument(
            "--" + spec_field.name.replace("_", "-"), dest=spec_field.name, type=type(default), default=default,
            choices=spec_field.metadata.get("choices"),
            help=f"{spec_field.metadata.get('help', '')} (default: {default})",
        )


def dataclass_from_args(spec_class, args):
    """The ``spec_class`` instance the parsed flags describe (validated by its ``__post_init__``)."""
    return spec_class(**{f.name: getattr(args, f.name) for f in fields(spec_class)})
