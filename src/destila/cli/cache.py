"""`destila cache build|inspect|verify`: thin commands over :mod:`destila.cache`."""

from __future__ import annotations

import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("cache", help="build, inspect or verify a teacher's top-K cache")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    build = verbs.add_parser(
        "build",
        help="run the teacher once over DATA and store its top-K distributions in CACHE",
        description="Run the teacher once and store, per token, its top-K log-probs and the log-mass left out. "
        "Killed at any point, the same command resumes. Under `torchrun --nproc-per-node N -m destila cache "
        "build …` the sequences are split across the processes.",
    )
    build.add_argument("teacher", metavar="TEACHER", help="HF model folder, hub id, .gguf file, or 'smollm2'")
    build.add_argument(
        "data", metavar="DATA",
        help="'pydoc', a .txt/.jsonl/.parquet/.csv file, a folder of them, or a folder datasets can load",
    )
    build.add_argument("-o", "--output", required=True, metavar="CACHE", help="cache folder (created, or resumed)")
    build.add_argument("--gguf-file", help="GGUF file name inside the TEACHER folder")
    build.add_argument("--text-field", default="text", help="field holding the text in jsonl/parquet/csv (default: text)")
    build.add_argument("--seq-len", type=int, default=512, help="tokens per packed sequence (default: 512)")
    build.add_argument("--max-tokens", type=int, help="stop after this many tokens (whole sequences)")
    build.add_argument("--top-k", type=int, default=100, help="teacher ids kept per position (default: 100)")
    build.add_argument("--temperature", type=float, default=1.0, help="teacher logits are divided by T (default: 1.0)")
    build.add_argument(
        "--logprob-dtype", default="float16", choices=["float16", "bfloat16", "float32"],
        help="storage dtype of the top-K log-probs (default: float16)",
    )
    build.add_argument("--batch-size", type=int, default=8, help="sequences per teacher forward (default: 8)")
    build.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, … (default: cpu)")
    build.add_argument(
        "--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
        help="teacher weights dtype (default: as stored)",
    )
    build.add_argument("--shard-size", type=int, default=128, help="sequences per shard file (default: 128)")
    build.add_argument("--chunk-size", type=int, default=1024, help="rows per output-head chunk (default: 1024)")
    build.add_argument("--quiet", action="store_true", help="no progress bar; one log line per shard")
    build.set_defaults(func=_build)

    inspect = verbs.add_parser("inspect", help="counts, sizes and teacher-distribution statistics of a cache")
    inspect.add_argument("cache", metavar="CACHE")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    inspect.add_argument("--max-sequences", type=int, help="compute the statistics on the first N sequences only")
    inspect.set_defaults(func=_inspect)

    verify = verbs.add_parser("verify", help="check every shard's checksum, shapes and values; exit 1 if any fault")
    verify.add_argument("cache", metavar="CACHE")
    verify.set_defaults(func=_verify)


def _build(args) -> int:
    import logging

    from destila.cache import build_cache

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        report = build_cache(
            args.teacher, args.data, args.output, gguf_file=args.gguf_file, text_field=args.text_field,
            seq_len=args.seq_len, max_tokens=args.max_tokens, top_k=args.top_k, temperature=args.temperature,
            logprob_dtype=args.logprob_dtype, batch_size=args.batch_size, device=args.device, dtype=args.dtype,
            shard_size=args.shard_size, chunk_size=args.chunk_size, progress=not args.quiet,
        )
    except Exception as err:  # a full disk reported by a Rust writer names no file: name the cache folder
        from destila.fs_errors import as_os_error

        disguised = as_os_error(err, args.output)
        if disguised is None or disguised is err:
            raise  # main prints it as one line (exit 2 for arguments, 1 for the disk)
        raise disguised from err
    if report.rank != 0:
        return 0
    if report.nothing_to_do:
        print(f"{report.path}: already complete ({report.sequences:,} sequences, {report.tokens:,} tokens): nothing to do")
        return 0
    resumed = f", resumed after {report.already_stored:,} stored" if report.already_stored else ""
    ranks = f" on rank 0 of {report.world_size}" if report.world_size > 1 else ""
    print(
        f"{report.path}: wrote {report.written_sequences:,} sequences ({report.written_tokens:,} tokens){ranks} "
        f"in {report.pass_seconds:.1f} s, {report.tokens_per_second:,.0f} tokens/s{resumed}; "
        + ("cache complete" if report.complete else "cache INCOMPLETE: run the same command again")
        + f" ({report.sequences:,} sequences)"
    )
    return 0 if report.complete else 1


def _inspect(args) -> int:
    import json

    from destila.cache.stats import format_summary, inspect_cache

    summary = inspect_cache(args.cache, max_sequences=args.max_sequences)
    print(json.dumps(summary, indent=1) if args.json else format_summary(summary))
    return 0


def _verify(args) -> int:
    from destila.cache import verify_cache

    report = verify_cache(args.cache)
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for fault in report.faults:
        print(f"FAULT {fault}")
    status = "OK" if report.ok else f"{len(report.faults)} fault(s)"
    print(
        f"{report.path}: {status}: {report.shards_checked} shards checked, {report.stored_sequences:,} of "
        f"{report.sequences:,} sequences, max |log Σp| {report.max_mass_error:.2e}"
    )
    return 0 if report.ok else 1
