"""The on-policy recipe's per-round table: in the terminal (rich) and in ``report.md``."""

from __future__ import annotations

import json

from destila.io.markdown import table_lines

# (key, column title, format)
COLUMNS = [
    ("round", "round", "{}"),
    ("kl_to_teacher", "KL", "{:.4f}"),
    ("perplexity", "ppl", "{:.2f}"),
    ("top1_agreement", "top-1", "{:.3f}"),
    ("samples", "samples", "{}"),
    ("generate_tokens_per_second", "gen tok/s", "{:.0f}"),
    ("sample_seconds", "sample s", "{:.1f}"),
    ("teacher_seconds", "teacher s", "{:.1f}"),
    ("train_seconds", "train s", "{:.1f}"),
    ("steps", "steps", "{}"),
]


def cells(row: dict) -> list[str]:
    return ["–" if row.get(key) is None else fmt.format(row[key]) for key, _, fmt in COLUMNS]


def table(rows: list[dict], title: str):
    # rich: only when a table is printed
    from rich.table import Table

    out = Table(title=title)
    for _, name, _ in COLUMNS:
        out.add_column(name, justify="right")
    for row in rows:
        out.add_row(*cells(row))
    return out


def markdown(report: dict) -> str:
    """``report.md``: the settings, then one row per round (round 0 is the starting student)."""
    lines = [f"# destila {report['title']} report", "", "Held-out metrics are on the student's own answers to "
             "held-out prompts, scored by the teacher: KL to the teacher over its top-K buckets, perplexity of the "
             "answers, top-1 agreement with the teacher. Times are in seconds. Round 0 is the starting student.", "",
             *table_lines([name for _, name, _ in COLUMNS], [cells(row) for row in report["rounds"]],
                          "l" * len(COLUMNS))]
    lines += ["", f"Final student: `{report['student']}`", "", "Settings:", "", "```json",
              json.dumps(report["settings"], indent=2), "```", ""]
    return "\n".join(lines)
