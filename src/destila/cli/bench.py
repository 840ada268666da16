"""`destila bench loss|e2e`: destila's own benchmarks; flags from the configs' fields, rows printed as measured.

The comparisons with other libraries (torchtune, TRL, Liger) are scripts beside
the package: ``python -m benchmarks.peers loss|e2e`` from a checkout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console

from destila.bench.e2e import E2EConfig, LongContextConfig, longest_fitting, run_e2e, run_long_context, save_json
from destila.bench.e2e_plot import plot_e2e, plot_long_context
from destila.bench.loss import LossBenchConfig, default_memory_budget, run_loss_sweep, summarise
from destila.bench.plot import plot_loss_sweep
from destila.bench.results import OutputFiles, failed_rows_code, machine_info, row_printer, write_csv
from destila.bench.tables import (LOSS_HEADER, e2e_row_line, e2e_summary_lines, e2e_table, long_context_row_line,
                                  long_context_summary_lines)
from destila.cli.fields import add_fields, values_of

LONG_CONTEXT_FLAGS = ("seq_lens", "memory_budget")


@dataclass
class E2EMode:
    long_context: bool = field(default=False, metadata={
        "help": "instead: one training step of the student per offline loss at growing lengths"})


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="measure memory and speed (the paper's tables)",
                                   description="Benchmarks; each configuration runs in its own process.")
    benches = parser.add_subparsers(dest="bench", metavar="BENCH", required=True)
    loss = benches.add_parser(
        "loss", help="output-head loss: memory and time vs sequence length per impl",
        description="Sweep sequence lengths × loss impls (plus the floor: the bare lm_head GEMMs), each "
                    "configuration in a fresh process. Peak memory is above the process baseline after "
                    "imports, inputs included; time is the median fwd+bwd after a warm-up.")
    add_fields(loss, LossBenchConfig, exclude=("extra",))
    add_fields(loss.add_argument_group("files"), OutputFiles)
    loss.set_defaults(func=_run_loss)

    e2e = benches.add_parser(
        "e2e", help="the paper's table: online vs offline dense/chunked/fused, each in its own process",
        description="Train the same student on the same sequences with each method (peak memory above the "
                    "process baseline, median step time after warm-up, tokens/s, loss per step); the cache "
                    "build is reported apart. --long-context: one step per offline loss at growing lengths.")
    add_fields(e2e, E2EConfig)
    add_fields(e2e, E2EMode)
    add_fields(e2e.add_argument_group("long context"), LongContextConfig, only=LONG_CONTEXT_FLAGS)
    add_fields(e2e.add_argument_group("files"), OutputFiles)
    e2e.set_defaults(func=_run_e2e)


def loss_config(args) -> LossBenchConfig:
    """The sweep's configuration from parsed flags: the memory budget defaults to the device's, the machine
    is recorded in every row."""
    values = values_of(args, LossBenchConfig, exclude=("extra",))
    if values["memory_budget"] is None:
        values["memory_budget"] = default_memory_budget(values["device"])
    return LossBenchConfig(**values, extra=machine_info())


def _run_loss(args) -> int:
    cfg = loss_config(args)
    files = OutputFiles(**values_of(args, OutputFiles))
    print(LOSS_HEADER, flush=True)
    rows = run_loss_sweep(cfg, on_row=row_printer(files.json))
    for line in summarise(rows):
        print(line)
    if files.csv:
        write_csv(rows, files.csv)
    if files.plot:
        plot_loss_sweep(rows, files.plot)
    return failed_rows_code(rows, "impl")


def keeping_rows(console, line, json_path, machine: dict):
    """The ``on_row`` of an end-to-end run: each row printed and, with ``json_path``, that file rewritten with the
    rows so far (``"unfinished": true``), so a run stopped before its end (a time limit, a crash) keeps the rows it
    finished; the whole result replaces it at the end."""
    rows = []

    def on_row(row: dict) -> None:
        console.print(line(row))
        rows.append(row)
        if json_path:
            save_json({"machine": machine, "rows": rows, "unfinished": True}, json_path)

    return on_row


def _run_e2e(args) -> int:
    console, machine = Console(), machine_info()
    cfg = E2EConfig(**values_of(args, E2EConfig))
    files = OutputFiles(**values_of(args, OutputFiles))
    if args.long_context:
        long = LongContextConfig.for_e2e(cfg, **values_of(args, LongContextConfig, only=LONG_CONTEXT_FLAGS))
        rows = run_long_context(long, on_row=keeping_rows(console, long_context_row_line, files.json, machine))
        best = longest_fitting(rows)
        for line in long_context_summary_lines(best):
            console.print(line)
        result = {"machine": machine, "rows": rows, "longest": best}
    else:
        result = run_e2e(cfg, on_row=keeping_rows(console, e2e_row_line, files.json, machine))
        result["machine"] = machine
        console.print(e2e_table(result, cfg))
        for line in e2e_summary_lines(result, cfg):
            console.print(line)
        rows = result["rows"]
    if files.json:
        save_json(result, files.json)
    if files.csv:
        write_csv([r | {"command": machine["command"]} for r in rows], files.csv)  # per-step lists joined
    if files.plot and args.long_context:
        plot_long_context(rows, files.plot)
    elif files.plot:
        plot_e2e(result, files.plot)
    return failed_rows_code(rows, "impl" if args.long_context else "method")
