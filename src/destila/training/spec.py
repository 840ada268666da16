"""`TrainSpec`: what one ``destila train`` run is asked for, declared once and checked in ``__post_init__``.

``destila train`` fills one from its flags (the student, the targets' source,
``--resume``; the Trainer's options are its ``args``, a
:class:`~destila.training.DistillationArguments`), and Python callers pass the
same object to :func:`~destila.training.train_student`::

    args = DistillationArguments(output_dir="out", max_steps=200, learning_rate=5e-4)
    train_student(TrainSpec("student/", "out", args, cache="cache/"))                       # offline
    train_student(TrainSpec("student/", "out", args, teacher="smollm2", data="pydoc"))      # online

The fields of the command's own flags carry their help here;
:func:`destila.cli.fields.add_fields` turns them into flags. A field whose
metadata says ``"flag": False`` is for Python callers only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from destila.crosstok.alignment_dir import check_alignment_dir
from destila.data import DataSpec, as_data_spec
from destila.models import MODEL_HELP
from destila.training.arguments import DistillationArguments


@dataclass
class TrainSpec:
    """The student, its output folder and Trainer arguments, and where its targets come from."""

    student: str = field(metadata={
        "help": "student folder (e.g. from `destila student init`)", "nargs": "?", "metavar": "STUDENT"})
    out: str | Path = field(metadata={
        "flag": False, "help": "the run's folder: checkpoints, log.jsonl, the trained student (args.output_dir)"})
    args: DistillationArguments | None = field(default=None, metadata={
        "flag": False, "help": "the Trainer's and the loss's options (default: DistillationArguments(output_dir=out))"})
    cache: str | Path | None = field(default=None, metadata={
        "help": "offline: a cache from `destila cache build`, its export (`destila cache export`) or a hub dataset "
                "id of one (from Python also a datasets.Dataset of cache rows)"})
    teacher: str | None = field(default=None, metadata={"help": "online: " + MODEL_HELP})
    teacher_gguf_file: str | None = field(default=None, metadata={
        "help": "online: GGUF file name inside the teacher folder"})
    data: DataSpec | str | list | None = field(default=None, metadata={
        "help": "online: 'pydoc', 'stdlib', a .txt/.jsonl/.parquet/.csv file, a folder, or a datasets hub name "
                "(from Python also a DataSpec, or a list of documents)"})
    teacher_placement: dict | None = field(default=None, metadata={
        "flag": False, "help": "online: the teacher's device_map, max_memory and offload_folder "
                               "(destila.models.load_causal_lm's keywords), for a teacher larger than one device"})
    resume: bool | str | None = field(default=None, metadata={
        "help": "continue the run in the output folder from its newest complete checkpoint, or from CHECKPOINT",
        "nargs": "?", "const": True, "type": str, "metavar": "CHECKPOINT"})
    alignment_dir: str | Path | None = field(default=None, metadata={
        "help": "offline, a student with another tokenizer than the cache's: where the cache aligned to its "
                "tokens is stored, written once and read by every run given the same folder (default: "
                "OUT/alignment)", "metavar": "DIR"})
    eval_cache: str | Path | None = field(default=None, metadata={
        "flag": False, "help": "held-out sequences: a cache of other documents (offline, with args.eval_fraction 0)"})
    eval_sequences: int | None = field(default=None, metadata={
        "flag": False, "help": "score only the first this many sequences of eval_cache"})

    def __post_init__(self) -> None:
        if self.student is None:
            raise ValueError("train: the student is required (a folder from `destila student init`)")
        self.out = Path(self.out)
        if self.args is None:
            self.args = DistillationArguments(output_dir=str(self.out))
        if Path(self.args.output_dir).resolve() != self.out.resolve():
            raise ValueError(f"train: args.output_dir is {self.args.output_dir} but out is {self.out}; they must agree")
        if (self.cache is None) == (self.teacher is None) or (self.teacher is not None and self.data is None):
            raise ValueError("train: give either a cache (offline), or a teacher and data (online)")
        if self.data is not None:
            self.data = as_data_spec(self.data)
        if self.cache is not None and self.data is not None:
            raise ValueError("train: data goes with an online teacher; a cache already holds its data: drop one")
        if self.teacher_placement is not None:  # the command line gives every key, unset ones as None
            self.teacher_placement = {k: v for k, v in self.teacher_placement.items() if v is not None} or None
        stray = [name for name in ("teacher_gguf_file", "teacher_placement") if getattr(self, name) is not None]
        if self.teacher is None and stray:
            raise ValueError(f"train: {stray[0]} is about the online teacher; training from a cache loads none: "
                             "drop it")
        if self.alignment_dir is not None and self.cache is None:
            raise ValueError("alignment_dir: where a cache aligned to the student's tokenizer is stored; online "
                             "training has no cache: drop --alignment-dir")
        if self.alignment_dir is not None:  # never a folder that is the cache's, the student's, or another's
            check_alignment_dir(self.alignment_dir, cache=self.cache, student=self.student)
        if self.eval_cache is not None and (self.args.eval_fraction > 0 or self.cache is None):
            raise ValueError("train: an eval cache goes with offline training (a cache) and eval_fraction 0")
        if self.eval_sequences is not None and (self.eval_cache is None or self.eval_sequences < 1):
            raise ValueError(f"train: eval_sequences ({self.eval_sequences}) counts sequences of an eval cache; "
                             "give eval_cache, and at least 1")

    @property
    def online(self) -> bool:
        """A teacher runs on every batch (rather than targets read from a cache)."""
        return self.teacher is not None
