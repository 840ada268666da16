"""`destila eval`: models side by side on held-out data."""

from __future__ import annotations

import json
from pathlib import Path

from destila.cache import TopKCache
from destila.cli.fields import add_fields, values_of
from destila.data.spec import DataSpec
from destila.eval import DEFAULT_PROMPT, evaluate_models, render_table

# DataSpec fields that are not eval's data flags: DATA and --max-tokens are its own, and --num-proc could never be
# honoured (eval reads at most --max-tokens tokens, in order, in one process).
_NOT_FLAGS = ("source", "max_tokens", "num_proc")


def register(subparsers) -> None:
    evaluate = subparsers.add_parser(
        "eval",
        help="compare models on held-out data (perplexity, agreement and KL to the teacher, speed, size, memory)",
        description="Each model is evaluated in its own process. Ratios are to the first model (usually the teacher).",
    )
    evaluate.add_argument("models", nargs="+", metavar="MODEL", help="model folders, .gguf files or 'smollm2'")
    source = evaluate.add_mutually_exclusive_group(required=True)
    source.add_argument("--cache", help="a top-K cache: its tokens, and the top-K bucket KL to its teacher")
    source.add_argument("--data", help="'pydoc', a .txt/.jsonl/.parquet/.csv file, a folder, or a datasets hub name")
    evaluate.add_argument("--teacher", help="also compute the full-vocabulary KL and agreement with this teacher")
    evaluate.add_argument("--eval-fraction", type=float, default=None,
                          help="with --cache: evaluate only the part `destila train --eval-fraction F` held out")
    evaluate.add_argument("--max-tokens", type=int, default=16384, help="evaluate at most this many tokens")
    add_fields(evaluate.add_argument_group("data (with --data)"), DataSpec, exclude=_NOT_FLAGS)
    evaluate.add_argument("--batch-size", type=int, default=4)
    evaluate.add_argument("--prompt", default=None, help="prompt for the generation-speed sample")
    evaluate.add_argument("--new-tokens", type=int, default=32, help="tokens generated for the speed measurement")
    evaluate.add_argument("--device", default="cpu")
    evaluate.add_argument("--json", metavar="PATH", help="write the results as JSON")
    evaluate.set_defaults(func=run)


def run(args) -> int:
    from rich.console import Console

    indices = None
    if args.eval_fraction is not None:
        if args.cache is None:
            raise ValueError("--eval-fraction: only meaningful with --cache")
        from destila.training.datasets import split_indices  # heavy: transformers; kept out of `destila --help`

        indices = split_indices(len(TopKCache(args.cache)), args.eval_fraction)[1]
    results = evaluate_models(
        args.models, cache=args.cache, indices=indices, teacher=args.teacher,
        data=DataSpec(args.data, **values_of(args, DataSpec, exclude=_NOT_FLAGS)).describe()
        if args.data is not None else None,
        max_tokens=args.max_tokens,
        batch_size=args.batch_size, prompt=args.prompt or DEFAULT_PROMPT, new_tokens=args.new_tokens,
        device=args.device,
    )
    Console().print(render_table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
        print(f"results written to {args.json}")
    return 0
