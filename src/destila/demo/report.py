"""Reports of staged runs: ``report.md``, ``report.json`` and two PNG plots.

Pure functions of the results already computed; nothing here runs a model.
:func:`write_demo_report` (the demo) opens with the verdict in numbers
(:func:`verdict`); :func:`write_report` is the recipes'. The plots are grids
with units (:func:`plot_training_curves`, :func:`plot_metrics`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from destila.demo.samples import degenerate, distinct_words
from destila.demo.settings import TRAININGS
from destila.eval import markdown_table
from destila.io import write_report_file
from destila.io.markdown import table_lines
from destila.training.callbacks import read_training_log

NOISE_NOTE = (
    "Speeds (tokens/s, seconds per stage) were measured on whatever else the machine was running; on a shared "
    "CPU they vary by 2× or more from run to run. Compare them within this report, not across reports."
)


def read_logs(path: str | Path) -> tuple[list[dict], list[dict]]:
    """``(training, held_out)`` records of a ``log.jsonl``, each the last one logged per step."""
    return read_training_log(path), read_training_log(path, prefix="eval")


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _spread(values: list[float], fmt) -> str:
    return " and ".join(fmt(v) for v in values)


def verdict(results: dict[str, dict], trained: dict[str, dict], *, held_out_documents: int, cache_tokens: int,
            seconds: float, minutes: float) -> str:
    """The report's first paragraph: who won, by how much, after how many steps and tokens.

    ``results``: evaluation results by name (``teacher``, ``distilled``, ``baseline`` and, with two seeds,
    ``distilled-seed1``, ``baseline-seed1``); ``trained``: the training summaries by the same names
    (``steps``, ``tokens``).
    """
    teacher, distilled, baseline = results["teacher"], results["distilled"], results["baseline"]
    d_steps, b_steps = trained["distilled"]["steps"], trained["baseline"]["steps"]
    d_ppl, b_ppl = distilled["perplexity"], baseline["perplexity"]
    d_agree, b_agree = distilled["top1_agreement"], baseline["top1_agreement"]
    # +1: the distilled student is better, -1: the baseline, 0: the same.
    signs = [(d_ppl < b_ppl) - (d_ppl > b_ppl), (d_agree > b_agree) - (d_agree < b_agree)]
    if signs == [1, 1]:
        outcome = "The distilled student is better on both."
    elif signs == [-1, -1]:
        outcome = "The baseline is better on both."
    elif signs == [0, 0]:
        outcome = "Neither is ahead: the two students score the same (too few steps to tell them apart)."
    else:
        ahead = " and ".join(name for name, sign in zip(("perplexity", "agreement"), signs) if sign == 1)
        outcome = (f"Mixed: the distilled student is better on {ahead} only." if ahead else
                   "Mixed: the baseline is ahead on one, the two are equal on the other.")
    if d_steps == b_steps:
        steps = f"both after {d_steps} steps ({trained['distilled']['tokens']:,} training tokens each)"
    else:
        steps = (f"after {d_steps} steps ({trained['distilled']['tokens']:,} tokens) for the distilled student "
                 f"but only {b_steps} ({trained['baseline']['tokens']:,} tokens) for the baseline, whose share of "
                 "the time budget ran out first; the training curves compare them step for step")
    text = [
        f"**Verdict.** Distillation reached held-out perplexity **{d_ppl:.1f}** "
        f"({d_ppl / teacher['perplexity']:.1f}× the teacher's {teacher['perplexity']:.1f}) against "
        f"**{b_ppl:.1f}** for the same student trained on the same data without the teacher "
        f"(cross-entropy only), {steps}; top-1 agreement with the teacher **{_pct(d_agree)}** vs "
        f"**{_pct(b_agree)}**. {outcome}",
        f"Scored on {distilled['tokens']:,} held-out tokens ({held_out_documents} documents that training never "
        f"saw); the training cache holds {cache_tokens:,} tokens, so each student saw it "
        f"{trained['distilled']['tokens'] / cache_tokens:.1f} times.",
    ]
    seeded = sorted(name for name in results if name.startswith("distilled-seed"))
    if seeded:
        d_all = [results["distilled"], *(results[n] for n in seeded)]
        b_all = [results["baseline"], *(results[n.replace("distilled", "baseline")] for n in seeded)]
        d_range = [r["perplexity"] for r in d_all]
        b_range = [r["perplexity"] for r in b_all]
        text.append(
            f"Over {len(d_all)} seeds (data order): perplexity {_spread(d_range, '{:.1f}'.format)} distilled "
            f"(spread {max(d_range) - min(d_range):.1f}) vs {_spread(b_range, '{:.1f}'.format)} baseline "
            f"(spread {max(b_range) - min(b_range):.1f}); agreement "
            f"{_spread([r['top1_agreement'] for r in d_all], _pct)} vs "
            f"{_spread([r['top1_agreement'] for r in b_all], _pct)}."
        )
    text.append(f"The run took {seconds / 60:.1f} min of its {minutes:g}-minute budget. {NOISE_NOTE}")
    return "\n\n".join(text)


def _figure(rows: int, cols: int, width: float, height: float):
    """A figure and its ``[rows][cols]`` axes, drawn off-screen (no pyplot state, nothing to close)."""
    # matplotlib is heavy: only when a figure is drawn
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False)


def _save(fig, path: str | Path) -> Path:
    fig.savefig(path, dpi=100)
    return Path(path)


_CURVES = (  # key in the training log, key in the held-out log, title, unit, scale, log axis
    ("kl", "eval_kl", "KL to the teacher", "nats/token", 1.0, False),
    ("ppl", "eval_ppl", "perplexity", "perplexity (log scale)", 1.0, True),
    ("top1_agreement", "eval_top1_agreement", "top-1 agreement with the teacher", "% of tokens", 100.0, False),
)


def curves_figure(runs: dict[str, tuple[list[dict], list[dict]]], held_out_tokens: int | None = None):
    """A 2×3 grid: KL, perplexity, agreement (columns) on training batches and on held-out data (rows);
    one row when no run has held-out records."""
    rows = 2 if any(held for _, held in runs.values()) else 1
    fig, axes = _figure(rows, 3, 13, 3.75 * rows)
    where = f"held-out ({held_out_tokens:,} tokens)" if held_out_tokens else "held-out"
    for row, label in enumerate(("training batches", where)[:rows]):
        for col, (train_key, held_key, title, unit, scale, log) in enumerate(_CURVES):
            ax = axes[row][col]
            for name, (train, held) in runs.items():
                records, key = (train, train_key) if row == 0 else (held, held_key)
                points = [(r["step"], r[key] * scale) for r in records if r.get(key) is not None]
                if points:
                    # Markers where points are few (held-out evaluations, short runs): a lone point shows.
                    ax.plot(*zip(*points), label=name, marker="o" if row == 1 or len(points) < 30 else None,
                            markersize=3)
            ax.set_title(f"{title}\n{label}", fontsize=10)
            ax.set_xlabel("optimizer step")
            ax.set_ylabel(unit)
            if log:
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_training_curves(runs: dict[str, tuple[list[dict], list[dict]]], path: str | Path,
                         held_out_tokens: int | None = None) -> Path:
    """:func:`curves_figure` saved as a PNG."""
    return _save(curves_figure(runs, held_out_tokens), path)


_PLOTTED = (  # key, title, unit, scale, log axis
    ("perplexity", "held-out perplexity (lower is better)", "perplexity (log scale)", 1.0, True),
    ("accuracy", "next-token accuracy", "% of tokens", 100.0, False),
    ("top1_agreement", "top-1 agreement with the teacher", "% of tokens", 100.0, False),
    ("kl_to_teacher", "KL to the teacher (lower is better)", "nats/token", 1.0, False),
    ("parameters", "parameters", "millions", 1e-6, False),
    ("size_bytes", "size on disk", "MB", 1e-6, False),
    ("forward_tokens_per_second", "forward speed", "tokens/s", 1.0, False),
    ("generate_tokens_per_second", "generation speed", "new tokens/s", 1.0, False),
    ("peak_bytes", "peak memory", "MB", 1e-6, False),
)


def _bar_text(value: float, unit: str) -> str:
    """``1272.4`` → ``"1272"``, ``3.138`` → ``"3.14"``, ``47.23`` (%) → ``"47.2%"``; float16 noise at 0 → ``"0"``."""
    if abs(value) < 5e-4:
        return "0"
    if unit.startswith("%"):
        return f"{value:.1f}%"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def metrics_figure(results: list[dict], names: list[str]):
    """A 3×3 grid of bar charts, one per metric of the evaluation table, one bar per model, values on the bars."""
    shown = [m for m in _PLOTTED if all(r.get(m[0]) is not None for r in results)]
    cols = 3
    rows = math.ceil(len(shown) / cols)
    fig, axes = _figure(rows, cols, 13, 3.6 * rows)
    colors = ["#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974", "#64b5cd"]
    for ax, (key, title, unit, scale, log) in zip(axes.flat, shown):
        # Float16 rounding noise around 0 (the teacher's KL to its own cache) would draw a tiny
        # negative bar whose label lands below the axis, on the tick label.
        values = [0.0 if abs(r[key] * scale) < 5e-4 else r[key] * scale for r in results]
        bars = ax.bar(range(len(values)), values, color=[colors[i % len(colors)] for i in range(len(values))])
        ax.bar_label(bars, labels=[_bar_text(v, unit) for v in values], fontsize=8, padding=2)
        ax.set_xticks(range(len(values)), names, fontsize=8, rotation=15 if len(names) > 3 else 0)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
        top = max(values) if values else 1.0
        if log:
            ax.set_yscale("log")
            ax.set_ylim(max(min(v for v in values if v > 0) / 2, 1e-3), top * 3)
        else:
            ax.set_ylim(0, (top if top > 0 else 1.0) * 1.2)  # room for the labels above the bars
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(shown):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def plot_metrics(results: list[dict], names: list[str], path: str | Path) -> Path:
    """:func:`metrics_figure` saved as a PNG."""
    return _save(metrics_figure(results, names), path)


def _text_block(text: str) -> list[str]:
    # A student early in training often repeats a newline; show it rather than an empty box.
    shown = text.strip() or f"(whitespace only: {text!r})"
    return ["```text", shown.replace("```", "'''"), "```"]


def continuation_lines(results: list[dict], names: list[str]) -> list[str]:
    """Markdown: per prompt, each model's greedy continuation."""
    lines = []
    prompts = [row["prompt"] for row in results[0].get("continuations", [])]
    for number, prompt in enumerate(prompts):
        lines += [f"### Prompt {number + 1}: `{prompt}`", ""]
        for name, result in zip(names, results):
            row = result["continuations"][number]
            flaw = degenerate(row["greedy"])
            flag = f"; **degenerate: {flaw}**" if flaw else ""
            lines += [f"**{name}**, greedy ({distinct_words(row['greedy'])} distinct words{flag}):", "",
                      *_text_block(row["greedy"]), ""]
    return lines


