"""`destila recipe progressive|self|on-policy`: multi-stage distillation recipes, resumable, with a report."""

from __future__ import annotations

from destila.cli.fields import add_fields, values_of


def register(subparsers) -> None:
    from destila.recipes.common import RecipeSettings  # light: torch is imported when a recipe runs

    parser = subparsers.add_parser("recipe", help="progressive, self- or on-policy distillation, as resumable stages")
    verbs = parser.add_subparsers(dest="verb", metavar="RECIPE", required=True)
    progressive = verbs.add_parser(
        "progressive", help="teacher → smaller assistant(s) → student, each distilled from the previous one",
        description="Each stage cuts its model from the previous one (evenly spaced layers), caches the previous "
        "model's top-K over DATA and distils from that cache; every model is then evaluated on held-out "
        "documents against the teacher. Rerun to resume; finished stages are skipped.",
    )
    progressive.add_argument("teacher", metavar="TEACHER", help="HF model folder, hub id, .gguf file, or 'smollm2'")
    progressive.add_argument("data", metavar="DATA", help="'pydoc', a text file or folder (as for cache build)")
    progressive.add_argument("--stages", required=True, help="layer counts of the models in turn, e.g. 15,6")
    progressive.set_defaults(func=_progressive)
    self_ = verbs.add_parser(
        "self", help="a model distilled into a fresh copy of itself from its own cache (born-again)",
        description="Caches MODEL's top-K over DATA and distils it into a model of the same architecture, "
        "from random weights (born-again) or from its own weights (--init copy). Rerun to resume.",
    )
    self_.add_argument("model", metavar="MODEL", help="teacher or student: HF model folder, hub id, .gguf, 'smollm2'")
    self_.add_argument("data", metavar="DATA", help="'pydoc', a text file or folder (as for cache build)")
    self_.add_argument("--init", default="random", choices=["random", "copy"],
                       help="weights the copy starts from (default: random, the born-again setting)")
    self_.set_defaults(func=_self)
    for verb in (progressive, self_):
        verb.add_argument("-o", "--out", required=True, help="output folder (created, or resumed)")
        add_fields(verb, RecipeSettings)
    _register_on_policy(verbs)


def _register_on_policy(verbs) -> None:
    from destila.losses.options import LossOptions
    from destila.recipes.on_policy import LOSS_FIELDS_LEFT_OUT, OnPolicySettings

    on_policy = verbs.add_parser(
        "on-policy", help="rounds of: the student samples, one teacher pass scores the samples, the student trains",
        description="Each round the student answers the prompts, one teacher pass caches the teacher's top-K on "
        "those answers, and the student trains on that cache; teacher and student are never loaded together. "
        "After each round the student answers held-out prompts and its KL to the teacher on them is recorded. "
        "Killed at any moment, the same command resumes inside the stage it was in.",
    )
    on_policy.add_argument("teacher", metavar="TEACHER", help="HF model folder, hub id, .gguf file, or 'smollm2'")
    on_policy.add_argument("student", metavar="STUDENT", help="the starting student (shares the teacher's tokenizer)")
    on_policy.add_argument("--prompts", required=True, metavar="PROMPTS",
                           help=".txt (one prompt per line), or .jsonl/.json/.parquet rows with a 'messages' "
                           "conversation or a 'prompt' text (a 'completion' beside it is not used)")
    on_policy.add_argument("-o", "--out", required=True, help="output folder (created, or resumed)")
    add_fields(on_policy, OnPolicySettings)
    add_fields(on_policy.add_argument_group("loss (as for destila train)"), LossOptions, exclude=LOSS_FIELDS_LEFT_OUT)
    on_policy.set_defaults(func=_on_policy)


def _progressive(args) -> int:
    from destila.recipes import ProgressiveRecipe, RecipeSettings

    ProgressiveRecipe(args.teacher, args.data, args.out, args.stages, RecipeSettings(**values_of(args, RecipeSettings))).run()
    return 0


def _self(args) -> int:
    from destila.recipes import RecipeSettings, SelfRecipe

    SelfRecipe(args.model, args.data, args.out, RecipeSettings(**values_of(args, RecipeSettings)), init=args.init).run()
    return 0


def _on_policy(args) -> int:
    from destila.losses.options import LossOptions
    from destila.recipes.on_policy import LOSS_FIELDS_LEFT_OUT, OnPolicyRecipe, OnPolicySettings

    settings = OnPolicySettings(**values_of(args, OnPolicySettings))
    loss = LossOptions(**values_of(args, LossOptions, exclude=LOSS_FIELDS_LEFT_OUT))
    OnPolicyRecipe(args.teacher, args.student, args.prompts, args.out, settings, loss).run()
    return 0
