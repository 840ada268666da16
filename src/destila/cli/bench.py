"""`destila bench ...`: the benchmarks, one nested sub-command each.

``BENCHES`` maps a sub-command to ``"module:function"``; the function gets
the ``bench`` sub-parsers and adds its own parser (``destila bench e2e``
registers itself by adding one entry here, from its own module).
"""

from __future__ import annotations

import argparse
from importlib import import_module

BENCHES = {
    "loss": "destila.cli.bench:register_loss",
    "e2e": "destila.cli.bench_e2e:register_e2e",
}


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="measure memory and speed (the paper's tables)",
                                   description="Benchmarks; each configuration runs in its own process.")
    benches = parser.add_subparsers(dest="bench", metavar="BENCH", required=True)
    for target in BENCHES.values():
        module, _, func = target.partition(":")
        getattr(import_module(module), func)(benches)


def int_list(text: str) -> tuple[int, ...]:
    """``"2048,4K,64k"`` → ``(2048, 4096, 65536)``."""
    values = []
    for part in text.split(","):
        part = part.strip().lower()
        scale = 1024 if part.endswith("k") else 1
        try:
            values.append(int(part[:-1] if scale > 1 else part) * scale)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected integers like 2048 or 4K, found {part!r}") from None
    return tuple(values)


def register_loss(benches) -> None:
    p = benches.add_parser(
        "loss", help="output-head loss: memory and time vs sequence length per impl",
        description="Sweep sequence lengths × loss impls (plus the floor: the bare lm_head GEMMs), each "
                    "configuration in a fresh process. Peak memory is above the process baseline after "
                    "imports, inputs included; time is the median fwd+bwd after a warm-up.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--hidden", type=int, default=512, help="hidden size H")
    p.add_argument("--vocab", type=int, default=32768, help="vocabulary size V")
    p.add_argument("--top-k", type=int, default=100, help="teacher entries per row K")
    p.add_argument("--seq-lens", type=int_list, default="2K,4K,8K,16K,32K,64K", help="comma-separated N")
    p.add_argument("--impls", default="fused,chunked,dense", help="comma-separated impls (floor always runs)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    p.add_argument("--chunk-size", type=int, default=2048, help="rows per chunk (fused, chunked, floor)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per configuration (median reported)")
    p.add_argument("--max-seconds", type=float, default=30.0,
                   help="stop repeating a configuration once its timed runs add up to this")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds before a configuration is killed")
    p.add_argument("--memory-budget", type=float, default=None,
                   help="GiB a configuration may use above baseline (predicted larger: skipped; larger in "
                        "fact: oom). Default on CPU: 60%% of the memory available at start; on CUDA: none")
    p.add_argument("--threads", type=int, default=None, help="torch threads per configuration (default: torch's)")
    p.add_argument("--peers", nargs="?", const="all", default=None, metavar="LIST",
                   help="add the peers' losses (torchtune, trl-gkd, trl-chunked, liger-fljsd, liger-distill; "
                        "all when no LIST), measured the same way; needs destila[peers]")
    p.add_argument("--peer-beta", type=float, default=0.0,
                   help="the peers' generalized-JSD beta (0: forward KL, destila's divergence here)")
    p.add_argument("--json", metavar="PATH", help="write one JSON object per configuration")
    p.add_argument("--csv", metavar="PATH", help="write the same rows as CSV")
    p.add_argument("--plot", metavar="PATH",
                   help="write a PNG: memory and time vs N, one line per impl (with --peers: bars per N)")
    p.set_defaults(func=_run_loss)


def _peer_names(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ()
    from destila.bench.peers_loss import PEERS

    return tuple(PEERS) if text == "all" else tuple(p.strip() for p in text.split(",") if p.strip())


def _run_loss(args) -> int:
    import psutil

    from destila.bench.loss import LossBenchConfig, run_loss_sweep, summarise
    from destila.bench.plot import plot_loss_sweep
    from destila.bench.results import machine_info, write_csv, write_jsonl

    budget = args.memory_budget * 2**30 if args.memory_budget is not None else None
    if budget is None and not args.device.startswith("cuda"):
        budget = int(0.6 * psutil.virtual_memory().available)
    cfg = LossBenchConfig(hidden=args.hidden, vocab=args.vocab, top_k=args.top_k, seq_lens=args.seq_lens,
                          impls=tuple(i.strip() for i in args.impls.split(",") if i.strip()), dtype=args.dtype,
                          device=args.device, chunk_size=args.chunk_size, repeats=args.repeats,
                          max_seconds=args.max_seconds, timeout=args.timeout, memory_budget=budget,
                          threads=args.threads, peers=_peer_names(args.peers), peer_beta=args.peer_beta,
                          extra=machine_info())
    # floor s: the floor timed in the same process, right after each run of the impl.
    print(f"{'impl':>8} {'N':>7} {'status':>8} {'peak GiB':>9} {'seconds':>9} {'floor s':>9} {'×floor':>7}  note",
          flush=True)

    def show(row: dict) -> None:
        def num(value, width: int, scale: float = 1.0) -> str:
            return f"{value / scale:{width}.3f}" if value is not None else f"{'-':>{width}}"

        print(f"{row['impl']:>8} {row['seq_len']:>7} {row['status']:>8} {num(row['peak_bytes'], 9, 2**30)} "
              f"{num(row['seconds'], 9)} {num(row['floor_seconds'], 9)} {num(row.get('ratio_to_floor'), 7)}  "
              f"{row['error'] or ''}", flush=True)

    rows = run_loss_sweep(cfg, on_row=show)
    for line in summarise(rows):
        print(line)
    if cfg.peers:
        from destila.bench.peers_report import print_peer_table

        print_peer_table(rows)
    if args.json:
        write_jsonl(rows, args.json)
    if args.csv:
        write_csv(rows, args.csv)
    if args.plot and cfg.peers:
        from destila.bench.peers_report import plot_peers

        plot_peers(rows, args.plot)
    elif args.plot:
        plot_loss_sweep(rows, args.plot)
    return 0