def _tail_sections(stages: dict, cache: dict, settings: dict, intro: str = "") -> list[str]:
    """Markdown: time per stage, the cache, the settings."""
    total = sum(info["seconds"] for info in stages.values())
    times = [*((stage, f"{info['seconds']:.1f}") for stage, info in stages.items()), ("**total**", f"{total:.1f}")]
    lines = ["## Time per stage", "", *([intro, ""] if intro else []), *table_lines(["stage", "seconds"], times), ""]
    lines += ["## Cache", "", *table_lines(None, [(key, f"{value:.1f}" if isinstance(value, float) else value)
                                                  for key, value in cache.items() if key != "seconds"], "lr")]
    lines += ["", "## Settings", "", *table_lines(["setting", "value"], settings.items(), "ll")]
    return lines


def write_report(out: str | Path, *, settings: dict, stages: dict, cache: dict, results: list[dict],
                 names: list[str], runs: dict[str, list[dict] | tuple[list[dict], list[dict]]], command: str,
                 title: str = "destila report") -> dict:
    """A run's report (the recipes'): ``report.md``, ``report.json``, ``training_curves.png``, ``metrics.png``.

    ``runs``: per trained model, its training records, or ``(training, held_out)`` records.
    """
    out = Path(out)
    runs = {name: records if isinstance(records, tuple) else (records, []) for name, records in runs.items()}
    curves = plot_training_curves(runs, out / "training_curves.png")
    metrics = plot_metrics(results, names, out / "metrics.png")
    named = [{**r, "model": name} for r, name in zip(results, names)]
    report = {"command": command, "settings": settings, "stages": stages, "cache": cache, "results": named,
              "training": {name: {"train": train, "held_out": held} for name, (train, held) in runs.items()}}
    write_report_file(out / "report.json", json.dumps(report, indent=2))
    lines = [f"# {title}", "", f"Command: `{command}`", "", "## Held-out comparison", "",
             "Ratios are to the first model. KL and agreement are measured against the teacher's cached top-K "
             "distributions on documents that training never saw.", "",
             markdown_table(named), "", f"![metrics]({metrics.name})", "",
             "## Training curves", "", f"![training curves]({curves.name})", "",
             "## Generated text (greedy, same prompt)", "", f"Prompt: `{results[0]['prompt']}`", ""]
    for name, result in zip(names, results):
        lines += [f"**{name}**:", "", *_text_block(result["sample"]), ""]
    lines += _tail_sections(stages, cache, settings, NOISE_NOTE)
    write_report_file(out / "report.md", "\n".join(lines) + "\n")
    return report


