"""What the benchmarks print: the loss sweep's rows as lines, the end-to-end table (rich), the long-context lines.

Pure formatting of the rows :mod:`destila.bench.loss` and :mod:`destila.bench.e2e`
return; the command line only prints them.
"""

from __future__ import annotations

from rich.table import Table

# floor s: the floor timed in the same process, right after each run of the impl.
LOSS_HEADER = f"{'impl':>8} {'N':>7} {'status':>8} {'peak GiB':>9} {'seconds':>9} {'floor s':>9} {'×floor':>7}  note"


def _num(value, width: int, scale: float = 1.0) -> str:
    return f"{value / scale:{width}.3f}" if value is not None else f"{'-':>{width}}"


def loss_row_line(row: dict) -> str:
    """One row of the loss sweep under :data:`LOSS_HEADER`."""
    return (f"{row['impl']:>8} {row['seq_len']:>7} {row['status']:>8} {_num(row['peak_bytes'], 9, 2**30)} "
            f"{_num(row['seconds'], 9)} {_num(row['floor_seconds'], 9)} {_num(row.get('ratio_to_floor'), 7)}  "
            f"{row['error'] or row.get('note') or ''}")


def gib(value) -> str:
    return "–" if value is None else f"{value / 2**30:.2f} GiB"


def e2e_row_line(row: dict) -> str:
    """One method's outcome, printed as soon as it is measured."""
    if row["status"] != "ok":
        return f"{row['method']}: {row['status']}, peak {gib(row['peak_bytes'])} {row['error'] or ''}"
    return (f"{row['method']}: ok, peak {gib(row['peak_bytes'])}, {row['step_seconds']:.2f} s/step, "
            f"final loss {row['final_loss']:.4f}")


def e2e_table(result: dict, cfg) -> Table:
    """The paper's table for ``result`` of :func:`~destila.bench.e2e.run_e2e` on ``cfg`` (an E2EConfig)."""
    table = Table(title=f"seq-len {cfg.seq_len} × batch {cfg.batch_size}, {cfg.device} {cfg.dtype}")
    for column in ("method", "peak memory", "step time", "tokens/s", "final loss", "Δ loss vs online",
                   "memory vs online", "time vs online"):
        table.add_column(column, justify="right")
    for r in result["rows"]:
        if r["status"] != "ok":
            table.add_row(r["method"], r["status"], *["–"] * 6)
            continue
        # Without an online row (not asked for, or failed) there is nothing to compare with: "–", not 1.00×.
        compared = "memory_vs_online" in r
        table.add_row(r["method"], gib(r["peak_bytes"]), f"{r['step_seconds']:.2f} s",
                      f"{r['tokens_per_second']:.0f}", f"{r['final_loss']:.4f}",
                      f"{r['loss_diff_vs_online']:+.4f}" if compared else "–",
                      f"{r['memory_vs_online']:.2f}×" if compared else "–",
                      f"{r['time_vs_online']:.2f}×" if compared else "–")
    return table


def e2e_summary_lines(result: dict, cfg) -> list[str]:
    """The one-time cache build, and after how many training runs caching pays for itself."""
    cache = result["cache"]
    lines = [f"cache build (one-time): {cache['seconds']:.1f} s for {cache['tokens']} tokens "
             f"({cache['teacher_tokens_per_second']:.0f} tokens/s), peak {gib(cache['peak_bytes'])}"]
    if result["break_even_runs"] is not None:
        lines.append(f"caching pays for itself after {result['break_even_runs']:.2f} training run(s) "
                     f"of {cfg.steps} steps")
    else:  # said, not left out: a reader looks for the verdict either way
        lines.append("caching does not pay back here: the online steps were no slower than the fused ones "
                     "(or one of them did not run)")
    return lines


def long_context_row_line(row: dict) -> str:
    return (f"{row['impl']:>8} at {row['seq_len']:>6} tokens: {row['status']}, peak {gib(row['peak_bytes'])}"
            + (f", {row['seconds']:.1f} s" if row.get("seconds") else ""))


def long_context_summary_lines(best: dict) -> list[str]:
    """``best`` from :func:`~destila.bench.e2e.longest_fitting`, as sentences."""
    lines = ["longest sequence that fits: " + ", ".join(f"{k} {v or 'none'}" for k, v in best.items())]
    if best.get("dense") and best.get("fused"):
        lines.append(f"fused reaches {best['fused'] / best['dense']:.0f}× the longest sequence dense fits")
    return lines
