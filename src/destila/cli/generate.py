"""`destila generate`: the teacher answers prompts; conversations are appended to a JSON-lines file."""

from __future__ import annotations

from dataclasses import dataclass, field

from destila.cli.fields import MODEL_HELP, add_fields, values_of
from destila.generation import GenerateSpec, generate


@dataclass
class GenerateInputs:
    """The command's own flags, beside the sampling spec: what is read, where it is written, how it runs."""

    teacher: str = field(metadata={"help": MODEL_HELP, "metavar": "TEACHER"})
    prompts: str = field(metadata={
        "help": ".txt (one prompt per line), .jsonl, .json or .parquet", "metavar": "PROMPTS"})
    output: str = field(metadata={
        "help": "JSON-lines file (created, or resumed)", "metavar": "OUT", "aliases": ["-o"]})
    prompt_field: str = field(default="prompt", metadata={"help": "field of text prompts"})
    messages_field: str = field(default="messages", metadata={"help": "field of conversations"})
    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file name inside the TEACHER folder"})
    batch_size: int = field(default=8, metadata={"help": "prompts per generate call"})
    device: str = field(default="cpu", metadata={"help": "cpu, cuda, cuda:1, …"})
    quiet: bool = field(default=False, metadata={"help": "no progress bar"})


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "generate",
        help="the teacher answers PROMPTS; writes conversations (JSON lines) for sequence-level distillation",
        description="Each prompt (a line of a .txt file, or a row of .jsonl/.json/.parquet with a 'messages' "
        "conversation or a 'prompt' text) is answered by TEACHER; every answer is appended to OUT as "
        '{"messages": [..., {"role": "assistant", ...}], "text": ...}. Killed at any point, the same command '
        "resumes; the finished file does not depend on where it was killed.",
    )
    add_fields(parser, GenerateInputs, positional=("teacher", "prompts"), only=("teacher", "prompts", "output"))
    add_fields(parser, GenerateSpec)
    add_fields(parser, GenerateInputs, exclude=("teacher", "prompts", "output"))
    parser.set_defaults(func=run)


def run(args) -> int:
    spec = GenerateSpec(**values_of(args, GenerateSpec))
    report = generate(
        args.teacher, args.prompts, args.output, spec, gguf_file=args.gguf_file, prompt_field=args.prompt_field,
        messages_field=args.messages_field, batch_size=args.batch_size, device=args.device, progress=not args.quiet,
    )
    resumed = f" (resumed: {report.already_done} answered before)" if report.already_done else ""
    print(f"{report.path}: {report.written_prompts} prompts answered, {report.lines} lines written{resumed}; "
          f"{report.prompts} prompts in all")
    return 0
