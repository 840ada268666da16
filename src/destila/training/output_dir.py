"""Owning a training output folder: one writer, one run, resumed only from its own checkpoints.

``destila train -o OUT`` writes checkpoints, ``log.jsonl`` and the final
model into ``OUT``. Without care, a second run into the same folder
overwrites the model, appends to the first run's log and leaves the first
run's ``checkpoint-N`` beside its own, where a later ``--resume`` would pick
it up. So:

- the folder records its run: ``destila_run.json`` holds a random run id,
  and every checkpoint gets the same file written *last* (by
  :class:`RunRecordCallback`), which makes it the checkpoint's completion
  mark too;
- a folder that holds a run is refused unless ``resume`` (continue that
  run) or ``overwrite`` (delete it and start again) is given; a non-empty
  folder without ``destila_run.json`` (a model folder, a copy of the
  teacher, another program's run) is not destila's and is refused outright,
  whatever the flags, and so is an output folder that is, or holds, one of
  the run's inputs (``train S -o S``);
- a new run that fails before its first checkpoint (a damaged cache found at
  the first step, say) removes what it wrote (:meth:`OutputClaim.undo`), so
  the same command runs again once the cause is fixed;
- ``OUT/.lock`` is an ``flock`` held for the whole run: a second writer fails
  at once, and the kernel drops the lock when the process dies (even by
  SIGKILL), so a lock is never stale;
- resuming takes the newest checkpoint stamped with the folder's run id,
  deletes newer, unfinished ones, and cuts ``log.jsonl`` back to the steps
  up to that checkpoint, which the resumed run does not log again: each
  step appears once.

Under ``torchrun`` only the main process claims, locks and cleans; the
others only read the result (callers run :func:`claim_output_dir` inside
``args.main_process_first()``).
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from transformers import TrainerCallback

from destila.io import exclusive_lock, write_atomic
from destila.io.json_lines import json_lines, read_json_lines
from destila.io.permissions import readable_by_all
from destila.models import SAVE_INCOMPLETE
from destila.training.objective import check_resumed

RUN_FILE = "destila_run.json"
LOCK_FILE = ".lock"
LOG_FILE = "log.jsonl"
CHECKPOINT_PREFIX = "checkpoint-"
# Files a run leaves once it has trained (besides checkpoints): their presence means "a run was here".
# A run record alone (a run that failed before its first step) is not one: the folder is reused.
_RUN_TRACES = (LOG_FILE, "model.safetensors", "trainer_state.json", "training_args.bin")
# Files only a training run writes (a model folder has none of them).
_TRAINING_TRACES = (LOG_FILE, "trainer_state.json", "training_args.bin")
# Files of a final save (or of one begun): a run that wrote them is not undone.
_FINAL_FILES = ("model.safetensors", "adapter_model.safetensors", "trainer_state.json", SAVE_INCOMPLETE)


@dataclass
class OutputClaim:
    """What :func:`claim_output_dir` decided: the run id, the checkpoint to resume (or None), the lock."""

    path: Path
    run_id: str
    checkpoint: str | None = None
    resumed_steps: int = 0
    notes: list[str] = field(default_factory=list)
    lock: object = None
    objective: dict | None = None  # what the resumed run recorded (see destila.training.objective)
    fresh: bool = False  # a new run (not a resumed one): undone by undo() while it has no checkpoint
    created: bool = False  # the claim created the folder

    def undo(self) -> None:
        """Remove what a new run wrote, while it has no checkpoint and no final model; main process only.

        A run refused at its first step (a damaged cache, a NaN loss) would
        otherwise leave ``destila_run.json`` and ``log.jsonl``, and the same
        command, once the cause is fixed, would be refused as "already holds
        a training run".
        """
        if self.lock is None or not self.fresh or _checkpoints(self.path):
            return
        if any((self.path / name).exists() for name in _FINAL_FILES):
            return
        for name in (RUN_FILE, LOG_FILE):
            (self.path / name).unlink(missing_ok=True)
        if [p.name for p in self.path.iterdir()] == [LOCK_FILE]:
            (self.path / LOCK_FILE).unlink()  # held by us: a waiting writer rechecks the file it locked
            if self.created:
                self.path.rmdir()

    def release(self) -> None:
        if self.lock is not None:
            self.lock.close()
            self.lock = None


def claim_output_dir(out: str | Path, *, resume: bool | str | None = False, overwrite: bool = False,
                     is_main: bool = True, objective: dict | None = None, inputs: dict | None = None) -> OutputClaim:
    """Make ``out`` ready for a run: lock it, refuse another run's folder, pick the checkpoint to resume.

    ``resume``: True (the newest checkpoint of this folder's run) or a
    checkpoint path. ``objective`` (:func:`destila.training.objective.objective_of`)
    is recorded with a new run; a resume that would change it is refused
    before anything in ``out`` changes, and a resumed claim carries the
    recorded one in ``claim.objective``. ``inputs`` (``{"student": path, ...}``)
    may not be ``out`` or lie inside it. Raises ``ValueError``/``FileExistsError``
    with the fix when ``out`` cannot be used as asked.
    """
    out = Path(out)
    if resume and overwrite:
        raise ValueError("train: --resume continues the run in the output folder, --overwrite deletes it; give one")
    if not is_main:
        return _follow(out, resume)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"train: the output {out} is a file; choose a new or empty folder for the run")
    _refuse_inputs_inside(out, inputs or {})
    others = sorted(p.name for p in out.iterdir() if p.name not in (LOCK_FILE, RUN_FILE)) if out.is_dir() else []
    if others and read_run_record(out) is None:
        raise FileExistsError(_not_a_run(out, others))
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    lock = _lock(out)
    try:
        claim = _decide(out, resume, overwrite, objective)
    except BaseException:
        lock.close()
        raise
    claim.lock, claim.created = lock, created
    return claim


def _not_a_run(out: Path, others: list[str]) -> str:
    """Why a non-empty folder without a run record is refused, whatever --resume or --overwrite say."""
    shown = ", ".join(others[:5]) + (" …" if len(others) > 5 else "")
    if any((out / name).exists() for name in _TRAINING_TRACES) or _checkpoints(out):
        return (f"train: the output folder holds training files at {out} ({shown}) but no {RUN_FILE}, so destila "
                "cannot tell that its own training wrote them (an older destila, or another program); neither "
                "--resume nor --overwrite touches it: move it away yourself, or choose another -o")
    return (f"train: the output folder is not empty at {out} ({shown}) and is not a destila training run (it has "
            f"no {RUN_FILE}); --overwrite deletes only what destila's training wrote: choose a new or empty folder")


def _refuse_inputs_inside(out: Path, inputs: dict) -> None:
    """Refuse ``out`` when it is, or holds, one of the run's input files or folders (writing, or --overwrite, would
    replace or delete them)."""
    root = out.expanduser().resolve()
    for what, value in inputs.items():
        if not isinstance(value, (str, Path)) or not Path(value).expanduser().exists():
            continue  # a hub name, a list of texts, nothing given
        real = Path(value).expanduser().resolve()
        if real == root or root in real.parents:
            raise ValueError(
                f"train: the output folder {out} {'is' if real == root else 'holds'} the {what} ({value}); a run "
                "writes its checkpoints and final model there (and --overwrite empties it): choose another -o")


def _decide(out: Path, resume, overwrite: bool, objective: dict | None) -> OutputClaim:
    record = read_run_record(out)
    if overwrite:  # a folder holding destila's run record (claim_output_dir refused any other non-empty one)
        for item in out.iterdir():
            if item.name != LOCK_FILE:
                shutil.rmtree(item) if item.is_dir() and not item.is_symlink() else item.unlink()
        return _new_run(out, [f"train: deleted the previous run in {out} (--overwrite)"], objective)
    if not _holds_run(out):
        return _new_run(out, [f"train: no run to resume in {out}; starting from the beginning"] if resume else [],
                        objective)
    if not resume:
        raise FileExistsError(
            f"train: the output folder already holds a training run at {out} ({_describe_run(out)}); "
            "pass --resume to continue it, --overwrite to delete it and start again, or choose another -o"
        )
    if objective is not None:  # before the log is cut back to the checkpoint: a refused resume changes nothing
        check_resumed(record.get("objective"), objective, out)
    run_id = record["run_id"]
    if resume is True:
        checkpoint = newest_checkpoint(out, run_id)
        _delete_unfinished_checkpoints(out, run_id, checkpoint)
    else:
        checkpoint = str(resume)
        _check_explicit(Path(checkpoint), out, run_id)
    steps = _step_of(Path(checkpoint)) if checkpoint else 0
    cut_log(out / LOG_FILE, steps)
    notes = [] if checkpoint else [f"train: no complete checkpoint in {out}; starting from the beginning"]
    return OutputClaim(out, run_id, checkpoint, steps, notes, objective=record.get("objective"))


def _follow(out: Path, resume) -> OutputClaim:
    """A non-main process: the main process has claimed ``out``; read its decision."""
    record = read_run_record(out) or {}
    run_id = record.get("run_id", "")
    checkpoint = None
    if resume is True:
        checkpoint = newest_checkpoint(out, run_id)
    elif resume:
        checkpoint = str(resume)
    return OutputClaim(out, run_id, checkpoint, _step_of(Path(checkpoint)) if checkpoint else 0)


def _lock(out: Path):
    return exclusive_lock(
        out / LOCK_FILE,
        f"train: another `destila train` is writing to {out} (its lock {out / LOCK_FILE} is held); "
        "wait for it to finish, stop it, or choose another -o",
    )


def _new_run(out: Path, notes: list[str], objective: dict | None = None) -> OutputClaim:
    run_id = uuid.uuid4().hex
    write_run_record(out, run_id, **({"objective": objective} if objective is not None else {}))
    return OutputClaim(out, run_id, None, 0, notes, fresh=True)


def write_run_record(folder: Path, run_id: str, **extra) -> None:
    payload = {"run_id": run_id, "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra}
    write_atomic(Path(folder) / RUN_FILE, json.dumps(payload, indent=1).encode())


def read_run_record(folder: Path) -> dict | None:
    try:
        record = json.loads((Path(folder) / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("run_id"), str) else None


def _holds_run(out: Path) -> bool:
    return any((out / name).exists() for name in _RUN_TRACES) or bool(_checkpoints(out))


def _checkpoints(out: Path) -> list[Path]:
    found = [p for p in out.glob(f"{CHECKPOINT_PREFIX}*") if p.is_dir() and p.name[len(CHECKPOINT_PREFIX):].isdigit()]
    return sorted(found, key=_step_of)


def _step_of(checkpoint: Path) -> int:
    tail = checkpoint.name[len(CHECKPOINT_PREFIX):]
    return int(tail) if tail.isdigit() else 0


def _finished_by(checkpoint: Path, run_id: str) -> bool:
    record = read_run_record(checkpoint)
    return record is not None and record["run_id"] == run_id and _files_intact(checkpoint, record.get("files"))


def checkpoint_files(checkpoint: Path) -> dict[str, int]:
    """``{relative path: size}`` of every file of a checkpoint but its run record."""
    return {str(p.relative_to(checkpoint)): p.stat().st_size for p in sorted(checkpoint.rglob("*"))
            if p.is_file() and p.name != RUN_FILE}


def _files_intact(checkpoint: Path, files: dict | None) -> bool:
    """Every file the stamp listed is still there, whole: the Trainer deletes an older checkpoint after writing
    a newer one and before the newer one is stamped, and a kill in between leaves the older one part-deleted."""
    if files is None:  # stamped before the file list was recorded
        return True
    try:
        return all((checkpoint / name).stat().st_size == size for name, size in files.items())
    except OSError:
        return False


def newest_checkpoint(out: Path, run_id: str) -> str | None:
    """The newest ``checkpoint-N`` of run ``run_id`` that was completely written (its run record exists)."""
    for checkpoint in reversed(_checkpoints(out)):
        if _finished_by(checkpoint, run_id):
            return str(checkpoint)
    return None


def _delete_unfinished_checkpoints(out: Path, run_id: str, kept: str | None) -> None:
    """Checkpoints after ``kept`` (written when the run died) or without this run's stamp are not resumable."""
    limit = _step_of(Path(kept)) if kept else -1
    for checkpoint in _checkpoints(out):
        if _step_of(checkpoint) > limit or not _finished_by(checkpoint, run_id):
            shutil.rmtree(checkpoint)


