"""Trainer callbacks: every logged step as one JSON line in the output folder (and its reader)."""

from __future__ import annotations

import time
from pathlib import Path

from transformers import TrainerCallback

from destila.io.json_lines import append_json_line, read_json_lines
from destila.training.engines import describe_engine


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
        append_json_line(self.path, record)


class StopAfterSeconds(TrainerCallback):
    """Stops training once ``seconds`` of training have passed, saving a checkpoint at that step.

    For time-boxed runs (the demo): the number of steps reached is then
    known, and another run can be given exactly as many.
    """

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.start = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() - self.start >= self.seconds:
            control.should_training_stop = True
            control.should_save = True


class EngineReport(TrainerCallback):
    """Rank 0 prints and logs which engine really runs, and, after the first step, which way the loss ran.

    The line ``{"engine": "ddp", "world_size": 2, "backend": "gloo", ...}`` is
    the first record of ``log.jsonl``, so a run that was meant to be
    distributed and is not shows it in its own log; ``{"loss_path": "fused,
    precision exact ..., row math torch, chunk 1024 rows"}`` follows the
    first step, so a run that was meant to use the GPU kernels and did not
    says so too.
    """

    def __init__(self, trainer, path: str | Path):
        self.trainer, self.path = trainer, Path(path)
        self.engine: dict = {}
        self.loss_path: str | None = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.engine = describe_engine(self.trainer, model)
        if state.is_world_process_zero:
            print("train: " + ", ".join(f"{k} {v}" for k, v in self.engine.items()), flush=True)
            self._write({"step": state.global_step, "time": time.time(), **self.engine})

    def on_step_end(self, args, state, control, **kwargs):
        path = getattr(self.trainer, "loss_path", None)
        if self.loss_path is None and path is not None:
            self.loss_path = path
            if state.is_world_process_zero:
                print(f"train: loss {path}", flush=True)
                self._write({"step": state.global_step, "time": time.time(), "loss_path": path})

    def _write(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_json_line(self.path, record)


def read_training_log(path: str | Path, prefix: str = "") -> list[dict]:
    """The training records of a ``log.jsonl`` (the last one per step; evaluation records dropped), or
    with ``prefix="eval"`` the evaluation records (keys ``eval_kl``, ``eval_ppl``, ...) instead."""
    key = f"{prefix}_loss" if prefix else "loss"
    records = {}
    for record in read_json_lines(path):
        if key in record:
            records[record["step"]] = record
    return [records[step] for step in sorted(records)]
