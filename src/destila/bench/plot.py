"""PNG of a loss sweep: peak memory and fwd+bwd time against sequence length, one line per impl."""

from __future__ import annotations

import os
from pathlib import Path

STYLE = {  # impl: (colour, line style, label)
    "fused": ("tab:green", "-", "fused"),
    "fused-exact": ("tab:olive", "-.", "fused, precision exact"),
    "fused-torch": ("tab:cyan", ":", "fused, torch row math"),
    "chunked": ("tab:orange", "-", "forward-chunked"),
    "dense": ("tab:red", "-", "dense"),
    "floor": ("tab:gray", "--", "floor (lm_head GEMMs)"),
}


def plot_loss_sweep(rows: list[dict], path: str | os.PathLike, title: str | None = None) -> None:
    """Two log-log panels; configurations that did not run (oom/skipped) are marked ✕ on the x axis.

    The floor's memory is that of its inputs, gradients and one chunk buffer: the least any
    chunked implementation can hold.
    """
    # matplotlib is heavy: only when a plot is drawn
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt  # after the backend is chosen

    fig, (mem_ax, time_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    impls = [i for i in STYLE if any(r["impl"] == i for r in rows)]
    for lane, impl in enumerate(impls):
        colour, line, label = STYLE[impl]
        ok = sorted((r for r in rows if r["impl"] == impl and r["status"] == "ok"), key=lambda r: r["seq_len"])
        failed = [r["seq_len"] for r in rows if r["impl"] == impl and r["status"] != "ok"]
        xs = [r["seq_len"] for r in ok]
        mem_ax.plot(xs, [r["peak_bytes"] / 2**30 for r in ok], line, marker="o", color=colour, label=label)
        time_ax.plot(xs, [r["seconds"] for r in ok], line, marker="o", color=colour, label=label)
        for ax in (mem_ax, time_ax):
            if failed:
                # One lane per impl just above the x axis, so the marks do not hide each other.
                ax.plot(failed, [0.03 * (lane + 1)] * len(failed), "x", color=colour, markersize=9, clip_on=False,
                        transform=ax.get_xaxis_transform())
    for ax, ylabel in ((mem_ax, "peak memory above baseline (GiB)"), (time_ax, "forward + backward (s)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N (tokens)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    if rows:
        r = rows[0]
        fig.suptitle(title or f"output-head loss, {r['device']} {r['dtype']}, H={r['hidden']}, V={r['vocab']}, "
                              f"K={r['top_k']}, chunk={r['chunk_size']}   (✕: oom / skipped)", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
