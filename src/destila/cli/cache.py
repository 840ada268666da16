"""`destila cache build|inspect|verify|export`: thin commands over :mod:`destila.cache`."""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field

from destila.cache import build_cache, verify_cache
from destila.cache.export import ExportSpec, export_cache
from destila.cache.extras import TeacherExtras
from destila.cache.read_specs import InspectSpec, VerifySpec
from destila.cache.spec import BuildSpec
from destila.cache.stats import format_summary, inspect_cache
from destila.cli.fields import add_fields, values_of
from destila.data.spec import DataSpec
from destila.io import names_user_path
from destila.targets.spec import TargetSpec



@dataclass
class _Printed:
    """How ``cache inspect`` prints its summary (the command's own choice, not the library's)."""

    json: bool = field(default=False, metadata={"help": "print JSON instead of text"})


def register(subparsers) -> None:
    parser = subparsers.add_parser("cache", help="build, inspect, verify or export a teacher's top-K cache")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    build = verbs.add_parser(
        "build",
        help="run the teacher once over DATA and store its top-K distributions in CACHE",
        description="Run the teacher once and store, per token, its top-K log-probs and the log-mass left out. "
        "Killed at any point, the same command resumes. Under `torchrun --nproc-per-node N -m destila cache "
        "build …` the sequences are split across the processes (with --tensor-parallel the processes share one "
        "teacher instead).",
    )
    add_fields(build, BuildSpec, positional=("teacher", "data"), exclude=("targets", "extras"))
    add_fields(build.add_argument_group("data (row length, conversations, prompt/completion pairs, hub names, "
                                        "packing)"), DataSpec, exclude=("source",))
    add_fields(build.add_argument_group("targets (what the teacher provides per position)"), TargetSpec)
    add_fields(build.add_argument_group("several teachers, teacher hidden states"), TeacherExtras,
               exclude=("mixture_teachers",))
    build.set_defaults(func=_build)

    inspect = verbs.add_parser("inspect", help="counts, sizes and teacher-distribution statistics of a cache or an export")
    add_fields(inspect, _Printed)
    add_fields(inspect, InspectSpec, positional=("cache",))
    inspect.set_defaults(func=_inspect)

    verify = verbs.add_parser("verify", help="check every shard's (or export file's) checksum, shapes and values; exit 1 if any fault")
    add_fields(verify, VerifySpec, positional=("cache",))
    verify.set_defaults(func=_verify)

    export = verbs.add_parser(
        "export", help="write the cache as a dataset (Parquet) that `datasets` loads, streams and pushes",
        description="One row per sequence: tokens, position ids (document bounds), loss mask and the teacher's "
                    "targets, with the manifest and a fingerprint in the dataset card. `destila train --cache OUT` "
                    "trains from it as from the cache; `destila cache verify OUT` checks it.")
    add_fields(export, ExportSpec, positional=("cache", "output"))
    export.set_defaults(func=_export)


def _build(args) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    values = values_of(args, BuildSpec, exclude=("targets", "extras"))
    first, *others = values.pop("teacher")
    extras = TeacherExtras(mixture_teachers=tuple(others), **values_of(args, TeacherExtras, exclude=("mixture_teachers",)))
    data = DataSpec(values.pop("data"), **values_of(args, DataSpec, exclude=("source",)))
    spec = BuildSpec(teacher=first, data=data, **values, targets=TargetSpec(**values_of(args, TargetSpec)),
                     extras=extras)
    with names_user_path(args.output):  # a full disk reported by a Rust writer names no file: name the cache folder
        report = build_cache(spec)
    if report.rank != 0:
        return 0
    if report.nothing_to_do:
        print(f"{report.path}: already complete ({report.sequences:,} sequences, {report.tokens:,} tokens): nothing to do")
        return 0
    resumed = f", resumed after {report.already_stored:,} stored" if report.already_stored else ""
    ranks = f" on rank 0 of {report.world_size}" if report.world_size > 1 else ""
    if spec.tensor_parallel:
        ranks = f" with the teacher split over {report.world_size} processes"
    print(
        f"{report.path}: wrote {report.written_sequences:,} sequences ({report.written_tokens:,} tokens){ranks} "
        f"in {report.pass_seconds:.1f} s, {report.tokens_per_second:,.0f} tokens/s (every token the teacher read, "
        f"trained or not){resumed}; "
        + ("cache complete" if report.complete else "cache INCOMPLETE: run the same command again")
        + f" ({report.sequences:,} sequences)"
    )
    print(dropped_line(report.dropped))
    return 0 if report.complete else 1


_DROP_REASONS = {
    "row_seams": "at row seams (a document continuing in the next row has nothing before its first token there; "
                 "--packing bfd never splits one)",
    "after_the_last_row": "after the last row (the incomplete last row, or data past --max-tokens)",
    "truncated": "beyond --seq-len in documents longer than a row",
}


def dropped_line(dropped: dict) -> str:
    """One line naming the trained positions of the data the sequences leave out, and why."""
    if not dropped:
        return "dropped: no trained position of the data is left out"
    parts = [f"{count:,} {_DROP_REASONS.get(reason, reason)}" for reason, count in dropped.items()]
    return f"dropped {sum(dropped.values()):,} trained positions: " + "; ".join(parts)


def _inspect(args) -> int:
    summary = inspect_cache(InspectSpec(**values_of(args, InspectSpec)))
    print(json.dumps(summary, indent=1) if args.json else format_summary(summary))
    return 0


def _verify(args) -> int:
    report = verify_cache(VerifySpec(**values_of(args, VerifySpec)))
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for fault in report.faults:
        print(f"FAULT {fault}")
    status = "OK" if report.ok else f"{len(report.faults)} fault(s)"
    print(
        f"{report.path}: {status}: {report.shards_checked} {report.unit} checked, {report.stored_sequences:,} of "
        f"{report.sequences:,} sequences, max |log Σp| {report.max_mass_error:.2e}"
    )
    return 0 if report.ok else 1


def _export(args) -> int:
    report = export_cache(ExportSpec(**values_of(args, ExportSpec)))
    print(f"{report.path}: {report.rows:,} sequences in {report.files} Parquet file(s), {report.bytes:,} bytes; "
          f"content sha256 {report.content_sha256[:16]}… (`destila cache verify {report.path}` checks it)")
    return 0
