"""The demo's report: ``report.md``, ``report.json`` and two PNG plots.

Pure functions of the results already computed; nothing here runs a model.
"""

from __future__ import annotations

import json
from pathlib import Path

from destila.eval import markdown_table
from destila.training.callbacks import read_training_log  # noqa: F401 (re-used by the demo)


def plot_training_curves(runs: dict[str, list[dict]], path: str | Path) -> Path:
    """KL to the teacher and cross-entropy against steps, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, records in runs.items():
        steps = [r["step"] for r in records]
        axes[0].plot(steps, [r["kl"] for r in records], label=name)
        axes[1].plot(steps, [r["ce"] for r in records], label=name)
    axes[0].set(title="KL to the teacher (top-K buckets, training batches)", xlabel="step", ylabel="nats/token")
    axes[1].set(title="cross-entropy on the next token", xlabel="step", ylabel="nats/token")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


_PLOTTED = (  # key, title, scale
    ("perplexity", "held-out perplexity (lower is better)", 1.0),
    ("top1_agreement", "top-1 agreement with the teacher", 100.0),
    ("kl_to_teacher", "KL to the teacher (nats/token)", 1.0),
    ("forward_tokens_per_second", "forward throughput (tokens/s)", 1.0),
    ("parameters", "parameters (millions)", 1e-6),
    ("peak_bytes", "peak memory (MB)", 1e-6),
)


def _bar_text(value: float) -> str:
    """``1272`` → ``"1272"``, ``3.138`` → ``"3.14"``; float16 rounding noise around 0 → ``"0"``."""
    if abs(value) < 5e-4:
        return "0"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def plot_metrics(results: list[dict], names: list[str], path: str | Path) -> Path:
    """One bar chart per metric of the evaluation table, one bar per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [(k, t, s) for k, t, s in _PLOTTED if all(r.get(k) is not None for r in results)]
    fig, axes = plt.subplots(1, len(shown), figsize=(3.2 * len(shown), 3.6))
    colors = ["#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974"]
    for ax, (key, title, scale) in zip(axes, shown):
        values = [r[key] * scale for r in results]
        bars = ax.bar(names, values, color=colors[: len(values)])
        ax.bar_label(bars, labels=[_bar_text(v) for v in values], fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def write_report(out: str | Path, *, settings: dict, stages: dict, cache: dict, results: list[dict],
                 names: list[str], runs: dict[str, list[dict]], command: str,
                 title: str = "destila demo report") -> dict:
    """Write ``report.md``, ``report.json``, ``training_curves.png`` and ``metrics.png`` into ``out``."""
    out = Path(out)
    curves = plot_training_curves(runs, out / "training_curves.png")
    metrics = plot_metrics(results, names, out / "metrics.png")
    named = [{**r, "model": name} for r, name in zip(results, names)]
    report = {"command": command, "settings": settings, "stages": stages, "cache": cache, "results": named,
              "training": {name: records for name, records in runs.items()}}
    (out / "report.json").write_text(json.dumps(report, indent=2))
    lines = [
        f"# {title}", "",
        f"Command: `{command}`", "",
        "## Held-out comparison", "",
        "Ratios are to the teacher. KL and agreement are measured against the teacher's cached top-K "
        "distributions on documents that training never saw.", "",
        markdown_table(named), "",
        "## Training curves", "", f"![training curves]({curves.name})", "",
        f"![metrics]({metrics.name})", "",
        "## Generated text (greedy, same prompt)", "",
        f"Prompt: `{results[0]['prompt']}`", "",
    ]
    for name, result in zip(names, results):
        # A student early in training often repeats a newline; show it rather than an empty box.
        sample = result["sample"].strip() or f"(whitespace only: {result['sample']!r})"
        lines += [f"**{name}**:", "", "```text", sample, "```", ""]
    lines += ["## Time per stage", "", "| stage | seconds |", "|---|---:|"]
    lines += [f"| {stage} | {info['seconds']:.1f} |" for stage, info in stages.items()]
    lines += [f"| **total** | {sum(info['seconds'] for info in stages.values()):.1f} |", ""]
    lines += ["## Cache", "", "| | |", "|---|---:|"]
    lines += [f"| {key} | {value} |" for key, value in cache.items()]
    lines += ["", "## Settings", "", "| setting | value |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in settings.items()]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    return report
