"""destila beside its peers in the terminal: the loss table (rich) with a verdict per N, and the bar plot."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from benchmarks.peers.e2e import E2E_COLUMNS, e2e_table_rows
from benchmarks.peers.loss import peer_comparison, peer_verdicts

LOSS_COLUMNS = ("N", "loss", "teacher input (counted)", "divergence", "status", "peak GiB", "memory × fused",
                "seconds", "time × fused", "×floor", "×floor ÷ fused's")


def _num(value, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def loss_table_rows(rows: list[dict]) -> list[list[str]]:
    """The loss sweep's rows beside destila fused, as strings (see :func:`~benchmarks.peers.loss.peer_comparison`)."""
    out = []
    for e in peer_comparison(rows):
        status = f"{e['status']} ({e['error'] or e['note']})" if e["error"] or e["note"] else e["status"]
        out.append([str(e["seq_len"]), e.get("peer") or e["impl"], e.get("inputs") or "", e.get("divergence") or "",
                    status, _num(e["peak_bytes"] and e["peak_bytes"] / 2**30, ".2f"),
                    _num(e["memory_vs_fused"], ".2f"), _num(e["seconds"], ".2f"), _num(e["time_vs_fused"], ".2f"),
                    _num(e["ratio_to_floor"], ".2f"), _num(e["floor_ratio_vs_fused"], ".2f")])
    return out


def print_peer_table(rows: list[dict]) -> None:
    """The loss sweep with its peers, one table, then the verdict per N."""
    table = Table(title="destila beside its peers (ratios to destila fused, same sweep)")
    for column in LOSS_COLUMNS:
        table.add_column(column, justify="left" if column in ("loss", "teacher input (counted)", "divergence",
                                                              "status") else "right")
    for cells in loss_table_rows(rows):
        table.add_row(*map(escape, cells))  # "destila[peers]" in a reason is text, not rich markup
    console = Console(width=200)
    console.print(table)
    for line in peer_verdicts(peer_comparison(rows)):
        console.print(line)


def plot_peers(rows: list[dict], path) -> None:
    """PNG: per N, peak memory and time over the in-process floor of destila's rows and each peer's, as bars.

    A row that did not run (oom, skipped, unavailable) gets no bar and its status written in its place.
    """
    import matplotlib  # heavy, and only for --plot

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r["impl"] != "floor"]
    names = list(dict.fromkeys(r["impl"] for r in shown))
    sizes = sorted({r["seq_len"] for r in shown})
    width = 0.8 / max(len(names), 1)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, key, label in ((axes[0], "peak_bytes", "peak memory above baseline (GiB)"),
                           (axes[1], "ratio_to_floor", "fwd+bwd time ÷ lm_head GEMMs (same process)")):
        for i, name in enumerate(names):
            for j, n in enumerate(sizes):
                row = next((r for r in shown if r["impl"] == name and r["seq_len"] == n), None)
                x = j + (i - (len(names) - 1) / 2) * width
                if row is None:
                    continue
                if row["status"] == "ok" and row.get(key):
                    value = row[key] / 2**30 if key == "peak_bytes" else row[key]
                    ax.bar(x, value, width, color=f"C{i}", label=name if j == 0 else None)
                else:
                    ax.text(x, 0.02, row["status"], rotation=90, ha="center", va="bottom", fontsize=7,
                            color=f"C{i}", transform=ax.get_xaxis_transform())
        ax.set_xticks(range(len(sizes)), [f"N={n // 1024}K" if n % 1024 == 0 else f"N={n}" for n in sizes])
        ax.set_xlim(-0.5, len(sizes) - 0.5)
        if key == "peak_bytes":
            ax.set_yscale("log")
        else:
            ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)  # the floor itself
        ax.set_ylabel(label)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels) or 1, fontsize=8)
    r = shown[0] if shown else {}
    fig.suptitle(f"destila beside its peers: {r.get('device')} {r.get('dtype')}, H={r.get('hidden')}, "
                 f"V={r.get('vocab')}, K={r.get('top_k')}", fontsize=10, y=0.02, va="bottom")
    fig.tight_layout(rect=(0, 0.05, 1, 0.9))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_e2e_table(result: dict, cfg, heldout_tokens: int) -> None:
    """destila's methods and the peer trainers of ``result`` (:func:`~benchmarks.peers.e2e.run_e2e_with_peers`)."""
    table = Table(title=f"destila beside TRL: seq-len {cfg.seq_len} × batch {cfg.batch_size}, {cfg.steps} steps, "
                        f"{cfg.device} {cfg.dtype}; held-out KL on {heldout_tokens} tokens")
    for column in E2E_COLUMNS:
        table.add_column(column, justify="left" if column in ("trainer", "status") else "right")
    for cells in e2e_table_rows(result["rows"]):
        table.add_row(*cells)
    Console(width=200).print(table)
