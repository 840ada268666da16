"""`destila eval`: models side by side on held-out data."""

from __future__ import annotations

import json
from pathlib import Path

from destila.cli.fields import add_fields, values_of
from destila.data.spec import DataSpec
from destila.eval.harness import TaskEvalSpec

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
    evaluate.add_argument("models", nargs="+", metavar="MODEL", help="model folders, .gguf files or 'smollm2'")
    source = evaluate.add_mutually_exclusive_group()
    source.add_argument("--cache", help="a top-K cache: its tokens, and the top-K bucket KL to its teacher")
    source.add_argument("--data", help="'pydoc', a .txt/.jsonl/.parquet/.csv file, a folder, or a datasets hub name")
    evaluate.add_argument("--teacher", help="also compute the full-vocabulary KL and agreement with this teacher")
    evaluate.add_argument("--eval-fraction", type=float, default=None,
                          help="with --cache: evaluate only the part `destila train --eval-fraction F` held out")
    evaluate.add_argument("--max-tokens", type=int, default=16384, help="evaluate at most this many tokens")
    add_fields(evaluate.add_argument_group("data (with --data)"), DataSpec, exclude=_NOT_FLAGS)
    evaluate.add_argument("--batch-size", type=int, default=4)
    evaluate.add_argument("--prompt", default=None, help="prompt for the generation-speed sample")
    evaluate.add_argument("--prompts", metavar="FILE", default=None,
                          help="prompts for the generation samples: a .txt file (one per line) or a .jsonl file "
                               "with `messages` (conversations) or `prompt`; chat models read them through their "
                               "chat template")
    evaluate.add_argument("--new-tokens", type=int, default=32, help="tokens generated for the speed measurement")
    evaluate.add_argument("--device", default="cpu")
    evaluate.add_argument("--json", metavar="PATH", help="write the results as JSON")
    add_fields(evaluate.add_argument_group("tasks (lm-evaluation-harness, extra destila[eval])"), TaskEvalSpec)
    evaluate.set_defaults(func=run)


def run(args) -> int:
    from rich.console import Console

    from destila.eval import render_table
    from destila.eval.harness import evaluate_tasks, prepare_tasks
    from destila.eval.task_table import render_task_table

    tasks = TaskEvalSpec(**values_of(args, TaskEvalSpec))
    held_out = args.cache is not None or args.data is not None
    if not held_out and tasks.tasks is None:
        raise ValueError("eval: nothing to evaluate; give --cache or --data (held-out metrics), --tasks (task "
                         "accuracy), or both")
    ignored = tasks.given_without_tasks()
    if not held_out:
        ignored += [flag for flag, given in (("--teacher", args.teacher), ("--eval-fraction", args.eval_fraction),
                                             ("--prompt", args.prompt), ("--prompts", args.prompts)) if given]
    if ignored:
        raise ValueError(f"eval: {', '.join(ignored)} would be ignored here; "
                         f"{'they go with --tasks' if tasks.tasks is None else 'they go with --cache or --data'}")
    if args.prompt is not None and args.prompts is not None:
        raise ValueError("eval: --prompt and --prompts: give one of them")
    # Checked before any model is loaded: a missing extra or an unreachable hub fails in seconds, not after the
    # held-out evaluation.
    selection = prepare_tasks(tasks) if tasks.tasks is not None else None
    console = Console()
    results = [{"model": model} for model in args.models]
    if held_out:
        results = _held_out(args, console)
        console.print(render_table(results))
    if selection is not None:
        scores = evaluate_tasks(args.models, tasks, batch_size=args.batch_size, device=args.device,
                                selection=selection, log=console.print)
        for result, score in zip(results, scores):
            result.update(tasks=score["tasks"], tasks_settings=score["settings"],
                          tasks_chat_template_applied=score["chat_template_applied"],
                          tasks_seconds=score["seconds"])
        console.print(render_task_table(scores))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
        print(f"results written to {args.json}")
    return 0


def _held_out(args, console) -> list[dict]:
    from destila.eval import DEFAULT_PROMPT, evaluate_models

    indices = None
    if args.eval_fraction is not None:
        if args.cache is None:
            raise ValueError("--eval-fraction: only meaningful with --cache")
        from destila.cache import TopKCache
        from destila.training.datasets import split_indices

        indices = split_indices(len(TopKCache(args.cache)), args.eval_fraction)[1]
    return evaluate_models(
        args.models, cache=args.cache, indices=indices, teacher=args.teacher,
        data=DataSpec(args.data, **values_of(args, DataSpec, exclude=_NOT_FLAGS)).describe()
        if args.data is not None else None,
        max_tokens=args.max_tokens,
        batch_size=args.batch_size, prompt=args.prompt or DEFAULT_PROMPT, prompts=args.prompts,
        new_tokens=args.new_tokens, device=args.device, progress=True,
    )
