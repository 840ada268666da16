"""`destila generate`: the teacher answers prompts; conversations are appended to a JSON-lines file."""

from __future__ import annotations

from destila.cli.fields import add_fields, values_of
from destila.generation import GenerateSpec, SamplingSpec, generate

_FIRST = ("teacher", "prompts", "output")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "generate",
        help="the teacher answers PROMPTS; writes conversations (JSON lines) for sequence-level distillation",
        description="Each prompt (a line of a .txt file, or a row of .jsonl/.json/.parquet with a 'messages' "
        "conversation or a 'prompt' text) is answered by TEACHER; every answer is appended to OUT as "
        '{"messages": [..., {"role": "assistant", ...}], "text": ...}. Killed at any point, the same command '
        "resumes; the finished file does not depend on where it was killed.",
    )
    add_fields(parser, GenerateSpec, positional=("teacher", "prompts"), only=_FIRST)
    add_fields(parser, SamplingSpec)
    add_fields(parser, GenerateSpec, exclude=(*_FIRST, "sampling"))
    parser.set_defaults(func=run)


def run(args) -> int:
    spec = GenerateSpec(**values_of(args, GenerateSpec, exclude=("sampling",)),
                        sampling=SamplingSpec(**values_of(args, SamplingSpec)))
    report = generate(spec)
    resumed = f" (resumed: {report.already_done} answered before)" if report.already_done else ""
    print(f"{report.path}: {report.written_prompts} prompts answered, {report.lines} lines written{resumed}; "
          f"{report.prompts} prompts in all")
    return 0