def _check_explicit(checkpoint: Path, out: Path, run_id: str) -> None:
    if not (checkpoint / "trainer_state.json").is_file():
        raise FileNotFoundError(f"train: --resume: no checkpoint at {checkpoint} (no trainer_state.json)")
    if checkpoint.resolve().parent == out.resolve() and not _finished_by(checkpoint, run_id):
        raise ValueError(
            f"train: --resume: the checkpoint at {checkpoint} was not completely written by this folder's run; "
            "pass --resume alone to take the newest complete one"
        )


def _describe_run(out: Path) -> str:
    steps = sorted({r["step"] for r in read_log_records(out / LOG_FILE) if "loss" in r})  # training records
    checkpoints = [p.name for p in _checkpoints(out)]
    parts = [f"steps {steps[0]}–{steps[-1]} logged" if steps else "no steps logged"]
    parts.append(f"checkpoints {', '.join(checkpoints)}" if checkpoints else "no checkpoint")
    if (out / "model.safetensors").exists():
        parts.append("a final model")
    return ", ".join(parts)


def read_log_records(path: Path) -> list[dict]:
    """The JSON lines of ``path`` (a line cut short by a crash is skipped; an unreadable file has none)."""
    try:
        return read_json_lines(path, skip_damaged=True)
    except OSError:
        return []


def cut_log(path: Path, last_step: int) -> None:
    """Keep the records of steps ``≤ last_step`` (atomically): a resumed run logs the later ones again.

    Naive equivalent: ``[r for r in records if r["step"] <= last_step]``.
    """
    if not path.exists():
        return
    kept = [r for r in read_log_records(path) if r.get("step", 0) <= last_step]
    write_atomic(path, json_lines(kept).encode())


WRITE_FAILURE = ("{reason} at {path}; the checkpoints already complete in {root} are intact: free space (or make "
                 "the folder writable), then run the same command with --resume")
"""The line for a disk that fails mid-run (:func:`destila.io.names_user_path`): what, where, and that ``--resume``
continues."""


class RunRecordCallback(TrainerCallback):
    """Stamps each checkpoint with the run id, last, so an unfinished checkpoint has no stamp."""

    def __init__(self, run_id: str):
        self.run_id = run_id

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            checkpoint = Path(args.output_dir) / f"{CHECKPOINT_PREFIX}{state.global_step}"
            if checkpoint.is_dir():
                readable_by_all(checkpoint)
                write_run_record(checkpoint, self.run_id, step=state.global_step, files=checkpoint_files(checkpoint))
