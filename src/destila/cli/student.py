"""`destila student init`: a student cut from the teacher (chosen by count, list or measurement), or built fresh."""

from __future__ import annotations

from destila.cli.fields import add_fields, values_of
from destila.crosstok.spec import TokenizerSpec
from destila.student.layers import format_layer_list
from destila.student.spec import StudentInitSpec


def register(subparsers) -> None:
    student = subparsers.add_parser("student", help="create a student model")
    verbs = student.add_subparsers(dest="verb", metavar="VERB", required=True)
    init = verbs.add_parser(
        "init",
        help="cut layers from the teacher (evenly spaced, listed, or chosen by measured importance), "
        "or build a fresh smaller model (--config)",
        description="Writes an HF folder (safetensors + tokenizer + destila_student.json) loadable by "
        "AutoModelForCausalLM. With calibration text (--cache or --data) it prints the student's starting "
        "perplexity on held-out calibration rows.",
    )
    add_fields(init, StudentInitSpec, positional=("teacher",), only=("teacher", "out"))
    add_fields(init.add_mutually_exclusive_group(), StudentInitSpec, only=("layers", "config"))
    add_fields(init.add_argument_group("layer selection (with --layers N)"), StudentInitSpec,
               only=("select", "criterion"))
    add_fields(init.add_argument_group(
        "width pruning (keeps the channels, neurons and heads that matter on the calibration text)"),
        StudentInitSpec, only=("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads"))
    text = init.add_argument_group(
        "calibration text (for --select importance|contiguous, width pruning and the starting perplexity)")
    add_fields(text.add_mutually_exclusive_group(), StudentInitSpec, only=("cache", "data"))
    add_fields(text, StudentInitSpec, only=("text_field", "calibration_tokens"))
    add_fields(init, StudentInitSpec, only=("gguf_file", "seed", "tokenizer"))
    init.set_defaults(func=run_init)
    tokenizer = verbs.add_parser(
        "tokenizer", help="train a student tokenizer (another vocabulary than the teacher's) on local text",
        description="Trains a BPE tokenizer with Hugging Face tokenizers and saves it as a folder AutoTokenizer "
        "loads; with --teacher it has the teacher's special tokens and chat template. Give it to `destila student "
        "init --tokenizer DIR` (see docs/cross_tokenizer.md).",
    )
    add_fields(tokenizer, TokenizerSpec, positional=("data",))
    tokenizer.set_defaults(func=run_tokenizer)


def run_tokenizer(args) -> int:
    from destila.crosstok import train_tokenizer  # heavy: tokenizers and transformers, kept out of `destila --help`

    spec = TokenizerSpec(**values_of(args, TokenizerSpec))
    trained = train_tokenizer(spec)
    print(f"tokenizer: {len(trained):,} tokens ({spec.style}) trained on {spec.data} -> {spec.out}")
    return 0


def run_init(args) -> int:
    from destila.student import init_student  # heavy: torch, kept out of `destila --help`

    summary = init_student(StudentInitSpec(**values_of(args, StudentInitSpec)), progress=True)
    ratio = summary["student_parameters"] / summary["teacher_parameters"]
    print(
        f"student: {summary['student_layers']} of {summary['teacher_layers']} layers, "
        f"{summary['student_parameters']:,} parameters ({ratio:.0%} of the teacher's "
        f"{summary['teacher_parameters']:,}) -> {summary['out']}"
    )
    if summary["method"] != "fresh":
        print(f"kept teacher layers: {format_layer_list(summary['kept_layers'])} ({summary['select']})")
    if "width" in summary:
        print("width: " + ", ".join(f"{key} {value}" for key, value in summary["width"].items()))
    if "vocabulary" in summary and "copied" in summary["vocabulary"]:
        v = summary["vocabulary"]
        print(f"vocabulary: {v['vocab_size']:,} tokens of {v['tokenizer']}: {v['copied']:,} rows copied from the "
              f"teacher (same bytes), {v['composed']:,} built from their pieces, {v['mean']:,} the mean row")
    if summary["start_perplexity"] is not None:
        which = "held-out" if summary["perplexity_held_out"] else "(not held out: one row only)"
        print(f"starting perplexity on {summary['perplexity_tokens']:,} {which} calibration tokens: "
              f"{summary['start_perplexity']:.2f} (teacher {summary['teacher_perplexity']:.2f})")
    return 0
