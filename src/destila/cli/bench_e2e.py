"""`destila bench e2e`: online vs offline dense / chunked / fused, and the long-context sweep."""

from __future__ import annotations

import argparse


def register_e2e(benches) -> None:
    from destila.bench.e2e import E2EConfig, LongContextConfig  # light: no torch at import
    from destila.bench.peers_e2e import PEER_TRAINERS
    from destila.cli.bench import int_list

    e2e, long = E2EConfig, LongContextConfig  # the defaults live in the configs

    p = benches.add_parser(
        "e2e", help="the paper's table: online vs offline dense/chunked/fused, each in its own process",
        description="Train the same student on the same sequences with each method (peak memory above the "
                    "process baseline, median step time after warm-up, tokens/s, loss per step); the cache "
                    "build is reported apart. --long-context: one step per offline loss at growing lengths.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--teacher", default=e2e.teacher, help="teacher folder, .gguf file, or smollm2 (the embedded SmolLM2-135M)")
    p.add_argument("--student", help="student folder; none: --student-layers cut from the teacher")
    p.add_argument("--student-layers", type=int, default=e2e.student_layers,
                   help="layers of the cut student")
    p.add_argument("--data", default=e2e.data, help="text data, or pydoc")
    p.add_argument("--seq-len", type=int, default=e2e.seq_len, help="tokens per sequence")
    p.add_argument("--batch-size", type=int, default=e2e.batch_size, help="sequences per step")
    p.add_argument("--steps", type=int, default=e2e.steps, help="training steps per method (the first is a warm-up)")
    p.add_argument("--methods", default=None,
                   help=f"comma-separated methods (default: {','.join(e2e.methods)}; with --peers: online,fused)")
    p.add_argument("--peers", nargs="?", const=",".join(PEER_TRAINERS), default=None, metavar="LIST",
                   help=f"also train with the peers' trainers ({', '.join(PEER_TRAINERS)}; all when no LIST) and "
                        "measure every student's full KL to the teacher on held-out text; needs destila[peers]")
    p.add_argument("--heldout-tokens", type=int, default=4096, help="--peers: held-out tokens for the full KL")
    p.add_argument("--top-k", type=int, default=e2e.top_k, help="teacher entries cached per position")
    p.add_argument("--lr", type=float, default=e2e.learning_rate, help="learning rate")
    p.add_argument("--device", default=e2e.device, help="cpu or cuda[:i]")
    p.add_argument("--dtype", default=e2e.dtype, choices=["float32", "bfloat16"],
                   help="bfloat16: mixed precision")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--workdir", default=e2e.workdir, help="student, cache and runs are kept here")
    p.add_argument("--threads", type=int, default=None, help="torch threads per process")
    p.add_argument("--long-context", action="store_true",
                   help="instead: one training step of the student per offline loss at growing lengths")
    p.add_argument("--seq-lens", type=int_list, default=",".join(map(str, long.seq_lens)), help="--long-context lengths")
    p.add_argument("--memory-budget", type=float, default=long.memory_budget / 2**30,
                   help="--long-context: GiB a step may use above its baseline on CPU")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--csv", metavar="PATH")
    p.add_argument("--plot", metavar="PATH")
    p.set_defaults(func=_run)


def _gib(value) -> str:
    return "–" if value is None else f"{value / 2**30:.2f} GiB"


