"""What `destila demo` runs: its settings and prompts (light: the command line reads them for its flags)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from destila.models import EMBEDDED

PRECISIONS = ("auto", "float32", "bfloat16")

DEMO_PROMPTS = (
    "To open a file for reading in Python,",
    "A list comprehension is",
    "The `with` statement",
)


# The demo's two trainings of the same student: what each learns from, and its loss weights.
TRAININGS = {
    # KL plus cross-entropy, 1:1: at the demo's ~24 steps it measured lower held-out perplexity than KL alone
    # (docs/demo.md, "How the recipe was chosen").
    "distilled": ("KL to the teacher's top-K + cross-entropy", {"soft_weight": 1.0, "hard_weight": 1.0}),
    "baseline": ("cross-entropy only, no teacher", {"soft_weight": 0.0, "hard_weight": 1.0}),
}


@dataclass
class DemoSettings:
    """What the demo runs; sized by measurement (docs/demo.md) to fit ``minutes`` on 2 CPU cores."""

    teacher: str = EMBEDDED
    holdout_every: int = 5  # every 5th document (sorted by name) is held out from training
    seq_len: int = 256
    train_tokens: int = 24576  # at most this many cached training tokens (fewer when the budget is short)
    eval_tokens: int = 8192  # held-out tokens cached and scored; never reduced by the budget
    top_k: int = 100
    # The student: the teacher's layers kept (None: all of them), then pruned in width by activation
    # importance on calibration text from the training documents (an empty dict: not pruned). All 30
    # layers with 528 of 576 residual channels, 6 of 9 query heads, 2 of 3 key/value heads and 527 of
    # 1536 MLP channels is 67.25 M parameters, under half the teacher's 134.5 M. Of the students of that
    # size measured (layer cuts and other widths), it ends lowest after the demo's steps (docs/demo.md).
    student_layers: list[int] | None = None
    student_width: dict = field(default_factory=lambda: dict(
        hidden_size=528, num_attention_heads=6, num_key_value_heads=2, intermediate_size=527))
    calibration_tokens: int = 1024
    freeze_embeddings: bool = True
    batch_size: int = 4
    learning_rate: float = 5e-4  # the best of 2.5e-4, 5e-4 and 1e-3 for both students (docs/demo.md)
    warmup_steps: int = 5
    # "auto": where the CPU multiplies bfloat16 natively, the plan times a step in float32 and under bfloat16
    # autocast and trains in the faster (bfloat16 measured within 2% of float32's held-out perplexity at
    # equal steps, at 0.6 of the step time: docs/demo.md); the teacher pass and the evaluation stay in
    # float32. "float32" or "bfloat16" forces one.
    precision: str = "auto"
    max_steps: int = 400  # cap; the budget sets the real target
    epochs: float = 1.0  # passes over the cached tokens the plan aims for (fresh tokens beat a second pass: docs/demo.md)
    minutes: float = 9.5  # wall-clock budget of the whole demo (installation excluded)
    eval_reserve_seconds: float = 210.0  # evaluation, task accuracy, continuations and the report, quiet machine
    eval_every: int = 5  # held-out evaluation during training every this many steps
    eval_curve_sequences: int = 4  # held-out sequences scored during training (the final table scores all)
    seeds: int = 1  # with 2, every student is trained twice (seeds 0 and 1) and the report shows the spread
    min_steps: int = 20  # fewer steps per student than this: refuse before training (a cut is not a result)
    force: bool = False  # train anyway below min_steps; the report then says so first
    new_tokens: int = 32
    task_questions: int = 24  # questions of the built-in pydoc_cloze task scored per model (0: none)
    cache_batch_size: int = 8

    def __post_init__(self):
        for name in ("seq_len", "train_tokens", "eval_tokens", "top_k", "batch_size", "max_steps", "eval_every",
                     "eval_curve_sequences", "seeds", "new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected a positive integer, found {getattr(self, name)}")
        if self.student_layers is not None and not self.student_layers:
            raise ValueError("student_layers: expected at least one teacher layer index, or None for all")
        if self.student_layers is None and not self.student_width:
            raise ValueError("student: expected teacher layers to keep or an intermediate size to prune to; "
                             "with neither the student would be the teacher")
        for name in ("minutes", "epochs", "learning_rate"):
            if not 0 < getattr(self, name) < math.inf:  # NaN fails this too
                raise ValueError(f"{name}: expected a positive finite number, found {getattr(self, name)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, found {self.precision!r}")
        if self.train_tokens < self.seq_len * self.batch_size:
            raise ValueError(f"train_tokens: expected at least one batch ({self.seq_len * self.batch_size} "
                             f"tokens), found {self.train_tokens}")
