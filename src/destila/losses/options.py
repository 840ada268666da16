"""The loss options, validated once: what to compare, how, and with which implementation.

``LossOptions`` is the one place where option names, defaults and their
meaning live; :func:`destila.distill_loss` and :class:`destila.DistillLoss`
both build one, so a typo or an out-of-range value fails before any tensor
is touched, with a message that names the option.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from destila.constants import IGNORE_INDEX
from destila.losses.divergences import divergence_help, divergence_names, get_divergence

DIVERGENCES = divergence_names()  # the built-in ones; the registry may hold more
TAILS = ("bucket", "renorm", "none")
IMPLS = ("fused", "chunked", "dense")
PRECISIONS = ("auto", "fast", "exact")
KERNELS = ("auto", "triton", "torch")
# What a caller that needs a fixed number of rows uses (evaluation's own row blocks); the loss itself
# picks its chunk from the vocabulary, hidden size and free memory when chunk_size is None.
DEFAULT_CHUNK_SIZE = 2048


def _choice(name: str, value, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(
            f"{name}: expected one of {', '.join(map(repr, allowed))}, found {value!r}; "
            f"pick one of those (see help(destila.losses.LossOptions))"
        )


def _number(name: str, value, *, low: float, low_open: bool = False, high: float | None = None,
            high_open: bool = False) -> float:
    """``value`` as a float inside the given interval, or a ValueError that says which interval."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}: expected a real number, found {value!r} ({type(value).__name__})")
    value = float(value)
    below = value <= low if low_open else value < low
    above = high is not None and (value >= high if high_open else value > high)
    if not math.isfinite(value) or below or above:
        interval = ("(" if low_open else "[") + f"{low:g}, " + (f"{high:g}" if high is not None else "inf") + (
            ")" if high_open or high is None else "]")
        raise ValueError(f"{name}: expected a finite number in {interval}, found {value!r}")
    return value


@dataclass(frozen=True)
class LossOptions:
    """Everything about the loss except the tensors. Validated in ``__post_init__``."""

    divergence: str = field(default="forward_kl", metadata={
        "choices": list(DIVERGENCES),
        "help": divergence_help() + ". All over the buckets chosen by `tail`."})
    beta: float = field(default=0.5, metadata={"help": "JSD mixing weight β in (0, 1); ignored otherwise."})
    tail: str = field(default="bucket", metadata={
        "choices": list(TAILS),
        "help": "bucket: K teacher tokens + one bucket for the rest (a proper KL, ≤ the full one); "
                "renorm: teacher renormalised over its top-K, no rest bucket (biased); "
                "none: raw top-K teacher probabilities, no rest bucket (can go negative)."})
    temperature: float = field(default=1.0, metadata={
        "help": "Softmax temperature T: student logits are divided by T and the soft term is scaled by T². "
                "The teacher's log-probs come tempered already (a cache's T is fixed when it is built, and "
                "training refuses a different one)."})
    soft_weight: float = field(default=1.0, metadata={"help": "Weight of the distillation term (≥ 0)."})
    hard_weight: float = field(default=0.0, metadata={
        "help": "Weight of the cross-entropy on `labels` at T = 1 (≥ 0); > 0 needs labels."})
    ignore_index: int = field(default=IGNORE_INDEX, metadata={"help": "Label value marking a row to leave out."})
    impl: str = field(default="fused", metadata={
        "choices": list(IMPLS),
        "help": "fused: lm_head inside the loss, [chunk, V] memory; chunked: full logits once, loss "
                "over row chunks; dense: full [N, V] grids through autograd (the reference)."})
    chunk_size: int | None = field(default=None, metadata={
        "help": "Rows per chunk for fused and chunked: the [chunk, V] float32 buffer is their "
                "largest allocation. Default: chosen from V, H and the free memory (docs/loss.md, "
                "'chunk size'). Ignored by dense."})
    precision: str = field(default="auto", metadata={
        "choices": list(PRECISIONS),
        "help": "fused only. fast: bf16 GEMMs with float32 logits, the logit gradient rounded to bf16 for "
                "the two gradient GEMMs, dW summed in float32 (bf16 inputs; CUDA, or emulated on CPU); "
                "exact: float32 GEMMs on a float32 copy of the head; auto: fast on CUDA for bf16 inputs, "
                "else exact."})
    kernels: str = field(default="auto", metadata={
        "choices": list(KERNELS),
        "help": "fused and chunked: the row math between the GEMMs. triton: two Triton kernels per chunk "
                "(needs the triton extra and a CUDA device); torch: eager torch ops; auto: triton on CUDA "
                "when installed, else torch. The path taken is logged and reported by "
                "destila.losses.describe_path."})

    def __post_init__(self) -> None:
        get_divergence(self.divergence)  # a registered name, or the error listing them
        _choice("tail", self.tail, TAILS)
        _choice("impl", self.impl, IMPLS)
        _choice("precision", self.precision, PRECISIONS)
        _choice("kernels", self.kernels, KERNELS)
        if self.precision != "auto" and self.impl != "fused":
            raise ValueError(f"precision: expected 'auto' with impl={self.impl!r}, found {self.precision!r}; "
                             f"the GEMM precision is a choice of impl='fused' only")
        if self.kernels == "triton" and self.impl == "dense":
            raise ValueError("kernels: expected 'auto' or 'torch' with impl='dense', found 'triton'; "
                             "the Triton row kernels serve impl='fused' and 'chunked'")
        # frozen dataclass: normalise ints to floats through object.__setattr__
        set_ = object.__setattr__
        set_(self, "beta", _number("beta", self.beta, low=0.0, low_open=True, high=1.0, high_open=True))
        set_(self, "temperature", _number("temperature", self.temperature, low=0.0, low_open=True))
        set_(self, "soft_weight", _number("soft_weight", self.soft_weight, low=0.0))
        set_(self, "hard_weight", _number("hard_weight", self.hard_weight, low=0.0))
        if self.soft_weight == 0 and self.hard_weight == 0:
            raise ValueError("soft_weight/hard_weight: expected at least one > 0, found both 0; "
                             "the loss would be 0 whatever the student does")
        if isinstance(self.ignore_index, bool) or not isinstance(self.ignore_index, int):
            raise ValueError(f"ignore_index: expected an int, found {self.ignore_index!r}")
        if self.chunk_size is not None and (isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int)
                                            or self.chunk_size < 1):
            raise ValueError(
                f"chunk_size: expected a positive int (rows per chunk) or None (chosen from V, H and the free "
                f"memory), found {self.chunk_size!r}; smaller saves memory"
            )
