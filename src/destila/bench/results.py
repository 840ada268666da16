"""Benchmark rows on disk: the machine they ran on, JSON lines and CSV.

Every row carries the machine, versions and command that produced it, so a
results file read alone says how to reproduce it.
"""

from __future__ import annotations

import csv
import os
import platform
import shlex
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from destila import __version__
from destila.bench.tables import loss_row_line
from destila.io.json_lines import append_json_line, start_json_lines, write_json_lines


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict:
    """Host, CPU, cores, RAM, the GPU (``None`` without CUDA), Python/torch/destila versions, the command line
    and the time (UTC)."""
    # torch loads in about a second (psutil with it): only when a result records its machine
    import psutil
    import torch

    program = os.path.basename(sys.argv[0])
    return {
        "host": platform.node(),
        "cpu": _cpu_model(),
        "cores": psutil.cpu_count(logical=True),
        "ram_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "destila": __version__,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        # `python -m destila bench …` runs as __main__.py: the command a reader retypes is `destila bench …`.
        "command": " ".join(shlex.quote(a) for a in ["destila" if program == "__main__.py" else program,
                                                    *sys.argv[1:]]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def write_jsonl(rows: list[dict], path: str | os.PathLike) -> None:
    """One JSON object per line."""
    write_json_lines(path, rows)



def row_printer(json_path: str | os.PathLike | None):
    """The ``on_row`` of a loss sweep: each row printed under :data:`~destila.bench.tables.LOSS_HEADER` and, with
    ``json_path``, appended to that file as it is measured (the file starts empty), so that a sweep stopped
    before its end (a time limit, a crash at a larger N) keeps the rows it finished."""
    if json_path:
        start_json_lines(json_path)

    def on_row(row: dict) -> None:
        print(loss_row_line(row), flush=True)
        if json_path:
            append_json_line(json_path, row)

    return on_row


def failed_rows_code(rows: list[dict], key: str) -> int:
    """The exit code of a benchmark command: 1, with one line per row on stderr, if a configuration crashed
    (status ``error`` or ``timeout``: it measured nothing, and a script running the command must see it), else
    0. ``oom``, ``skipped`` and ``unavailable`` are outcomes the rows report, not failures."""
    failed = [r for r in rows if r["status"] in ("error", "timeout")]
    for row in failed:
        where = f"{row[key]} at {row['seq_len']}" if "seq_len" in row else row[key]
        print(f"bench: {where}: {row['status']}: {row.get('error')}", file=sys.stderr)
    return 1 if failed else 0


def write_csv(rows: list[dict], path: str | os.PathLike) -> None:
    """The same rows as CSV; columns in first-seen order, lists joined with ``;``."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ";".join(f"{x:.6g}" for x in v) if isinstance(v, list) else v
                             for k, v in row.items()})


@dataclass
class OutputFiles:
    """Where a benchmark writes its rows: JSON, CSV and a PNG plot (each optional)."""

    json: str | None = field(default=None, metadata={"help": "write the rows as JSON", "metavar": "PATH"})
    csv: str | None = field(default=None, metadata={"help": "write the same rows as CSV", "metavar": "PATH"})
    plot: str | None = field(default=None, metadata={"help": "write a PNG plot", "metavar": "PATH"})
