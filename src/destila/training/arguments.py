"""`DistillationArguments`: `transformers.TrainingArguments` plus the loss options.

Everything the Trainer already offers (checkpoints, resume, gradient
accumulation, mixed precision, gradient checkpointing, LR schedules,
``report_to``, multi-process launching) stays available unchanged; the fields
added here only choose how the distillation loss is computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import TrainingArguments

from destila.training.engines import check_engine, choose_device

LOSS_IMPLS = ("fused", "chunked", "dense")
DIVERGENCES = ("forward_kl", "reverse_kl", "jsd", "tvd")
TAILS = ("bucket", "renorm", "none")
ONLINE_LOSSES = ("dense", "topk")


def _choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name}: expected one of {', '.join(allowed)}, found {value!r}")


@dataclass
class DistillationArguments(TrainingArguments):
    """Training arguments for distillation from a top-K cache or an online teacher."""

    loss_impl: str = field(
        default="fused",
        metadata={"help": "fused (lm_head fused into the loss, chunked; the point of destila), "
                  "chunked (full logits once, loss over row chunks) or dense (full [N, V] grids)"},
    )
    divergence: str = field(default="forward_kl", metadata={"help": "forward_kl, reverse_kl, jsd or tvd"})
    beta: float = field(default=0.5, metadata={"help": "JSD mixture weight β in (0, 1)"})
    tail: str = field(
        default="bucket",
        metadata={"help": "bucket (top-K plus one bucket for the rest), renorm (teacher renormalised "
                  "over its top-K) or none (raw top-K probabilities)"},
    )
    temperature: float = field(default=1.0, metadata={"help": "softmax temperature T; the soft term is scaled by T²"})
    soft_weight: float = field(default=1.0, metadata={"help": "weight of the divergence to the teacher"})
    hard_weight: float = field(default=0.0, metadata={"help": "weight of the cross-entropy on the data's next tokens"})
    chunk_size: int = field(default=2048, metadata={"help": "rows per chunk for the chunked and fused losses"})
    eval_fraction: float = field(
        default=0.0, metadata={"help": "fraction of the sequences held out for evaluation (0 disables)"}
    )
    online_loss: str = field(
        default="dense",
        metadata={"help": "online only: dense (full-vocabulary divergence, the paper's baseline) or "
                  "topk (teacher top-K computed on the fly, then the same loss as from a cache)"},
    )
    online_top_k: int = field(default=100, metadata={"help": "online topk only: K"})
    allow_tokenizer_mismatch: bool = field(
        default=False,
        metadata={"help": "train although the student's tokenizer differs from the cache's "
                  "(only accepted when both vocabularies have the same size)"},
    )
    # Defaults that differ from TrainingArguments: batches carry the teacher's
    # top-K, which the model's forward signature does not name, and the
    # usual 500-step intervals are far too sparse for distillation runs.
    remove_unused_columns: bool = field(default=False, metadata={"help": "keep the top-K columns in batches"})
    logging_steps: float = field(default=10, metadata={"help": "log every N steps"})

    def __post_init__(self):
        _choice("loss_impl", self.loss_impl, LOSS_IMPLS)
        _choice("divergence", self.divergence, DIVERGENCES)
        _choice("tail", self.tail, TAILS)
        _choice("online_loss", self.online_loss, ONLINE_LOSSES)
        if not 0.0 < self.beta < 1.0:
            raise ValueError(f"beta: expected a number in (0, 1), found {self.beta}")
        if not self.temperature > 0:
            raise ValueError(f"temperature: expected a positive number, found {self.temperature}")
        if self.soft_weight < 0 or self.hard_weight < 0 or self.soft_weight + self.hard_weight == 0:
            raise ValueError(
                f"soft_weight/hard_weight: expected non-negative weights, not both zero, "
                f"found {self.soft_weight}/{self.hard_weight}"
            )
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size: expected a positive integer, found {self.chunk_size}")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(f"eval_fraction: expected a number in [0, 1), found {self.eval_fraction}")
        if self.online_top_k < 1:
            raise ValueError(f"online_top_k: expected a positive integer, found {self.online_top_k}")
        if self.remove_unused_columns:
            raise ValueError("remove_unused_columns: must stay False, the batches carry the teacher's top-K")
        choose_device(self)
        super().__post_init__()
        check_engine(self)

    def loss_options(self) -> dict:
        """Keyword arguments for :func:`destila.distill_loss`."""
        return dict(
            divergence=self.divergence, beta=self.beta, tail=self.tail, temperature=self.temperature,
            soft_weight=self.soft_weight, hard_weight=self.hard_weight,
            impl=self.loss_impl, chunk_size=self.chunk_size,
        )
