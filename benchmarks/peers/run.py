"""``python -m benchmarks.peers loss|e2e``: ``destila bench loss|e2e`` with the peers' rows added.

Every flag is a field of a config: :class:`destila.bench.loss.LossBenchConfig`
or :class:`destila.bench.e2e.E2EConfig` (the same flags as ``destila bench``),
plus :class:`~benchmarks.peers.loss.PeerRows` or
:class:`~benchmarks.peers.e2e.PeerTrainers`, and the output files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rich.console import Console

from benchmarks.peers.e2e import PeerTrainers, run_e2e_with_peers
from benchmarks.peers.loss import PeerRows
from benchmarks.peers.report import plot_peers, print_e2e_table, print_peer_table
from destila.bench import (LOSS_HEADER, E2EConfig, LossBenchConfig, OutputFiles, e2e_row_line, failed_rows_code,
                           machine_info, row_printer, run_loss_sweep, save_json, summarise, write_csv)
from destila.cli.bench import loss_config
from destila.cli.fields import add_fields, values_of
from destila.cli.parser import Parser

ROOT = Path(__file__).resolve().parents[2]


def build_parser() -> Parser:
    parser = Parser(prog="python -m benchmarks.peers",
                    description="destila's benchmarks with the peers' rows beside destila's (torchtune, TRL, Liger).")
    verbs = parser.add_subparsers(dest="bench", metavar="BENCH", required=True)
    loss = verbs.add_parser("loss", help="the output-head loss sweep, each peer's loss beside destila's",
                            description="destila bench loss, plus one row per peer per N, measured the same way.")
    add_fields(loss, LossBenchConfig, exclude=("extra",))
    add_fields(loss.add_argument_group("peers"), PeerRows)
    add_fields(loss.add_argument_group("files"), OutputFiles)
    e2e = verbs.add_parser("e2e", help="TRL's GKD trainer beside destila online and offline fused",
                           description="destila bench e2e, then each peer trainer, then every trained student's "
                                       "full-vocabulary KL to the teacher on held-out sequences.")
    add_fields(e2e, E2EConfig, defaults={"methods": ("online", "fused")})
    add_fields(e2e.add_argument_group("peers"), PeerTrainers)
    add_fields(e2e.add_argument_group("files"), OutputFiles, exclude=("plot",))  # the table carries it
    return parser


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv``, run the benchmark, exit (2 with one line for a bad argument)."""
    # The measuring processes import this package too: they start in a fresh interpreter.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = run_loss(args) if args.bench == "loss" else run_e2e(args)
    except ValueError as err:  # a config's own validation: one line, this command's usage
        parser.error(str(err))
    sys.exit(code)


def run_loss(args) -> int:
    cfg = loss_config(args)
    peers = PeerRows(**values_of(args, PeerRows))
    files = OutputFiles(**values_of(args, OutputFiles))
    print(LOSS_HEADER, flush=True)
    rows = run_loss_sweep(cfg, on_row=row_printer(files.json), others=peers)
    for line in summarise(rows):
        print(line)
    print_peer_table(rows)
    if files.csv:
        write_csv(rows, files.csv)
    if files.plot:
        plot_peers(rows, files.plot)
    return failed_rows_code(rows, "impl")


def run_e2e(args) -> int:
    cfg = E2EConfig(**values_of(args, E2EConfig))
    peers = PeerTrainers(**values_of(args, PeerTrainers))
    files = OutputFiles(**values_of(args, OutputFiles, exclude=("plot",)))
    machine = machine_info()
    result = run_e2e_with_peers(cfg, peers.peers, peers.heldout_tokens,
                                on_row=lambda row: Console().print(e2e_row_line(row)))
    result["machine"] = machine
    print_e2e_table(result, cfg, peers.heldout_tokens)
    if files.json:
        save_json(result, files.json)
    if files.csv:
        write_csv([r | {"command": machine["command"]} for r in result["rows"]], files.csv)
    return failed_rows_code(result["rows"], "method")