def degenerate_lines(results: list[dict], names: list[str]) -> list[str]:
    """One sentence per model whose greedy continuations are degenerate (:func:`destila.demo.samples.degenerate`)."""
    lines = []
    for name, result in zip(names, results):
        flaws = [(row["prompt"], degenerate(row["greedy"])) for row in result.get("continuations", [])]
        flaws = [(prompt, flaw) for prompt, flaw in flaws if flaw]
        if flaws:
            said = "; ".join(f"`{prompt}` {flaw}" for prompt, flaw in flaws)
            lines.append(f"**Degenerate text from {name}**: its greedy continuation of {said}.")
    return lines


def task_lines(results: list[dict], names: list[str]) -> list[str]:
    """Markdown: the built-in task's accuracy per model (nothing when it was not run)."""
    scored = [(name, r["task"]) for name, r in zip(names, results) if r.get("task")]
    if not scored:
        return []
    first = scored[0][1]
    lines = ["## Task accuracy", "",
             f"`{first['task']}` through lm-evaluation-harness, {first['questions']} questions ({first['about']}); chance "
             f"{100 * first['chance']:.0f}%. ± is the harness's standard error; questions of one sentence share "
             "their context, and counted by sentence the error was up to a fifth larger (docs/eval.md).", "",
             *table_lines(["model", "acc", "seconds"],
                          [(name, f"{100 * r['acc']:.1f}% ± {100 * r['acc_stderr']:.1f}", f"{r['seconds']:.0f}")
                           for name, r in scored])]
    return lines + [""]


