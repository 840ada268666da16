"""PNGs of the end-to-end benchmark: the paper's comparison, and the long-context sweep."""

from __future__ import annotations

from pathlib import Path

COLORS = {"online": "#c44e52", "dense": "#8172b2", "chunked": "#ccb974", "fused": "#4c72b0"}


def _pyplot():
    # matplotlib is heavy: only when a plot is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after the backend is chosen

    return plt


def plot_e2e(result: dict, path: str | Path) -> Path:
    """Bars of peak memory and step time per method; the loss after every step, one line per method."""
    plt = _pyplot()
    rows = [r for r in result["rows"] if r["status"] == "ok"]
    names = [r["method"] for r in rows]
    colors = [COLORS.get(n, "gray") for n in names]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    bars = axes[0].bar(names, [r["peak_bytes"] / 2**30 for r in rows], color=colors)
    axes[0].bar_label(bars, fmt="%.2f")
    axes[0].set(title="peak memory above baseline (GiB)")
    bars = axes[1].bar(names, [r["step_seconds"] for r in rows], color=colors)
    axes[1].bar_label(bars, fmt="%.2f")
    axes[1].set(title="median step time (s)")
    for row, color in zip(rows, colors):
        axes[2].plot(range(1, len(row["losses"]) + 1), row["losses"], marker="o", color=color, label=row["method"])
    axes[2].set(title="training loss per step", xlabel="step")
    axes[2].legend()
    config = result["config"]
    fig.suptitle(f"destila bench e2e: seq-len {config['seq_len']}, batch {config['batch_size']}, "
                 f"{config['device']} {config['dtype']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def plot_long_context(rows: list[dict], path: str | Path) -> Path:
    """Peak memory against sequence length per loss impl (log-log); failures marked at the budget."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    budget = rows[0]["memory_budget"] / 2**30 if rows and rows[0].get("memory_budget") else None
    for impl in dict.fromkeys(r["impl"] for r in rows):
        ok = [r for r in rows if r["impl"] == impl and r["status"] == "ok"]
        ax.plot([r["seq_len"] for r in ok], [r["peak_bytes"] / 2**30 for r in ok], marker="o",
                color=COLORS.get(impl, "gray"), label=impl)
        failed = [r for r in rows if r["impl"] == impl and r["status"] in ("oom", "skipped")]
        if failed and budget:
            ax.scatter([failed[0]["seq_len"]], [budget], marker="x", s=80, color=COLORS.get(impl, "gray"))
    if budget:
        ax.axhline(budget, color="black", linestyle="--", linewidth=1, label="memory budget")
    ax.set(xscale="log", yscale="log", xlabel="sequence length (tokens)", ylabel="peak memory (GiB)",
           title="one student training step per loss (× = did not fit)")
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
