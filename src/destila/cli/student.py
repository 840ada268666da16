"""`destila student init`: a student cut from the teacher or built fresh from its config."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    student = subparsers.add_parser("student", help="create a student model")
    verbs = student.add_subparsers(dest="verb", metavar="VERB", required=True)
    init = verbs.add_parser(
        "init",
        help="cut N evenly spaced layers from the teacher, or build a fresh smaller model (--config)",
        description="Writes an HF folder (safetensors + tokenizer) loadable by AutoModelForCausalLM.",
    )
    init.add_argument("teacher", help="teacher: HF folder, hub id, .gguf file, or 'smollm2' (embedded default)")
    init.add_argument("-o", "--out", required=True, help="output folder (must not exist or be empty)")
    how = init.add_mutually_exclusive_group(required=True)
    how.add_argument("--layers", type=int, help="keep this many evenly spaced decoder layers of the teacher")
    how.add_argument(
        "--config", nargs="+", metavar="JSON|KEY=VALUE",
        help="fresh random model of the teacher's architecture with these config changes "
        "(a .json file, a JSON object, or key=value pairs, e.g. num_hidden_layers=4 hidden_size=256)",
    )
    init.add_argument("--gguf-file", help="GGUF file name inside the teacher folder")
    init.add_argument("--seed", type=int, default=0, help="seed for a fresh model's initialisation")
    init.set_defaults(func=run_init)


def run_init(args) -> int:
    from destila.student import init_student, parse_config_overrides

    summary = init_student(
        args.teacher,
        args.out,
        layers=args.layers,
        config_overrides=parse_config_overrides(args.config) if args.config else None,
        gguf_file=args.gguf_file,
        seed=args.seed,
    )
    ratio = summary["student_parameters"] / summary["teacher_parameters"]
    print(
        f"student: {summary['student_layers']} of {summary['teacher_layers']} layers, "
        f"{summary['student_parameters'] / 1e6:.1f}M parameters ({ratio:.0%} of the teacher) -> {summary['out']}"
    )
    if summary["method"] == "cut":
        print(f"kept teacher layers: {json.dumps(summary['kept_layers'])}")
    return 0
