"""Progress of a model evaluated in its own process, shown by the parent.

The child writes its latest state (``done total what``) to a small file,
replaced atomically; the parent polls it and drives a ``tqdm`` progress bar
(the one progress library of the project).
A pipe would do too, but the isolated-process runner keeps the child's
output for its error report, so a file is the one channel both sides own.

Naive equivalent: the child prints ``scoring 3/12`` lines to the terminal.
"""

from __future__ import annotations

import threading
from pathlib import Path

from destila.io import write_atomic


class ProgressFile:
    """The child's side: ``report(done, total, what)`` overwrites the file with the latest state."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None

    def __call__(self, done: int, total: int | None, what: str) -> None:
        if self.path is None:
            return
        write_atomic(self.path, f"{done} {total if total is not None else -1} {what}")


def read_progress(path: Path) -> tuple[int, int | None, str] | None:
    """``(done, total, what)`` from the file, or None before the child wrote any."""
    try:
        done, total, what = path.read_text().split(" ", 2)
    except (OSError, ValueError):
        return None
    return int(done), (None if int(total) < 0 else int(total)), what


def run_with_progress(run, path: Path, bar, label: str, poll_seconds: float = 0.3, succeeded=lambda result: True):
    """``run()`` in a thread while ``bar`` (a ``tqdm`` bar) shows ``path``'s state; its result. The bar ends at
    "done" only when ``succeeded(result)``; a failed run's bar says "failed" where it stopped."""
    _show(bar, None, None, f"{label}: starting")
    outcome = {}

    def target():
        try:
            outcome["result"] = run()
        except BaseException as err:  # noqa: BLE001 - raised again in the caller's thread below
            outcome["error"] = err

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(poll_seconds)
        state = read_progress(path)
        if state is not None:
            done, total, what = state
            _show(bar, done, total, f"{label}: {what}")
    if "error" not in outcome and succeeded(outcome["result"]):
        _show(bar, 1, 1, f"{label}: done")
    else:
        _show(bar, None, bar.total, f"{label}: failed")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _show(bar, done: int | None, total: int | None, description: str) -> None:
    """Set a tqdm bar's count, total (None: unknown) and description, then redraw it."""
    bar.total = total
    if done is not None:
        bar.n = done
    bar.set_description_str(description, refresh=False)
    bar.refresh()
