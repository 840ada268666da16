"""Markdown tables: one writer for every report, model card and generated doc table.

Naive equivalent::

    ["| " + " | ".join(header) + " |", "|---|---:|", *("| " + " | ".join(row) + " |" for row in rows)]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

_RULES = {"l": "---", "r": "---:"}


def table_lines(header: Sequence | None, rows: Iterable[Sequence], align: str | None = None, *,
                spaced_rule: bool = False) -> list[str]:
    """The lines of a markdown table: the header, the rule, one line per row (cells through ``str``).

    ``align``: one character per column, ``l`` (left) or ``r`` (right);
    default: the first column left, the others right. ``header=None``: a
    table whose columns have no names (markdown still needs the line:
    ``| | |``). ``spaced_rule``: ``| --- | ---: |`` instead of ``|---|---:|``.
    """
    width = len(align) if header is None else len(header)
    align = align or "l" + "r" * (width - 1)
    if len(align) != width or set(align) - set(_RULES):
        raise ValueError(f"align: expected {width} characters, each 'l' or 'r', found {align!r}")
    rule = [_RULES[a] for a in align]
    top = "|" + " |" * width if header is None else _line(header)
    return [top, _line(rule) if spaced_rule else "|" + "|".join(rule) + "|", *(_line(row) for row in rows)]


def markdown_table(header: Sequence | None, rows: Iterable[Sequence], align: str | None = None, *,
                   spaced_rule: bool = False) -> str:
    """:func:`table_lines` joined by newlines (no newline after the last row)."""
    return "\n".join(table_lines(header, rows, align, spaced_rule=spaced_rule))


def _line(cells: Sequence) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"
