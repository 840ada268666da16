"""Task accuracy of evaluated models side by side: each metric ± its standard error, ratio to the first model."""

from __future__ import annotations

from pathlib import Path

from destila.io.markdown import markdown_table


def task_rows(results: list[dict]) -> list[tuple[str, list[str]]]:
    """``(label, cells)`` per task metric (``"task: metric"``), then per task its question count.

    A cell is ``value ± stderr`` (the harness's standard error), with
    ``(×ratio)`` to the first model's value for every other model; ``–``
    where a model has no such figure.
    """
    tasks = list(dict.fromkeys(task for r in results for task in r.get("tasks", {})))
    rows = []
    for task in tasks:
        metrics = list(dict.fromkeys(m for r in results for m in r.get("tasks", {}).get(task, {}).get("metrics", {})))
        for metric in metrics:
            base = results[0].get("tasks", {}).get(task, {}).get("metrics", {}).get(metric)
            cells = []
            for result in results:
                figure = result.get("tasks", {}).get(task, {}).get("metrics", {}).get(metric)
                if figure is None:
                    cells.append("–")
                    continue
                cell = f"{figure['value']:.3f}"
                if figure["stderr"] is not None:
                    cell += f" ± {figure['stderr']:.3f}"
                if result is not results[0] and base is not None and base["value"]:
                    cell += f" (×{figure['value'] / base['value']:.2f})"
                cells.append(cell)
            rows.append((f"{task}: {metric}", cells))
        counts = [result.get("tasks", {}).get(task, {}).get("samples") for result in results]
        if any(c is not None for c in counts):
            rows.append((f"{task}: questions", ["–" if c is None else f"{c:,}" for c in counts]))
    if any(r.get("chat_template_applied") for r in results):
        rows.append(("chat template", ["yes" if r.get("chat_template_applied") else "no" for r in results]))
    return rows


def _name(result: dict) -> str:
    return Path(result["model"]).name or result["model"]


def render_task_table(results: list[dict], title: str = "task accuracy (lm-evaluation-harness)"):
    """A ``rich`` table: task metrics as rows, models as columns."""
    # rich: only when a table is printed
    from rich.table import Table

    table = Table(title=title)
    table.add_column("task: metric")
    for result in results:
        table.add_column(_name(result), justify="right")
    for label, cells in task_rows(results):
        table.add_row(label, *cells)
    return table


def markdown_task_table(results: list[dict]) -> str:
    """The same comparison as :func:`render_task_table`, as a Markdown table."""
    names = [_name(r) for r in results]
    return markdown_table(["task: metric", *names], [(label, *cells) for label, cells in task_rows(results)])
