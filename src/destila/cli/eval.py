"""`destila eval`: models side by side on held-out data."""

from __future__ import annotations

import json

from destila.cli.eval_draft import measure
from destila.cli.fields import add_fields, given_flags, values_of
from destila.data.spec import DataSpec
from destila.draft.spec import DraftEvalSpec
from destila.eval import evaluate_models, render_table
from destila.eval.harness import TaskEvalSpec, evaluate_tasks, prepare_tasks
from destila.eval.spec import SOURCES, EvalSpec
from destila.eval.task_table import render_task_table
from destila.io import write_report_file

# DataSpec fields that are not eval's data flags: DATA and --max-tokens are its own, and --num-proc could never be
# honoured (eval reads at most --max-tokens tokens, in order, in one process).
_NOT_FLAGS = ("source", "max_tokens", "num_proc")


def register(subparsers) -> None:
    evaluate = subparsers.add_parser(
        "eval",
        help="compare models on held-out data (perplexity, agreement and KL to the teacher, speed, size, memory) "
             "and on lm-evaluation-harness tasks",
        description="Each model is evaluated in its own process. Ratios are to the first model (usually the teacher). "
                    "Give --cache or --data (held-out metrics), --tasks (task accuracy), or both.",
    )
    add_fields(evaluate, EvalSpec, positional=("models",), only=("models",))
    add_fields(evaluate.add_mutually_exclusive_group(), EvalSpec, only=SOURCES)
    add_fields(evaluate, EvalSpec, only=("teacher", "eval_fraction", "max_tokens"))
    add_fields(evaluate.add_argument_group("data (with --data)"), DataSpec, exclude=_NOT_FLAGS)
    add_fields(evaluate, EvalSpec, exclude=("models", *SOURCES, "teacher", "eval_fraction", "max_tokens"))
    add_fields(evaluate.add_argument_group("tasks (lm-evaluation-harness, extra destila[eval])"), TaskEvalSpec)
    add_fields(evaluate.add_argument_group("draft (speculative decoding: MODEL is the teacher)"), DraftEvalSpec)
    evaluate.set_defaults(func=run)


def run(args) -> int:
    # rich: only when the table is printed (not for `destila eval --help`)
    from rich.console import Console

    if args.draft is not None:
        return measure(args)
    given = given_flags(args, DraftEvalSpec, exclude=("draft",))
    if given:
        raise ValueError(f"eval: {', '.join(given)} would be ignored here; they go with --draft DRAFT")
    values = values_of(args, EvalSpec)
    if values["data"] is not None:
        values["data"] = DataSpec(values["data"], **values_of(args, DataSpec, exclude=_NOT_FLAGS))
    spec = EvalSpec(**values)
    tasks = TaskEvalSpec(**values_of(args, TaskEvalSpec))
    if not spec.held_out and tasks.tasks is None:
        raise ValueError("eval: nothing to evaluate; give --cache or --data (held-out metrics), --tasks (task "
                         "accuracy), or both")
    ignored = tasks.given_without_tasks() + spec.ignored_without_held_out()
    if ignored:
        raise ValueError(f"eval: {', '.join(ignored)} would be ignored here; "
                         f"{'they go with --tasks' if tasks.tasks is None else 'they go with --cache or --data'}")
    # Checked before any model is loaded: a missing extra or an unreachable hub fails in seconds, not after the
    # held-out evaluation (a model path that is not there already failed in EvalSpec).
    selection = prepare_tasks(tasks) if tasks.tasks is not None else None
    console = Console()
    results = [{"model": model} for model in spec.models]
    if spec.held_out:
        results = evaluate_models(spec, progress=True)
        console.print(render_table(results))
    if selection is not None:
        scores = evaluate_tasks(spec.models, tasks, batch_size=spec.batch_size, device=spec.device,
                                selection=selection, log=console.print)
        for result, score in zip(results, scores):
            result.update(tasks=score["tasks"], tasks_settings=score["settings"],
                          tasks_chat_template_applied=score["chat_template_applied"],
                          tasks_seconds=score["seconds"])
        console.print(render_task_table(scores))
    if spec.json:
        write_report_file(spec.json, json.dumps(results, indent=2))
        print(f"results written to {spec.json}")
    return 0
