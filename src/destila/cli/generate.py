"""`destila generate`: the teacher answers prompts; conversations are appended to a JSON-lines file."""

from __future__ import annotations

from destila.cli.fields import add_fields, values_of


def register(subparsers) -> None:
    from destila.generation.run import GenerateSpec  # light: torch is imported when generating

    parser = subparsers.add_parser(
        "generate",
        help="the teacher answers PROMPTS; writes conversations (JSON lines) for sequence-level distillation",
        description="Each prompt (a line of a .txt file, or a row of .jsonl/.json/.parquet with a 'messages' "
        "conversation or a 'prompt' text) is answered by TEACHER; every answer is appended to OUT as "
        '{"messages": [..., {"role": "assistant", ...}], "text": ...}. Killed at any point, the same command '
        "resumes; the finished file does not depend on where it was killed.",
    )
    parser.add_argument("teacher", metavar="TEACHER", help="HF model folder, hub id, .gguf file, or 'smollm2'")
    parser.add_argument("prompts", metavar="PROMPTS", help=".txt (one prompt per line), .jsonl, .json or .parquet")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="JSON-lines file (created, or resumed)")
    add_fields(parser, GenerateSpec)
    parser.add_argument("--prompt-field", default="prompt", help="field of text prompts (default: prompt)")
    parser.add_argument("--messages-field", default="messages", help="field of conversations (default: messages)")
    parser.add_argument("--gguf-file", help="GGUF file name inside the TEACHER folder")
    parser.add_argument("--batch-size", type=int, default=8, help="prompts per generate call (default: 8)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, … (default: cpu)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args) -> int:
    from destila.generation import GenerateSpec, generate

    spec = GenerateSpec(**values_of(args, GenerateSpec))
    report = generate(
        args.teacher, args.prompts, args.output, spec, gguf_file=args.gguf_file, prompt_field=args.prompt_field,
        messages_field=args.messages_field, batch_size=args.batch_size, device=args.device, progress=not args.quiet,
    )
    resumed = f" (resumed: {report.already_done} answered before)" if report.already_done else ""
    print(f"{report.path}: {report.written_prompts} prompts answered, {report.lines} lines written{resumed}; "
          f"{report.prompts} prompts in all")
    return 0