def _run(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from destila.bench.results import machine_info, write_csv

    console = Console()
    machine = machine_info()
    if args.long_context:
        return _run_long_context(args, console, machine)
    from destila.bench.e2e import E2EConfig, run_e2e, save_json
    from destila.bench.e2e_plot import plot_e2e

    methods = args.methods or ("online,fused" if args.peers else ",".join(E2EConfig.methods))
    cfg = E2EConfig(
        teacher=args.teacher, student=args.student, student_layers=args.student_layers, data=args.data,
        seq_len=args.seq_len, batch_size=args.batch_size, steps=args.steps, top_k=args.top_k,
        methods=tuple(m.strip() for m in methods.split(",") if m.strip()), learning_rate=args.lr,
        device=args.device, dtype=args.dtype, gradient_checkpointing=args.gradient_checkpointing,
        workdir=args.workdir, threads=args.threads,
    )
    def show(r: dict) -> None:
        console.print(f"{r['method']}: {r['status']}, peak {_gib(r['peak_bytes'])}"
                      + (f", {r['step_seconds']:.2f} s/step, final loss {r['final_loss']:.4f}"
                         if r["status"] == "ok" else f" {r['error'] or ''}"))

    if args.peers:
        return _run_with_peers(args, cfg, console, machine, show)
    result = run_e2e(cfg, on_row=show)
    result["machine"] = machine
    table = Table(title=f"seq-len {cfg.seq_len} × batch {cfg.batch_size}, {cfg.device} {cfg.dtype}")
    for column in ("method", "peak memory", "step time", "tokens/s", "final loss", "Δ loss vs online",
                   "memory vs online", "time vs online"):
        table.add_column(column, justify="right")
    for r in result["rows"]:
        if r["status"] != "ok":
            table.add_row(r["method"], r["status"], *["–"] * 6)
            continue
        table.add_row(r["method"], _gib(r["peak_bytes"]), f"{r['step_seconds']:.2f} s",
                      f"{r['tokens_per_second']:.0f}", f"{r['final_loss']:.4f}",
                      f"{r.get('loss_diff_vs_online', 0):+.4f}", f"{r.get('memory_vs_online', 1):.2f}×",
                      f"{r.get('time_vs_online', 1):.2f}×")
    console.print(table)
    cache = result["cache"]
    console.print(f"cache build (one-time): {cache['seconds']:.1f} s for {cache['tokens']} tokens "
                  f"({cache['teacher_tokens_per_second']:.0f} tokens/s), peak {_gib(cache['peak_bytes'])}")
    if result["break_even_runs"] is not None:
        console.print(f"caching pays for itself after {result['break_even_runs']:.2f} training run(s) "
                      f"of {cfg.steps} steps")
    if args.json:
        save_json(result, args.json)
    if args.csv:
        write_csv([r | {"command": machine["command"]} for r in result["rows"]], args.csv)  # per-step lists joined
    if args.plot:
        plot_e2e(result, args.plot)
    return 0


def _run_long_context(args, console, machine) -> int:
    from destila.bench.e2e import LongContextConfig, longest_fitting, prepare_student, run_long_context, save_json
    from destila.bench.e2e_plot import plot_long_context
    from destila.bench.results import write_csv
    from destila.models import EMBEDDED, embedded_teacher_dir

    if args.student is None:
        from destila.bench.e2e import E2EConfig

        teacher = str(embedded_teacher_dir()) if args.teacher == EMBEDDED else args.teacher
        student = prepare_student(E2EConfig(student_layers=args.student_layers, workdir=args.workdir), teacher)
    else:
        student = args.student
    cfg = LongContextConfig(student=student, seq_lens=args.seq_lens, top_k=args.top_k,
                            memory_budget=int(args.memory_budget * 2**30), device=args.device, dtype=args.dtype,
                            threads=args.threads)
    rows = run_long_context(cfg, on_row=lambda r: console.print(
        f"{r['impl']:>8} at {r['seq_len']:>6} tokens: {r['status']}, peak {_gib(r['peak_bytes'])}"
        + (f", {r['seconds']:.1f} s" if r.get("seconds") else "")))
    best = longest_fitting(rows)
    console.print("longest sequence that fits: " + ", ".join(f"{k} {v or 'none'}" for k, v in best.items()))
    if best.get("dense") and best.get("fused"):
        console.print(f"fused reaches {best['fused'] / best['dense']:.0f}× the longest sequence dense fits")
    if args.json:
        save_json({"machine": machine, "rows": rows, "longest": best}, args.json)
    if args.csv:
        write_csv([r | {"command": machine["command"]} for r in rows], args.csv)
    if args.plot:
        plot_long_context(rows, args.plot)
    return 0


def _run_with_peers(args, cfg, console, machine, show) -> int:
    from rich.console import Console
    from rich.table import Table

    from destila.bench.e2e import save_json
    from destila.bench.peers_e2e import E2E_COLUMNS, PEER_TRAINERS, e2e_table_rows, run_e2e_with_peers
    from destila.bench.results import write_csv

    peers = tuple(p.strip() for p in args.peers.split(",") if p.strip())
    unknown = [p for p in peers if p not in PEER_TRAINERS]
    if unknown:
        raise ValueError(f"--peers: expected some of {', '.join(PEER_TRAINERS)}, found {unknown}")
    if args.plot:
        raise ValueError("--plot: no plot is drawn with --peers; the printed table, --json and --csv carry the "
                         "comparison (drop --plot, or run without --peers for the per-step plot)")
    result = run_e2e_with_peers(cfg, peers, args.heldout_tokens, on_row=show)
    result["machine"] = machine
    table = Table(title=f"destila beside TRL: seq-len {cfg.seq_len} × batch {cfg.batch_size}, {cfg.steps} steps, "
                        f"{cfg.device} {cfg.dtype}; held-out KL on {args.heldout_tokens} tokens")
    for column in E2E_COLUMNS:
        table.add_column(column, justify="left" if column in ("trainer", "status") else "right")
    for cells in e2e_table_rows(result["rows"]):
        table.add_row(*cells)
    Console(width=200).print(table)
    if args.json:
        save_json(result, args.json)
    if args.csv:
        write_csv([r | {"command": machine["command"]} for r in result["rows"]], args.csv)
    return 0
