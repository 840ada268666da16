"""What `destila demo` runs: its settings and prompts (light: the command line reads them for its flags).

:class:`StageSettings` and :class:`CachedStageSettings` hold the sizes and training settings the demo and
every recipe share, declared once: :class:`DemoSettings`, :class:`~destila.recipes.common.RecipeSettings`
and :class:`~destila.recipes.on_policy.OnPolicySettings` subclass them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from destila.models import EMBEDDED
from destila.ranges import check_int_at_least
from destila.targets.spec import TARGET_KINDS

PRECISIONS = ("auto", "float32", "bfloat16")

DEMO_PROMPTS = (
    "To open a file for reading in Python,",
    "A list comprehension is",
    "The `with` statement",
)


def _positive_integers(settings, names) -> None:
    for name in names:
        check_int_at_least(name, getattr(settings, name), 1)


@dataclass
class StageSettings:
    """The sizes and training settings every stage of the demo and of the recipes shares."""

    seq_len: int = field(default=256, metadata={"help": "tokens per packed sequence of every cache"})
    holdout_every: int = field(default=5, metadata={
        "help": "every N-th document (on-policy: prompt) is held out: never trained on, scored at the end"})
    top_k: int = field(default=100, metadata={"help": "teacher ids kept per position in every cache"})
    batch_size: int = field(default=4, metadata={"help": "sequences per training step"})
    # The best of 2.5e-4, 5e-4 and 1e-3 for both of the demo's students (docs/demo.md).
    learning_rate: float = field(default=5e-4, metadata={"help": "learning rate of every training"})
    cache_batch_size: int = field(default=8, metadata={"help": "sequences per teacher forward when caching"})

    def __post_init__(self):
        _positive_integers(self, ("seq_len", "top_k", "batch_size", "cache_batch_size"))
        if self.seq_len < 2:
            raise ValueError(f"seq_len: expected at least 2 tokens, found {self.seq_len}")
        check_int_at_least("holdout_every", self.holdout_every, 2)
        if not 0 < self.learning_rate < math.inf:  # NaN fails this too
            raise ValueError(f"learning_rate: expected a positive finite number, found {self.learning_rate}")


@dataclass
class CachedStageSettings(StageSettings):
    """:class:`StageSettings` plus the token budgets of a run that caches documents and reports samples."""

    train_tokens: int = field(default=24576, metadata={"help": "at most this many cached training tokens"})
    eval_tokens: int = field(default=8192, metadata={"help": "held-out tokens cached and scored"})
    new_tokens: int = field(default=32, metadata={"help": "tokens generated per model in the report"})

    def __post_init__(self):
        super().__post_init__()
        _positive_integers(self, ("train_tokens", "eval_tokens", "new_tokens"))


# The demo's two trainings of the same student: what each learns from, and its loss weights.
TRAININGS = {
    # KL plus cross-entropy, 1:1: at the demo's ~24 steps it measured lower held-out perplexity than KL alone
    # (docs/demo.md, "How the recipe was chosen").
    "distilled": ("KL to the cached teacher targets + cross-entropy", {"soft_weight": 1.0, "hard_weight": 1.0}),
    "baseline": ("cross-entropy only, no teacher", {"soft_weight": 0.0, "hard_weight": 1.0}),
}


@dataclass
class DemoSettings(CachedStageSettings):
    """What the demo runs; sized by measurement (docs/demo.md) to fit ``minutes`` on 2 CPU cores.

    Besides :class:`CachedStageSettings` (documents sorted by name; ``train_tokens`` is lowered when the budget
    is short, ``eval_tokens`` never).
    """

    teacher: str = EMBEDDED
    # The training cache holds S draws from the teacher per position (RS-KD), not its top-K: on fresh tokens KL
    # to 64 draws plus CE ended 1.9% lower in held-out perplexity than KL to the top-100 plus CE, in both seeds,
    # and ahead at every budget (docs/benchmarks.md). The held-out cache stays top-K (`top_k`): the report's KL
    # and agreement read it.
    train_targets: str = "sampled"
    samples: int = 64
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
    warmup_steps: int = 5
    # "auto": where the CPU multiplies bfloat16 natively, the plan times a step in float32 and under bfloat16
    # autocast and trains in the faster (bfloat16 measured within 2% of float32's held-out perplexity at
    # equal steps, at 0.6 of the step time: docs/demo.md); the teacher pass and the evaluation stay in
    # float32. "float32" or "bfloat16" forces one.
    precision: str = "auto"
    max_steps: int = 400  # cap; the budget sets the real target
    epochs: float = 1.0  # passes over the cached tokens the plan aims for (fresh tokens beat a second pass: docs/demo.md)
    minutes: float = 9.5  # wall-clock budget of the whole demo (installation excluded)
    # Evaluation, task accuracy, continuations and the report where the teacher's held-out pass runs at 450
    # tokens/s: 210 s with 24 sentence-cloze questions, plus 55 s for the 600 next-word questions that replaced
    # them (the three models' task took 5.5x the teacher's held-out pass in CPU seconds: docs/demo.md).
    eval_reserve_seconds: float = 265.0
    eval_every: int = 5  # held-out evaluation during training every this many steps
    eval_curve_sequences: int = 4  # held-out sequences scored during training (the final table scores all)
    seeds: int = 1  # with 2, every student is trained twice (seeds 0 and 1) and the report shows the spread
    min_steps: int = 20  # fewer steps per student than this: refuse before training (a cut is not a result)
    force: bool = False  # train anyway below min_steps; the report then says so first
    task: str = "pydoc_next_word"  # the built-in task scored per model (docs/eval.md): next word of held-out text
    task_questions: int = 600  # its first this many questions (600: all of them; 0: no task)

    def __post_init__(self):
        super().__post_init__()
        if self.train_targets not in TARGET_KINDS:
            raise ValueError(f"train_targets: expected one of {', '.join(TARGET_KINDS)}, found {self.train_targets!r}")
        _positive_integers(self, ("samples",))
        for name in ("max_steps", "eval_every", "eval_curve_sequences", "seeds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected a positive integer, found {getattr(self, name)}")
        if self.student_layers is not None and not self.student_layers:
            raise ValueError("student_layers: expected at least one teacher layer index, or None for all")
        if self.student_layers is None and not self.student_width:
            raise ValueError("student: expected teacher layers to keep or an intermediate size to prune to; "
                             "with neither the student would be the teacher")
        for name in ("minutes", "epochs"):
            if not 0 < getattr(self, name) < math.inf:  # NaN fails this too
                raise ValueError(f"{name}: expected a positive finite number, found {getattr(self, name)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, found {self.precision!r}")
        if self.train_tokens < self.seq_len * self.batch_size:
            raise ValueError(f"train_tokens: expected at least one batch ({self.seq_len * self.batch_size} "
                             f"tokens), found {self.train_tokens}")
