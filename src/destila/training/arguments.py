"""`DistillationArguments`: `transformers.TrainingArguments` plus the loss and target options.

A plain dataclass, as TRL's configs are: every field is declared below, so
"go to definition" and ``help(DistillationArguments)`` find it. The loss
options are :class:`destila.losses.LossOptions`' fields (minus
``ignore_index``), copied field by field with :func:`_copied`, which takes the
name, default and help (choices included) from the declaration there; the
online teacher's ``head_chunk_rows``, the hidden-state term's and the LoRA
options are copied from :class:`~destila.targets.TargetSpec`,
:class:`~destila.training.hidden_distillation.HiddenLossOptions` and
:class:`~destila.training.peft_student.LoraArguments` the same way, and
validated by building one of each. ``tests/training/test_arguments.py`` checks
that no field of those classes is missing here or declared differently, so the
CLI (which ``HfArgumentParser`` derives from this class), the Trainer and
:func:`destila.distill_loss` cannot drift apart.

Everything the Trainer already offers (checkpoints, resume, gradient
accumulation, mixed precision, LR schedules, ``report_to``, torchrun) stays
available under its usual name. A few Trainer defaults change to values that
work for distillation from a student cut out of its teacher (see
:data:`DISTILLATION_DEFAULTS`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from dataclasses import dataclass, field

from transformers import TrainingArguments
from transformers.trainer_utils import SchedulerType

from destila.losses.options import LossOptions
from destila.targets.spec import TargetSpec
from destila.targets.truncate import check_top_p
from destila.training.engines import check_engine, choose_device
from destila.training.argument_ranges import check_argument_ranges, check_finite_arguments
from destila.training.hidden_distillation import HiddenLossOptions
from destila.training.peft_student import LoraArguments
from destila.training.trl_keys import beta_problem, gkd_divergence
from destila.training.weight_schedule import SoftWeightSchedule

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


# Training's own loss defaults where they differ from the loss function's: the cross-entropy beside the KL,
# 1:1, which beat the KL alone and the cross-entropy alone on fresh tokens (docs/benchmarks.md). The loss
# function keeps 0, since it may be called without labels.
TRAIN_LOSS_DEFAULTS = {"hard_weight": 1.0}


def _copied(cls, name: str, prefix: str = ""):
    """The field ``name`` of dataclass ``cls`` as a field here: its default (training's own where
    :data:`TRAIN_LOSS_DEFAULTS` names one) and metadata (help, choices), the help prefixed with ``prefix``."""
    source = cls.__dataclass_fields__[name]
    if name in TRAIN_LOSS_DEFAULTS:
        prefix += f"[training's default {TRAIN_LOSS_DEFAULTS[name]:g} (the loss function's: {source.default:g})] "
    help_text = prefix + source.metadata.get("help", "")
    return field(default=TRAIN_LOSS_DEFAULTS.get(name, source.default), metadata={**source.metadata, "help": help_text})


def _changed(name: str, **extra):
    """TrainingArguments' field ``name`` with destila's default (:data:`DISTILLATION_DEFAULTS`), same help."""
    source = TrainingArguments.__dataclass_fields__[name]
    return field(default=DISTILLATION_DEFAULTS[name], metadata={**source.metadata, **extra})


# Secrets a user may pass as arguments: never written to a file (see DistillationArguments.__getstate__).
CREDENTIAL_FIELDS = ("hub_token",)


@dataclass
class DistillationArguments(TrainingArguments):
    """Training arguments for distillation from a top-K cache or an online teacher.

    Every ``transformers.TrainingArguments`` field, plus the loss options of
    :class:`destila.losses.LossOptions` (except ``ignore_index``), ``top_k``
    (K′ from a cache, K online), ``top_p`` (nucleus truncation of a cache),
    ``head_chunk_rows`` of :class:`destila.targets.TargetSpec` for an online
    teacher, the distillation weight's schedule of
    :class:`~destila.training.weight_schedule.SoftWeightSchedule`,
    ``eval_fraction``, ``online_loss``, ``freeze_embeddings``,
    ``allow_tokenizer_mismatch``, ``overwrite``, the hidden-state options of
    :class:`~destila.training.hidden_distillation.HiddenLossOptions` and the
    LoRA options of :class:`~destila.training.peft_student.LoraArguments`
    (``lora_r``, ...).
    """

    # The loss: LossOptions' fields (validated by building one, see loss_options).
    divergence: str = _copied(LossOptions, "divergence")
    beta: float = _copied(LossOptions, "beta")
    tail: str = _copied(LossOptions, "tail")
    temperature: float = _copied(LossOptions, "temperature")
    soft_weight: float = _copied(LossOptions, "soft_weight")
    hard_weight: float = _copied(LossOptions, "hard_weight")
    impl: str = _copied(LossOptions, "impl")
    chunk_size: int | None = _copied(LossOptions, "chunk_size")
    precision: str = _copied(LossOptions, "precision")
    kernels: str = _copied(LossOptions, "kernels")

    # The targets: K′ of a cache, or the online teacher's top-K and its head's chunk.
    head_chunk_rows: int = _copied(TargetSpec, "head_chunk_rows", prefix="Online only: ")
    top_k: int | None = field(default=None, metadata={
        "help": "Teacher tokens per position the loss compares. From a cache: K′ ≤ the cache's K, read as its "
                "first K′ entries with the exact mass of the rest (default: the cache's K). Online: the "
                f"teacher's top-K (default: {TargetSpec.top_k})."})
    top_p: float | None = field(default=None, metadata={
        "help": "From a top-K cache: keep, per position, the fewest most likely entries whose mass reaches "
                "top_p (nucleus truncation, after --top_k), their mass left out joining the rest bucket "
                "exactly (default: no truncation)."})

    # The distillation weight over training: SoftWeightSchedule's fields (constant: soft_weight throughout).
    soft_weight_schedule: str = _copied(SoftWeightSchedule, "soft_weight_schedule")
    soft_weight_start: float = _copied(SoftWeightSchedule, "soft_weight_start")
    soft_weight_warmup: float = _copied(SoftWeightSchedule, "soft_weight_warmup")
    soft_weight_decay: float = _copied(SoftWeightSchedule, "soft_weight_decay")
    soft_weight_end: float = _copied(SoftWeightSchedule, "soft_weight_end")
    hard_weight_complement: bool = _copied(SoftWeightSchedule, "hard_weight_complement")

    # The run.
    eval_fraction: float = field(default=0.0, metadata={
        "help": "Fraction of the sequences held out for evaluation (0 disables)."})
    online_loss: str = field(default="dense", metadata={
        "help": "Online only: dense (full-vocabulary divergence, the paper's baseline) or topk (the teacher's "
                "top-K computed on the fly, then the same loss as from a cache).",
        "choices": list(ONLINE_LOSSES)})
    freeze_embeddings: bool = field(default=False, metadata={
        "help": "Keep the input embedding and the output head fixed (tied or not): the head's weight gradient "
                "(one [V, H] GEMM per step) and its optimizer state are skipped, and the student keeps the "
                "teacher's vocabulary geometry."})
    allow_tokenizer_mismatch: bool = field(default=False, metadata={
        "help": "Train although the student's tokenizer differs from the targets' (accepted only when both "
                "vocabularies have the same size)."})
    overwrite: bool = field(default=False, metadata={
        "help": "Delete the training run already in the output folder and start again (without it, or "
                "--resume, a folder holding a run is refused)."})

    # The hidden-state term: HiddenLossOptions' fields (off unless hidden_loss is set).
    hidden_loss: str | None = _copied(HiddenLossOptions, "hidden_loss")
    hidden_weight: float = _copied(HiddenLossOptions, "hidden_weight")
    layer_map: str = _copied(HiddenLossOptions, "layer_map")

    # A LoRA student: LoraArguments' fields (lora_r = 0: no adapters).
    lora_r: int = _copied(LoraArguments, "lora_r")
    lora_alpha: float | None = _copied(LoraArguments, "lora_alpha")
    lora_dropout: float = _copied(LoraArguments, "lora_dropout")
    lora_target_modules: str = _copied(LoraArguments, "lora_target_modules")
    merge: bool = _copied(LoraArguments, "merge")

    # TrainingArguments' fields whose default changes (DISTILLATION_DEFAULTS), and -o/--out for output_dir.
    learning_rate: float = _changed("learning_rate")
    lr_scheduler_type: SchedulerType | str = _changed("lr_scheduler_type")
    warmup_steps: float = _changed("warmup_steps")
    logging_steps: float = _changed("logging_steps")
    remove_unused_columns: bool = _changed("remove_unused_columns")
    report_to: None | str | list[str] = _changed("report_to")
    output_dir: str | None = field(default=None, metadata={
        **TrainingArguments.__dataclass_fields__["output_dir"].metadata, "aliases": ["-o", "--out"]})

    def __post_init__(self) -> None:
        check_finite_arguments(self)  # --learning_rate inf, --max_grad_norm nan, ...: before anything else
        check_argument_ranges(self)  # --gradient_accumulation_steps 0, --max_steps -5, --save_steps 0, ...
        if self.online_loss not in ONLINE_LOSSES:
            raise ValueError(f"online_loss: expected one of {', '.join(ONLINE_LOSSES)}, found {self.online_loss!r}")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(f"eval_fraction: expected a number in [0, 1), found {self.eval_fraction}")
        if self.remove_unused_columns:
            raise ValueError("remove_unused_columns: must stay False, the batches carry the teacher's targets")
        self._beta_selects_divergence()
        self.loss_options()  # validates every loss option, with LossOptions' messages
        self.weight_schedule().check(self.soft_weight, self.hard_weight, TRAIN_LOSS_DEFAULTS["hard_weight"])
        check_top_p(self.top_p)
        self.target_spec()
        self.hidden_options()
        self.lora_arguments()
        _check_reporters(self.report_to)
        choose_device(self)  # CPU-only machines: use_cpu, so torchrun gives DDP over gloo and bf16 is accepted
        super().__post_init__()
        check_engine(self)

    def _beta_selects_divergence(self) -> None:
        """``beta`` means GKD's β, as in TRL and on the command line: given without ``divergence`` it selects the
        divergence (0 forward KL, 1 reverse KL, between them the JSD with that β); beside a divergence it must
        agree with it (one line from :func:`~destila.training.trl_keys.beta_problem` otherwise)."""
        given, default = getattr(self, "_given", frozenset()), LossOptions.__dataclass_fields__["beta"].default
        if "beta" in given and "divergence" not in given:
            chosen = gkd_divergence(float(self.beta))
            self.divergence, self.beta = chosen["divergence"], chosen.get("beta", default)
        elif self.beta in (0, 1) and gkd_divergence(float(self.beta))["divergence"] == self.divergence:
            self.beta = default  # β 0 beside forward_kl, 1 beside reverse_kl: the same objective, said twice
        elif (self.beta != default or self.divergence == "jsd") and (problem := beta_problem(self.beta, self.divergence)):
            raise ValueError(problem)

    def __getstate__(self) -> dict:
        """What pickling keeps: every field but the credentials. The Trainer pickles its arguments into
        ``training_args.bin`` beside the model and in every checkpoint, folders that are meant to be shared
        and uploaded; the token given with ``--hub_token`` stays in this process only."""
        state = self.__dict__.copy()
        for name in CREDENTIAL_FIELDS:
            if state.get(name) is not None:
                state[name] = None
        return state

    def loss_options(self) -> LossOptions:
        """The :class:`LossOptions` these arguments hold (validated)."""
        return LossOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(LossOptions)
                              if f.name not in _LOSS_FIELDS_LEFT_OUT})

    def target_spec(self) -> TargetSpec:
        """The :class:`TargetSpec` of the online teacher (temperature shared with the student's)."""
        top_k = {"top_k": self.top_k} if self.top_k is not None else {}
        return TargetSpec(temperature=self.temperature, **top_k,
                          **{name: getattr(self, name) for name in ONLINE_TARGET_FIELDS})

    def weight_schedule(self) -> SoftWeightSchedule:
        """The distillation weight's schedule (validated); ``constant`` means the loss options' weights."""
        return SoftWeightSchedule(**{f.name: getattr(self, f.name) for f in dataclasses.fields(SoftWeightSchedule)})

    def hidden_options(self) -> HiddenLossOptions:
        """The hidden-state term's options (validated); ``hidden_loss=None`` means off."""
        return HiddenLossOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(HiddenLossOptions)})

    def lora_arguments(self) -> LoraArguments:
        """The LoRA options (validated); ``lora_r = 0`` means a full student, no adapters."""
        return LoraArguments(**{f.name: getattr(self, f.name) for f in dataclasses.fields(LoraArguments)})


def _recording_given(init):
    """``init`` that first records the names of the fields given (``self._given``): ``beta`` given alone selects
    the divergence, which a value equal to the default could not tell."""
    names = [f.name for f in dataclasses.fields(DistillationArguments) if f.init]

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        self._given = frozenset([*names[:len(args)], *kwargs])
        init(self, *args, **kwargs)

    return __init__


DistillationArguments.__init__ = _recording_given(DistillationArguments.__init__)


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
