"""Tables of destila beside its peers: one for the terminal (rich), one in Markdown for the docs."""

from __future__ import annotations

LOSS_COLUMNS = ("N", "loss", "teacher input (counted)", "divergence", "status", "peak GiB", "memory × fused",
                "seconds", "time × fused", "×floor", "×floor ÷ fused's")


def _num(value, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def loss_table_rows(rows: list[dict]) -> list[list[str]]:
    """The loss sweep's rows beside destila fused, as strings (see :func:`~destila.bench.peers_loss.peer_comparison`)."""
    from destila.bench.peers_loss import peer_comparison

    out = []
    for e in peer_comparison(rows):
        status = e["status"] if e["status"] == "ok" else f"{e['status']} ({e['error']})"
        out.append([str(e["seq_len"]), e.get("peer") or e["impl"], e.get("inputs") or "", e.get("divergence") or "",
                    status, _num(e["peak_bytes"] and e["peak_bytes"] / 2**30, ".2f"),
                    _num(e["memory_vs_fused"], ".2f"), _num(e["seconds"], ".2f"), _num(e["time_vs_fused"], ".2f"),
                    _num(e["ratio_to_floor"], ".2f"), _num(e["floor_ratio_vs_fused"], ".2f")])
    return out


def print_peer_table(rows: list[dict]) -> None:
    """The loss sweep with its peers, one table, then the verdict per N."""
    from rich.console import Console
    from rich.table import Table

    from destila.bench.peers_loss import peer_comparison, peer_verdicts

    table = Table(title="destila beside its peers (ratios to destila fused, same sweep)")
    for column in LOSS_COLUMNS:
        table.add_column(column, justify="left" if column in ("loss", "teacher input (counted)", "divergence",
                                                              "status") else "right")
    for cells in loss_table_rows(rows):
        table.add_row(*cells)
    console = Console(width=200)
    console.print(table)
    for line in peer_verdicts(peer_comparison(rows)):
        console.print(line)


def markdown(header: list[str] | tuple[str, ...], body: list[list[str]]) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" for cells in body]
    return "\n".join(lines)


def loss_markdown(rows: list[dict]) -> str:
    return markdown(LOSS_COLUMNS, loss_table_rows(rows))
