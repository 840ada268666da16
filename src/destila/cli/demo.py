"""`destila demo`: the whole pipeline on the embedded default teacher and Python's docs."""

from __future__ import annotations

from dataclasses import dataclass, field

from destila.cli.fields import add_fields, values_of
from destila.demo.settings import PRECISIONS, DemoSettings
from destila.student.layers import parse_layer_list

WIDTH_FLAGS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size")


@dataclass
class DemoRun:
    """The demo's flags: its output folder, and the settings a user may change (the rest are measured choices)."""

    out: str = field(default="demo-out", metadata={"help": "output folder"})
    minutes: float = field(default=DemoSettings.minutes, metadata={
        "help": "wall-clock budget of the whole run; the cache size and the training steps are sized from "
                "measured speed to fit it"})
    layers: str = field(default="all", metadata={
        "help": "teacher layers the student keeps: all, or indices and ranges such as 0-7,27-29"})
    hidden_size: int = field(default=DemoSettings().student_width.get("hidden_size", 0), metadata={
        "help": "residual stream width the student keeps, by activation importance (0: the teacher's)"})
    num_attention_heads: int = field(default=DemoSettings().student_width["num_attention_heads"], metadata={
        "help": "query heads the student keeps, by activation importance (0: the teacher's)"})
    num_key_value_heads: int = field(default=DemoSettings().student_width["num_key_value_heads"], metadata={
        "help": "key/value heads the student keeps (0: the teacher's)"})
    intermediate_size: int = field(default=DemoSettings().student_width["intermediate_size"], metadata={
        "help": "MLP channels the student keeps, by activation importance (0: the teacher's)"})
    train_tokens: int = field(default=DemoSettings.train_tokens, metadata={
        "help": "at most this many cached training tokens"})
    seeds: int = field(default=DemoSettings.seeds, metadata={
        "help": "train every student with this many seeds and report the spread"})
    teacher: str = field(default=DemoSettings.teacher, metadata={"help": "teacher (the embedded SmolLM2-135M)"})
    precision: str = field(default=DemoSettings.precision, metadata={
        "choices": PRECISIONS,
        "help": "the students' training arithmetic: auto times a step in float32 and, where the CPU has native "
                "bfloat16, under bfloat16 autocast, and trains in the faster; the teacher and the evaluation "
                "stay in float32"})
    force: bool = field(default=False, metadata={
        "help": f"train even when fewer than {DemoSettings.min_steps} steps per student fit in --minutes (the demo "
                "otherwise refuses before training); the report's first line then says so"})

    def settings(self) -> DemoSettings:
        layers = None if self.layers == "all" else parse_layer_list(self.layers)
        width = {key: getattr(self, key) for key in WIDTH_FLAGS if getattr(self, key)}
        return DemoSettings(teacher=self.teacher, minutes=self.minutes, student_layers=layers, student_width=width,
                            train_tokens=self.train_tokens, seeds=self.seeds, force=self.force,
                            precision=self.precision)


def register(subparsers) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="distil the embedded SmolLM2-135M on Python's docs, end to end, and write a report",
        description="cache build → student init → offline fused distillation → cross-entropy-only baseline "
        "→ evaluation → report, all inside --minutes. Rerun to resume; finished stages are skipped.",
    )
    add_fields(demo, DemoRun)
    demo.set_defaults(func=run)


def run(args) -> int:
    from destila.demo.pipeline import Demo  # heavy: transformers and the trainer, kept out of `destila --help`

    request = DemoRun(**values_of(args, DemoRun))
    Demo(request.out, request.settings()).run()
    return 0
