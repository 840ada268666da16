"""`destila student init`: a student cut from the teacher (chosen by count, list or measurement), or built fresh."""

from __future__ import annotations

from destila.student.layers import CRITERIA, SELECTIONS, format_layer_list, parse_layers  # no torch: --help stays fast


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
    init.add_argument("teacher", help="teacher: HF folder, hub id, .gguf file, or 'smollm2' (embedded default)")
    init.add_argument("-o", "--out", required=True, help="output folder (must not exist or be empty)")
    how = init.add_mutually_exclusive_group()
    how.add_argument("--layers", type=_layers,
                     help="a count (N layers chosen by --select) or explicit teacher layers such as 0-7,27-29")
    how.add_argument(
        "--config", nargs="+", metavar="JSON|KEY=VALUE",
        help="fresh random model of the teacher's architecture with these config changes "
        "(a .json file, a JSON object, or key=value pairs, e.g. num_hidden_layers=4 hidden_size=256)",
    )
    pick = init.add_argument_group("layer selection (with --layers N)")
    pick.add_argument("--select", choices=SELECTIONS,
                      help="even: evenly spaced, first and last kept (the default); importance: the layers whose "
                      "removal costs most on calibration text; contiguous: drop the block of consecutive layers "
                      "that changes the hidden states least (both need --cache or --data)")
    pick.add_argument("--criterion", choices=CRITERIA,
                      help="importance measure: skip_kl (KL to the teacher with the layer skipped; default) or "
                      "block_influence (1 - cosine between the layer's input and output; one teacher pass instead of about "
                      "half a pass per layer)")
    width = init.add_argument_group(
        "width pruning (keeps the channels, neurons and heads that matter on the calibration text)")
    width.add_argument("--hidden-size", type=int, help="residual stream width of the student")
    width.add_argument("--intermediate-size", type=int, help="MLP width of the student")
    width.add_argument("--num-attention-heads", type=int, help="query heads per layer (head_dim stays the teacher's)")
    width.add_argument("--num-key-value-heads", type=int,
                       help="key/value heads per layer (default: the teacher's, or as few as the head count allows)")
    text = init.add_argument_group(
        "calibration text (for --select importance|contiguous, width pruning and the starting perplexity)")
    source = text.add_mutually_exclusive_group()
    source.add_argument("--cache", metavar="CACHE", help="take the calibration tokens from this cache's input_ids")
    source.add_argument("--data", metavar="DATA",
                        help="take them from this data: pydoc, a .txt/.jsonl/.parquet/.csv file or a folder")
    text.add_argument("--text-field", default="text", help="field holding the text in --data rows (default: text)")
    text.add_argument("--calibration-tokens", type=int,
                      help="about this many calibration tokens; a quarter of the rows is held out for the "
                      "perplexity (default: 4096)")
    init.add_argument("--gguf-file", help="GGUF file name inside the teacher folder")
    init.add_argument("--seed", type=int, help="seed for a fresh model's initialisation (with --config; default 0)")
    init.set_defaults(func=run_init)


def _layers(text: str):
    try:
        return parse_layers(text)
    except ValueError as err:
        import argparse

        raise argparse.ArgumentTypeError(str(err).removeprefix("--layers: ")) from None


def run_init(args) -> int:
    from destila.student import init_student, parse_config_overrides

    if args.seed is not None and args.config is None:
        raise ValueError("--seed: seeds a fresh model's initialisation (--config); a cut copies the teacher's weights")
    if args.text_field != "text" and args.data is None:
        raise ValueError("--text-field: applies to --data only; add --data DATA or drop it")
    summary = init_student(
        args.teacher,
        args.out,
        layers=args.layers,
        select=args.select,
        criterion=args.criterion,
        cache=args.cache,
        data=args.data,
        text_field=args.text_field,
        calibration_tokens=args.calibration_tokens,
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_attention_heads=args.num_attention_heads,
        num_key_value_heads=args.num_key_value_heads,
        config_overrides=parse_config_overrides(args.config) if args.config else None,
        gguf_file=args.gguf_file,
        seed=0 if args.seed is None else args.seed,
        progress=True,
    )
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
    if summary["start_perplexity"] is not None:
        which = "held-out" if summary["perplexity_held_out"] else "(not held out: one row only)"
        print(f"starting perplexity on {summary['perplexity_tokens']:,} {which} calibration tokens: "
              f"{summary['start_perplexity']:.2f} (teacher {summary['teacher_perplexity']:.2f})")
    return 0
