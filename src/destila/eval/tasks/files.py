"""Writing a built-in task as an ordinary lm-evaluation-harness task folder: its data and its YAML."""

from __future__ import annotations

from pathlib import Path

import yaml

from destila.io import names_user_path, write_atomic
from destila.io.json_lines import json_lines
from destila.models import destila_home

_CANNOT_WRITE = ("{reason} at {root}, where the built-in task is written (under DESTILA_HOME unless a folder is given); "
                 "free space or fix permissions there, or set DESTILA_HOME to another folder")


def default_task_dir(name: str) -> Path:
    """``$DESTILA_HOME/tasks/NAME`` (``~/.cache/destila/tasks/NAME`` by default)."""
    return destila_home() / "tasks" / name


def write_task(folder: str | Path | None, name: str, template: Path, rows: list[dict]) -> Path:
    """Write ``NAME.jsonl`` (``rows``) and ``NAME.yaml`` into ``folder``; return the YAML's path.

    The YAML is ``template`` with its ``task`` set to ``name`` and its
    ``data_files`` pointing at the written data, so the folder is an
    ordinary harness task folder (``destila eval MODEL --tasks FOLDER`` or
    ``lm_eval --include_path FOLDER``). Each file is written under a
    temporary name and renamed: a reader never sees half a file.
    """
    folder = Path(folder) if folder is not None else default_task_dir(name)
    config = yaml.safe_load(template.read_text(encoding="utf-8"))
    data, task = folder / f"{name}.jsonl", folder / f"{name}.yaml"
    config["task"] = name
    config["dataset_kwargs"]["data_files"]["test"] = str(data.resolve())
    with names_user_path(folder, _CANNOT_WRITE):
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(data, json_lines(rows, ensure_ascii=False))
        write_atomic(task, yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return task
