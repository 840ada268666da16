"""The GPU check's acceptance lines, read from its result files: each target, the measured value, met or not.

    python benchmarks/gpu/verdicts.py RESULTS_DIR CARD        # writes RESULTS_DIR/verdicts_CARD.txt and prints it

Targets (H 4096, V 131072, K 100, bf16): fused ≤ 1.2× its floor at 32K rows; fused's peak ≤ 5.0 GiB at 32K
and ≤ 11 GiB at 256K; at 8K, 16K and 32K fused uses less memory and less time than Liger's fused linear
JSD and its chunked distillation loss (time over the floor timed in each row's own process, which cancels
load between processes); end to end at 8K, offline fused's step time ≤ offline chunked's. The main job's
figures (teacher pass over its bare forward, a KD step over a plain CE step, eval) are reported without a
target. "32K" and "256K" are the largest N of the loss sweep and of the 256K sweep, so that a rehearsal at
small shapes (CARD ``rehearsal``) computes every line the same way; its file says first that its figures are
a CPU rehearsal's and judge nothing. A file that is missing (its step did not run) makes its lines say so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from destila.io.json_lines import read_json_lines

GIB = 2 ** 30
LIGER = ("liger-fljsd", "liger-distill")
REHEARSAL = "rehearsal"


def _rows(path: Path) -> list[dict] | None:
    if not path.is_file():
        return None
    return read_json_lines(path)


def _mark(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def _size(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def loss_lines(loss: list[dict] | None, big: list[dict] | None) -> list[str]:
    """Fused against its floor and the memory targets at the sweep's largest N and the big sweep's N."""
    lines = []
    ok = {(r["impl"], r["seq_len"]): r for r in (loss or []) + (big or []) if r["status"] == "ok"}
    largest = max((r["seq_len"] for r in loss or []), default=None)
    fused = ok.get(("fused", largest))
    if fused:
        at = _size(largest)
        lines.append(f"path at {at}: {fused.get('path')}")
        lines.append(f"fused / floor at {at}: {fused['ratio_to_floor']:.3f} (target ≤ 1.2: "
                     f"{_mark(fused['ratio_to_floor'] <= 1.2)})")
        lines.append(f"fused peak at {at}: {fused['peak_bytes'] / GIB:.2f} GiB (target ≤ 5.0: "
                     f"{_mark(fused['peak_bytes'] <= 5.0 * GIB)})")
        exact = ok.get(("fused-exact", largest))
        if exact:
            lines.append(f"fused-exact at {at}: {exact['ratio_to_floor']:.3f}× floor, "
                         f"{exact['peak_bytes'] / GIB:.2f} GiB")
    else:
        lines.append("fused at the largest N: not measured" + ("" if loss is not None else " (no loss file)"))
    biggest = max((r["seq_len"] for r in big or []), default=None)
    huge = ok.get(("fused", biggest))
    lines.append(f"fused peak at {_size(biggest)}: {huge['peak_bytes'] / GIB:.2f} GiB (target ≤ 11: "
                 f"{_mark(huge['peak_bytes'] <= 11 * GIB)})" if huge else "fused at 256K: not measured")
    for n in sorted({r["seq_len"] for r in loss or []}):
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
            interpreted = " (its time is the Triton interpreter's)" if theirs.get("note") else ""
            lines.append(f"N={n} {peer} / fused: memory {memory:.2f}×, time over floor {time:.2f}×{interpreted} "
                         f"(fused less of both: {_mark(memory > 1 and time > 1)})")
    return lines


def e2e_lines(path: Path) -> list[str]:
    if not path.is_file():
        return ["e2e: not measured (no e2e file)"]
    result = json.loads(path.read_text())
    rows = {r["method"]: r for r in result["rows"] if r["status"] == "ok"}
    at = _size(result["config"]["seq_len"])
    if "fused" not in rows or "chunked" not in rows:
        return [f"e2e {at}: fused or chunked did not run ({sorted(rows)})"]
    f, c = rows["fused"]["step_seconds"], rows["chunked"]["step_seconds"]
    return [f"e2e {at} step: fused {f:.3f} s, chunked {c:.3f} s (fused ≤ chunked: {_mark(f <= c)})"]


def main_job_lines(path: Path) -> list[str]:
    if not path.is_file():
        return ["main job: not measured (no main_job file)"]
    record = json.loads(path.read_text())
    p, s, e = record["teacher_pass"], record["student"], record["eval"]
    return [f"main job, teacher pass ({record['teacher_weights']} weights, {p['tokens']} tokens): "
            f"{p['pass_tokens_per_s']:.0f} tokens/s, {p['pass_over_bare']:.2f}× the bare forward's time",
            f"main job, student ({s['student_layers']} layers): KD step {s['kd_step_seconds']:.3f} s, "
            f"{s['kd_over_ce']:.2f}× a plain CE step; eval of {e['tokens']} tokens in {e['seconds']:.1f} s"]


def verdicts(results: Path, card: str) -> list[str]:
    lines = []
    if card == REHEARSAL:
        lines.append("REHEARSAL on CPU at small shapes: every step ran, but these figures are no GPU's and the "
                     "targets below are not judged by them")
    lines += loss_lines(_rows(results / f"loss_{card}.jsonl"), _rows(results / f"loss_256k_{card}.jsonl"))
    lines += main_job_lines(results / f"main_job_{card}.json")
    lines += e2e_lines(results / f"e2e_8k_{card}.json")
    return lines


def main(argv: list[str]) -> int:
    results, card = Path(argv[0]), argv[1]
    lines = verdicts(results, card)
    (results / f"verdicts_{card}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
