"""`DistillationArguments`: `transformers.TrainingArguments` plus the loss and target options.

Nothing about the loss is declared here: its fields are generated from
:class:`destila.losses.LossOptions` (names, types, defaults, help) and
validated by building one, and the online teacher's fields come from
:class:`destila.targets.TargetSpec` the same way. So the CLI (which
``HfArgumentParser`` derives from this class), the Trainer and
:func:`destila.distill_loss` cannot drift apart.

Everything the Trainer already offers (checkpoints, resume, gradient
accumulation, mixed precision, LR schedules, ``report_to``, torchrun) stays
available under its usual name. A few Trainer defaults change to values that
work for distillation from a student cut out of its teacher (see
:data:`DISTILLATION_DEFAULTS`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import typing
from dataclasses import field

from transformers import TrainingArguments

from destila.losses.options import LossOptions
from destila.targets.spec import TargetSpec
from destila.training.hidden_distillation import HiddenLossOptions
from destila.training.engines import check_engine, choose_device
from destila.training.finite import check_finite_arguments
from destila.training.peft_student import LoraArguments

ONLINE_LOSSES = ("dense", "topk")
# ignore_index is the data path's business (every collate writes IGNORE_INDEX).
_LOSS_FIELDS_LEFT_OUT = ("ignore_index",)
# The online teacher computes top-K targets; temperature is shared with
# LossOptions, and sampled targets (with their own seed) exist only in caches.
# top_k is declared below: it serves the cache too (K′ ≤ the cache's K).
ONLINE_TARGET_FIELDS = ("head_chunk_rows",)

# Trainer defaults that differ from TrainingArguments'. A student cut from its
# teacher starts far from it: 5e-5 with linear decay barely moves it in the few
# hundred steps a distillation run has; 5e-4 held constant after a short warm-up
# is what the demo's runs were tuned with. Batches carry the teacher's targets,
# which the model's forward does not name, so columns must not be pruned.
DISTILLATION_DEFAULTS = {
    "learning_rate": 5e-4,
    "lr_scheduler_type": "constant_with_warmup",
    "warmup_steps": 10.0,
    "logging_steps": 10.0,
    "remove_unused_columns": False,
    "report_to": "none",
}


def _spec_fields(spec, keep, prefix: str = "") -> list[tuple]:
    """``(name, type, field)`` triples for :func:`dataclasses.make_dataclass`, copied from ``spec``."""
    hints = typing.get_type_hints(spec)
    return [
        (f.name, hints[f.name],
         field(default=f.default, metadata={**f.metadata, "help": prefix + f.metadata.get("help", "")}))
        for f in dataclasses.fields(spec) if keep(f.name)
    ]


def _own_fields() -> list[tuple]:
    return [
        ("top_k", typing.Optional[int], field(default=None, metadata={
            "help": "Teacher tokens per position the loss compares. From a cache: K′ ≤ the cache's K, read as its "
                    "first K′ entries with the exact mass of the rest (default: the cache's K). Online: the "
                    f"teacher's top-K (default: {TargetSpec.top_k})."})),
        ("eval_fraction", float, field(default=0.0, metadata={
            "help": "Fraction of the sequences held out for evaluation (0 disables)."})),
        ("online_loss", str, field(default="dense", metadata={
            "help": "Online only: dense (full-vocabulary divergence, the paper's baseline) or topk (the teacher's "
                    "top-K computed on the fly, then the same loss as from a cache).",
            "choices": list(ONLINE_LOSSES)})),
        ("freeze_embeddings", bool, field(default=False, metadata={
            "help": "Keep the input embedding and the output head fixed (tied or not): the head's weight gradient "
                    "(one [V, H] GEMM per step) and its optimizer state are skipped, and the student keeps the "
                    "teacher's vocabulary geometry."})),
        ("allow_tokenizer_mismatch", bool, field(default=False, metadata={
            "help": "Train although the student's tokenizer differs from the targets' (accepted only when both "
                    "vocabularies have the same size)."})),
        ("overwrite", bool, field(default=False, metadata={
            "help": "Delete the training run already in the output folder and start again (without it, or "
                    "--resume, a folder holding a run is refused)."})),
    ]


def _changed_defaults() -> list[tuple]:
    """The TrainingArguments fields whose default changes, re-declared with the same type and help."""
    base = {f.name: f for f in dataclasses.fields(TrainingArguments)}
    hints = typing.get_type_hints(TrainingArguments)
    out = []
    for name, default in DISTILLATION_DEFAULTS.items():
        help_text = base[name].metadata.get("help", "")
        out.append((name, hints[name], field(default=default, metadata={**base[name].metadata, "help": help_text})))
    # -o/--out: the CLI's spelling of output_dir.
    meta = {**base["output_dir"].metadata, "aliases": ["-o", "--out"]}
    out.append(("output_dir", hints["output_dir"], field(default=None, metadata=meta)))
    return out


def _post_init(self) -> None:
    check_finite_arguments(self)  # --learning_rate inf, --max_grad_norm nan, ...: before anything else
    if self.online_loss not in ONLINE_LOSSES:
        raise ValueError(f"online_loss: expected one of {', '.join(ONLINE_LOSSES)}, found {self.online_loss!r}")
    if not 0.0 <= self.eval_fraction < 1.0:
        raise ValueError(f"eval_fraction: expected a number in [0, 1), found {self.eval_fraction}")
    if self.remove_unused_columns:
        raise ValueError("remove_unused_columns: must stay False, the batches carry the teacher's targets")
    self.loss_options()  # validates every loss option, with LossOptions' messages
    self.target_spec()
    self.hidden_options()
    self.lora_arguments()
    _check_reporters(self.report_to)
    choose_device(self)  # CPU-only machines: use_cpu, so torchrun gives DDP over gloo and bf16 is accepted
    TrainingArguments.__post_init__(self)
    check_engine(self)


def _check_reporters(report_to) -> None:
    """``--report_to tensorboard`` without tensorboard installed: one line saying what to install."""
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    packages = {"tensorboard": ("tensorboard", "destila[tensorboard]"), "wandb": ("wandb", "wandb"),
                "mlflow": ("mlflow", "mlflow"), "trackio": ("trackio", "trackio")}
    for name in names:
        for reporter in str(name).split(","):
            module, install = packages.get(reporter.strip(), (None, None))
            if module and importlib.util.find_spec(module) is None:
                raise ValueError(f"report_to: {reporter.strip()} needs the package {module}, which is not "
                                 f"installed; pip install '{install}' or pass --report_to none")


def _loss_options(self) -> LossOptions:
    """The :class:`LossOptions` these arguments hold (validated)."""
    return LossOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(LossOptions)
                          if f.name not in _LOSS_FIELDS_LEFT_OUT})


def _target_spec(self) -> TargetSpec:
    """The :class:`TargetSpec` of the online teacher (temperature shared with the student's)."""
    top_k = {"top_k": self.top_k} if self.top_k is not None else {}
    return TargetSpec(temperature=self.temperature, **top_k,
                      **{name: getattr(self, name) for name in ONLINE_TARGET_FIELDS})


def _lora_arguments(self) -> LoraArguments:
    """The LoRA options (validated); ``lora_r = 0`` means a full student, no adapters."""
    return LoraArguments(**{f.name: getattr(self, f.name) for f in dataclasses.fields(LoraArguments)})


def _hidden_options(self) -> HiddenLossOptions:
    """The hidden-state term's options (validated); ``hidden_loss=None`` means off."""
    return HiddenLossOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(HiddenLossOptions)})


