"""`destila demo`: the whole pipeline on the embedded default teacher and Python's docs."""

from __future__ import annotations


def register(subparsers) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="distil the embedded SmolLM2-135M on Python's docs, end to end, and write a report",
        description="cache build → student init → offline fused distillation → cross-entropy-only baseline "
        "→ evaluation → report. Rerun to resume; finished stages are skipped.",
    )
    demo.add_argument("--out", default="demo-out", help="output folder (default: demo-out)")
    demo.add_argument("--minutes", type=float, default=10.0,
                      help="wall-clock budget; training time adapts to it (default: 10)")
    demo.add_argument("--layers", type=int, default=6, help="decoder layers of the student (default: 6)")
    demo.add_argument("--train-tokens", type=int, default=24576, help="tokens cached for training")
    demo.add_argument("--teacher", default="smollm2", help="teacher (default: the embedded SmolLM2-135M)")
    demo.set_defaults(func=run)


def run(args) -> int:
    from destila.demo import Demo, DemoSettings

    settings = DemoSettings(teacher=args.teacher, minutes=args.minutes, student_layers=args.layers,
                            train_tokens=args.train_tokens)
    Demo(args.out, settings).run()
    return 0
