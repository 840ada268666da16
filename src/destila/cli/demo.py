"""`destila demo`: the whole pipeline on the embedded default teacher and Python's docs."""

from __future__ import annotations

from destila.student.layers import format_layer_list, parse_layer_list


def register(subparsers) -> None:
    from destila.demo import DemoSettings  # light: no torch at import

    defaults = DemoSettings()
    layers = format_layer_list(defaults.student_layers)
    demo = subparsers.add_parser(
        "demo",
        help="distil the embedded SmolLM2-135M on Python's docs, end to end, and write a report",
        description="cache build → student init → offline fused distillation → cross-entropy-only baseline "
        "→ evaluation → report, all inside --minutes. Rerun to resume; finished stages are skipped.",
    )
    demo.add_argument("--out", default="demo-out", help="output folder (default: demo-out)")
    demo.add_argument("--minutes", type=float, default=defaults.minutes,
                      help="wall-clock budget of the whole run; the cache size and the training steps are sized "
                      f"from measured speed to fit it (default: {defaults.minutes:g})")
    demo.add_argument("--layers", default=layers,
                      help=f"teacher layers the student keeps, e.g. 0-5,29 (default: {layers})")
    demo.add_argument("--train-tokens", type=int, default=defaults.train_tokens,
                      help=f"at most this many cached training tokens (default: {defaults.train_tokens})")
    demo.add_argument("--seeds", type=int, default=defaults.seeds,
                      help="train every student with this many seeds and report the spread (default: 1)")
    demo.add_argument("--teacher", default=defaults.teacher, help="teacher (default: the embedded SmolLM2-135M)")
    demo.add_argument("--force", action="store_true",
                      help=f"train even when fewer than {defaults.min_steps} steps per student fit in --minutes "
                      "(the demo otherwise refuses before training); the report's first line then says so")
    demo.set_defaults(func=run)


def run(args) -> int:
    from destila.demo import Demo, DemoSettings

    settings = DemoSettings(teacher=args.teacher, minutes=args.minutes, student_layers=parse_layer_list(args.layers),
                            train_tokens=args.train_tokens, seeds=args.seeds, force=args.force)
    Demo(args.out, settings).run()
    return 0
