"""`destila recipe progressive|self|on-policy|draft`: multi-stage distillation recipes, resumable, with a report."""

from __future__ import annotations

from dataclasses import dataclass, field

from destila.cli.fields import MODEL_HELP, add_fields, values_of
from destila.draft.recipe import DraftRecipe, DraftSettings
from destila.losses.options import LossOptions
from destila.recipes import ProgressiveRecipe, RecipeSettings, SelfRecipe
from destila.recipes.on_policy import LOSS_FIELDS_LEFT_OUT, OnPolicyRecipe, OnPolicySettings

_DATA_HELP = "'pydoc', 'stdlib', a text file or folder (as for cache build)"


@dataclass
class ProgressiveRequest:
    teacher: str = field(metadata={"help": MODEL_HELP, "metavar": "TEACHER"})
    data: str = field(metadata={"help": _DATA_HELP, "metavar": "DATA"})
    stages: str = field(metadata={"help": "layer counts of the models in turn, e.g. 15,6"})


@dataclass
class SelfRequest:
    model: str = field(metadata={
        "help": "teacher or student: " + MODEL_HELP, "metavar": "MODEL"})
    data: str = field(metadata={"help": _DATA_HELP, "metavar": "DATA"})
    init: str = field(default="random", metadata={
        "help": "weights the copy starts from (random: the born-again setting)", "choices": ["random", "copy"]})


@dataclass
class OnPolicyRequest:
    """What `recipe on-policy` is given: the teacher, the starting student and the prompts it samples from."""

    teacher: str = field(metadata={"help": MODEL_HELP, "metavar": "TEACHER"})
    student: str = field(metadata={
        "help": "the starting student (shares the teacher's tokenizer)", "metavar": "STUDENT"})
    prompts: str = field(metadata={
        "help": ".txt (one prompt per line), or .jsonl/.json/.parquet rows with a 'messages' conversation or a "
                "'prompt' text (a 'completion' beside it is not used)", "metavar": "PROMPTS"})


@dataclass
class RecipeOutput:
    out: str = field(metadata={"help": "output folder (created, or resumed)", "aliases": ["-o"]})


def register(subparsers) -> None:
    parser = subparsers.add_parser("recipe", help="progressive, self- or on-policy distillation, as resumable stages")
    verbs = parser.add_subparsers(dest="verb", metavar="RECIPE", required=True)
    progressive = verbs.add_parser(
        "progressive", help="teacher → smaller assistant(s) → student, each distilled from the previous one",
        description="Each stage cuts its model from the previous one (evenly spaced layers), caches the previous "
        "model's top-K over DATA and distils from that cache; every model is then evaluated on held-out "
        "documents against the teacher. Rerun to resume; finished stages are skipped.",
    )
    add_fields(progressive, ProgressiveRequest, positional=("teacher", "data"))
    progressive.set_defaults(func=_progressive)
    self_ = verbs.add_parser(
        "self", help="a model distilled into a fresh copy of itself from its own cache (born-again)",
        description="Caches MODEL's top-K over DATA and distils it into a model of the same architecture, "
        "from random weights (born-again) or from its own weights (--init copy). Rerun to resume.",
    )
    add_fields(self_, SelfRequest, positional=("model", "data"))
    self_.set_defaults(func=_self)
    for verb in (progressive, self_):
        add_fields(verb, RecipeOutput)
        add_fields(verb, RecipeSettings)
    _register_on_policy(verbs)
    _register_draft(verbs)


def _register_on_policy(verbs) -> None:
    on_policy = verbs.add_parser(
        "on-policy", help="rounds of: the student samples, one teacher pass scores the samples, the student trains",
        description="Each round the student answers the prompts, one teacher pass caches the teacher's top-K on "
        "those answers, and the student trains on that cache; teacher and student are never loaded together. "
        "After each round the student answers held-out prompts and its KL to the teacher on them is recorded. "
        "Killed at any moment, the same command resumes inside the stage it was in.",
    )
    add_fields(on_policy, OnPolicyRequest, positional=("teacher", "student"))
    add_fields(on_policy, RecipeOutput)
    add_fields(on_policy, OnPolicySettings)
    add_fields(on_policy.add_argument_group("loss (as for destila train)"), LossOptions, exclude=LOSS_FIELDS_LEFT_OUT)
    on_policy.set_defaults(func=_on_policy)


@dataclass
class DraftRequest:
    teacher: str = field(metadata={"help": MODEL_HELP, "metavar": "TEACHER"})


def _register_draft(verbs) -> None:
    draft = verbs.add_parser(
        "draft", help="a draft model for speculative decoding: sized by measured cost, distilled on the teacher's "
                      "own answers, measured with assisted generation",
        description="Measures how much a draft cut from TEACHER costs per token, has the teacher answer the "
        "prompts, caches its top-K on those answers, distils the draft from that cache, and measures it on "
        "held-out prompts: the teacher alone, with the draft and with prompt lookup (destila eval --draft). "
        "OUT ends as a model folder for generate(assistant_model=...). Rerun to resume.",
    )
    add_fields(draft, DraftRequest, positional=("teacher",))
    add_fields(draft, RecipeOutput)
    add_fields(draft, DraftSettings)
    draft.set_defaults(func=_draft)


def _draft(args) -> int:
    DraftRecipe(args.teacher, args.out, DraftSettings(**values_of(args, DraftSettings))).run()
    return 0


def _progressive(args) -> int:
    ProgressiveRecipe(args.teacher, args.data, args.out, args.stages, RecipeSettings(**values_of(args, RecipeSettings))).run()
    return 0


def _self(args) -> int:
    SelfRecipe(args.model, args.data, args.out, RecipeSettings(**values_of(args, RecipeSettings)), init=args.init).run()
    return 0


def _on_policy(args) -> int:
    settings = OnPolicySettings(**values_of(args, OnPolicySettings))
    loss = LossOptions(**values_of(args, LossOptions, exclude=LOSS_FIELDS_LEFT_OUT))
    OnPolicyRecipe(args.teacher, args.student, args.prompts, args.out, settings, loss).run()
    return 0
