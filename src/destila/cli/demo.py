"""`destila demo`: the whole pipeline on the embedded default teacher and Python's docs."""

from __future__ import annotations


def register(subparsers) -> None:
    from destila.demo import DemoSettings  # light: no torch at import

    demo = subparsers.add_parser(
        "demo",
        help="distil the embedded SmolLM2-135M on Python's docs, end to end, and write a report",
        description="cache build → student init → offline fused distillation → cross-entropy-only baseline "
        "→ evaluation → report. Rerun to resume; finished stages are skipped.",
    )
    demo.add_argument("--out", default="demo-out", help="output folder (default: demo-out)")
    demo.add_argument("--minutes", type=float, default=DemoSettings.minutes,
                      help=f"wall-clock budget; training time adapts to it (default: {DemoSettings.minutes:g})")
    demo.add_argument("--layers", type=int, default=DemoSettings.student_layers,
                      help=f"decoder layers of the student (default: {DemoSettings.student_layers})")
    demo.add_argument("--train-tokens", type=int, default=DemoSettings.train_tokens,
                      help=f"tokens cached for training (default: {DemoSettings.train_tokens})")
    demo.add_argument("--teacher", default=DemoSettings.teacher,
                      help="teacher (default: the embedded SmolLM2-135M)")
    demo.set_defaults(func=run)


def run(args) -> int:
    from destila.demo import Demo, DemoSettings

    settings = DemoSettings(teacher=args.teacher, minutes=args.minutes, student_layers=args.layers,
                            train_tokens=args.train_tokens)
    Demo(args.out, settings).run()
    return 0