DistillationArguments = dataclasses.make_dataclass(
    "DistillationArguments",
    [
        *_spec_fields(LossOptions, lambda name: name not in _LOSS_FIELDS_LEFT_OUT),
        *_spec_fields(TargetSpec, lambda name: name in ONLINE_TARGET_FIELDS, prefix="Online only: "),
        *_own_fields(),
        *_spec_fields(HiddenLossOptions, lambda name: True),
        *_spec_fields(LoraArguments, lambda name: True),
        *_changed_defaults(),
    ],
    bases=(TrainingArguments,),
    namespace={
        "__post_init__": _post_init,
        "loss_options": _loss_options,
        "target_spec": _target_spec,
        "hidden_options": _hidden_options,
        "lora_arguments": _lora_arguments,
        "__doc__": "Training arguments for distillation from a top-K cache or an online teacher.\n\n"
                   "Every ``transformers.TrainingArguments`` field, plus the fields of "
                   ":class:`destila.losses.LossOptions` (except ``ignore_index``), ``top_k`` (K′ from a cache, "
                   "K online), ``head_chunk_rows`` of :class:`destila.targets.TargetSpec` for an online teacher, "
                   "``eval_fraction``, ``online_loss``, ``allow_tokenizer_mismatch``, the hidden-state "
                   "options of :class:`destila.training.hidden_distillation.HiddenLossOptions` and the LoRA options of "
                   ":class:`destila.training.peft_student.LoraArguments` (``lora_r``, ...).",
    },
)
DistillationArguments.__module__ = __name__
