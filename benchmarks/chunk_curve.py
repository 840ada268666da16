"""The fused loss's time and peak memory against its chunk size: the curve behind ``chunk_size=None``.

    python benchmarks/chunk_curve.py --json benchmarks/results/chunk_curve_cpu.jsonl          # CPU defaults
    python benchmarks/chunk_curve.py --device cuda --dtype bfloat16 --hidden 4096 --vocab 131072 \\
        --seq-len 32K --chunk-sizes 512,1024,2048,4096 --json chunk_curve_gpu.jsonl         # what the GPU check runs

For each chunk size, ``destila bench loss``'s sweep of fused alone at one N (the floor too, over the same
chunks), each configuration in its own process (:mod:`destila.bench.harness`), plus one row with the chunk
the loss picks by itself (``chunk_size`` None; its row says which). Rows are those of ``destila bench loss``
with ``chunk_size`` set.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from destila.bench import LossBenchConfig, int_list, machine_info, run_loss_sweep, write_jsonl


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python benchmarks/chunk_curve.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--seq-len", type=lambda text: int_list(text)[0], default=16384)
    parser.add_argument("--chunk-sizes", type=int_list, default=(256, 512, 1024, 2048, 4096, 8192))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    machine = {**machine_info(), "command": shlex.join(["python", "benchmarks/chunk_curve.py", *sys.argv[1:]])}
    rows = []
    for chunk in (*args.chunk_sizes, None):
        cfg = LossBenchConfig(hidden=args.hidden, vocab=args.vocab, top_k=args.top_k, seq_lens=(args.seq_len,),
                              impls=("fused",), dtype=args.dtype, device=args.device, chunk_size=chunk,
                              repeats=args.repeats, max_seconds=args.max_seconds, threads=args.threads,
                              extra={**machine, "chunk_requested": chunk or "auto"})
        for row in run_loss_sweep(cfg):
            if chunk is None and row["impl"] == "floor":
                continue  # the auto row's floor is one of the fixed sizes' floors
            rows.append(row)
            print(f"chunk {row['chunk_requested']!s:>5} ({row['chunk_size']} rows) {row['impl']:>6}: {row['status']}, "
                  f"{(row['seconds'] or 0):.3f} s, peak {(row['peak_bytes'] or 0) / 2**30:.2f} GiB, "
                  f"×floor {row['ratio_to_floor'] or 0:.3f}", flush=True)
    write_jsonl(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
