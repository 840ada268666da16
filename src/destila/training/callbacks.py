"""Trainer callbacks: every logged step as one JSON line in the output folder."""

from __future__ import annotations

import json
import time
from pathlib import Path

from transformers import TrainerCallback


class JsonlLogCallback(TrainerCallback):
    """Appends ``{"step", "epoch", "time", **logs}`` to ``path`` at every log (main process only).

    Lines are appended and flushed one by one, so a crash loses at most the
    line being written, and a resumed run continues the same file.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = {"step": state.global_step, "epoch": state.epoch, "time": time.time(), **logs}
        with self.path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
