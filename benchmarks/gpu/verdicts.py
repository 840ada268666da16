"""The GPU check's acceptance lines, read from its result files: each target, the measured value, met or not.

    python benchmarks/gpu/verdicts.py RESULTS_DIR CARD        # writes RESULTS_DIR/verdicts_CARD.txt and prints it

Targets (H 4096, V 131072, K 100, bf16): fused ≤ 1.2× its floor at 32K rows; fused's peak ≤ 5.0 GiB at 32K
and ≤ 11 GiB at 256K; at 8K, 16K and 32K fused uses less memory and less time than Liger's fused linear
JSD and its chunked distillation loss (time over the floor timed in each row's own process, which cancels
load between processes); end to end at 8K, offline fused's step time ≤ offline chunked's. A file that is
missing (its step did not run) makes its lines say so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

GIB = 2 ** 30
LIGER = ("liger-fljsd", "liger-distill")


def _rows(path: Path) -> list[dict] | None:
    if not path.is_file():
        return None
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _mark(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def verdicts(results: Path, card: str) -> list[str]:
    lines = []
    loss = _rows(results / f"loss_{card}.jsonl")
    big = _rows(results / f"loss_256k_{card}.jsonl")
    e2e_path = results / f"e2e_8k_{card}.json"
    ok = {(r["impl"], r["seq_len"]): r for r in (loss or []) + (big or []) if r["status"] == "ok"}
    fused = ok.get(("fused", 32768))
    if fused:
        lines.append(f"path at 32K: {fused.get('path')}")
        lines.append(f"fused / floor at 32K: {fused['ratio_to_floor']:.3f} (target ≤ 1.2: {_mark(fused['ratio_to_floor'] <= 1.2)})")
        lines.append(f"fused peak at 32K: {fused['peak_bytes'] / GIB:.2f} GiB (target ≤ 5.0: "
                     f"{_mark(fused['peak_bytes'] <= 5.0 * GIB)})")
    else:
        lines.append("fused at 32K: not measured" + ("" if loss is not None else " (no loss file)"))
    exact = ok.get(("fused-exact", 32768))
    if exact:
        lines.append(f"fused-exact at 32K: {exact['ratio_to_floor']:.3f}× floor, {exact['peak_bytes'] / GIB:.2f} GiB")
    huge = ok.get(("fused", 262144))
    lines.append(f"fused peak at 256K: {huge['peak_bytes'] / GIB:.2f} GiB (target ≤ 11: "
                 f"{_mark(huge['peak_bytes'] <= 11 * GIB)})" if huge else "fused at 256K: not measured")
    for n in (8192, 16384, 32768):
        mine = ok.get(("fused", n))
        for peer in LIGER:
            theirs = ok.get((peer, n))
            if not (mine and theirs):
                why = "fused did not run" if not mine else next(
                    (f"{r['status']} ({r.get('error')})" for r in loss or [] if r["impl"] == peer and r["seq_len"] == n),
                    "not measured")
                lines.append(f"N={n} fused vs {peer}: {why}")
                continue
            memory = theirs["peak_bytes"] / mine["peak_bytes"]
            time = theirs["ratio_to_floor"] / mine["ratio_to_floor"]
            lines.append(f"N={n} {peer} / fused: memory {memory:.2f}×, time over floor {time:.2f}× "
                         f"(fused less of both: {_mark(memory > 1 and time > 1)})")
    if e2e_path.is_file():
        rows = {r["method"]: r for r in json.loads(e2e_path.read_text())["rows"] if r["status"] == "ok"}
        if "fused" in rows and "chunked" in rows:
            f, c = rows["fused"]["step_seconds"], rows["chunked"]["step_seconds"]
            lines.append(f"e2e 8K step: fused {f:.3f} s, chunked {c:.3f} s (fused ≤ chunked: {_mark(f <= c)})")
        else:
            lines.append(f"e2e 8K: fused or chunked did not run ({sorted(rows)})")
    else:
        lines.append("e2e 8K: not measured (no e2e file)")
    return lines


def main(argv: list[str]) -> int:
    results, card = Path(argv[0]), argv[1]
    lines = verdicts(results, card)
    (results / f"verdicts_{card}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