def below_minimum_line(trained: dict[str, dict], min_steps: int) -> str | None:
    """The report's first line when a student trained fewer than ``min_steps`` steps (``--force``)."""
    short = [f"{name} {info['steps']}" for name, info in trained.items() if info["steps"] < min_steps]
    if not short:
        return None
    return (f"**Below the minimum: these results come from fewer than {min_steps} training steps per student "
            f"({', '.join(short)} steps; run with --force), too few to judge distillation by.**")


def precision_lines(plan: dict | None, requested: str = "auto") -> list[str]:
    """Which precision the students trained in and why: the step times it was chosen by, or what ruled
    the choice out (``requested``: the ``--precision`` asked for). None for a plan that timed nothing."""
    timed = (plan or {}).get("timed_step_seconds")
    if not timed:
        return []
    times = ", ".join(f"{precision} {seconds:.2f} s" for precision, seconds in timed.items())
    why = ("the faster of the two" if len(timed) > 1 else
           "set by --precision" if requested != "auto" else "the CPU has no native bfloat16, so only it was timed")
    return ["", f"Precision: {plan['precision']}, {why}; the plan's timed step (forward, backward and update "
                f"of one batch): {times}."]


def write_demo_report(out: str | Path, *, settings: dict, stages: dict, cache: dict, trained: dict[str, dict],
                      results: list[dict], names: list[str], command: str, untrained: list[str] = (),
                      plan: dict | None = None) -> dict:
    """The demo's report: the verdict first, then as :func:`write_report` plus the training table and
    greedy continuations of every prompt.

    ``untrained``: students that made no training step; named, never scored (their numbers would be
    the initial cut's). A student below ``settings["min_steps"]`` makes the report's first line say so.
    ``plan``: the plan stage's record; its timed steps per precision are listed under the training table."""
    out = Path(out)
    runs = {name: read_logs(Path(info["path"]) / "log.jsonl") for name, info in trained.items()}
    curve_tokens = settings["eval_curve_sequences"] * (settings["seq_len"] - 1)
    curves = plot_training_curves(runs, out / "training_curves.png", held_out_tokens=curve_tokens)
    metrics = plot_metrics(results, names, out / "metrics.png")
    named = [{**r, "model": name} for r, name in zip(results, names)]
    by_name = dict(zip(names, results))
    total = sum(info["seconds"] for info in stages.values())
    if "distilled" in by_name and "baseline" in by_name:
        summary = verdict(by_name, trained, held_out_documents=cache["documents_held_out"],
                          cache_tokens=cache["train_tokens"], seconds=total, minutes=settings["minutes"])
    else:
        summary = "**No verdict**: a student made no training step, so there is nothing to compare."
    minimum = min(settings.get("min_steps", 1), settings.get("max_steps", 1))  # a lower cap is the user's choice
    first = [line for line in [below_minimum_line(trained, minimum)] if line]
    first += [f"**Not trained**: {name} made no training step in the budget; it is left out of every table."
              for name in untrained]
    summary = "\n\n".join([*first, summary, *degenerate_lines(results, names)])
    report = {"command": command, "verdict": summary, "settings": settings, "stages": stages, "cache": cache,
              "trained": trained, "results": named,
              "training": {name: {"train": train, "held_out": held} for name, (train, held) in runs.items()}}
    write_report_file(out / "report.json", json.dumps(report, indent=2))
    lines = ["# destila demo report", "", summary, "", f"Command: `{command}`", "",
             "## Held-out comparison", "",
             "Ratios are to the teacher. KL and agreement are measured against the teacher's cached top-K "
             "distributions on documents that training never saw.", "",
             markdown_table(named), "", f"![metrics]({metrics.name})", "",
             *task_lines(results, names),
             "## Training", ""]
    rows = []
    for name, info in trained.items():
        loss = TRAININGS[info.get("training") or info["kind"]][0]  # "kind": a stage finished by an older destila
        targets = ", ".join(f"{step}→{target}" for step, target in info["step_targets"])
        precision = info.get("precision", "float32")
        rows.append((name, loss, precision, info["steps"], f"{info['tokens']:,}", targets, f"{info['seconds']:.0f}"))
    lines += table_lines(["student", "loss", "precision", "steps", "training tokens",
                          "step targets (at step → target)", "seconds"], rows, "lllrrlr")
    lines += precision_lines(plan, settings.get("precision", "auto"))
    lines += ["", f"Held-out curves score the first {settings['eval_curve_sequences']} held-out sequences "
              f"({curve_tokens:,} tokens) every {settings['eval_every']} steps; the table above scores all of them.",
              "", f"![training curves]({curves.name})", "",
              "## Generated text", "",
              f"{settings['new_tokens']} new tokens per prompt, greedy (the most likely token at each step).", ""]
    lines += continuation_lines(results, names)
    lines += _tail_sections(stages, cache, settings, f"Budget: {settings['minutes']:g} min. {NOISE_NOTE}")
    write_report_file(out / "report.md", "\n".join(lines) + "\n")
    return report
