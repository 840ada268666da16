"""The draft measurement as a table: one row per way (the teacher alone, with the draft, with prompt lookup)."""

from __future__ import annotations

_NAMES = {"teacher": "teacher alone", "draft": "teacher + draft", "prompt_lookup": "prompt lookup"}


def _cell(value, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def render_draft_table(report: dict):
    """A rich table of ``report["ways"]`` (see :func:`destila.draft.measure.measure_draft`)."""
    # rich: only when a table is printed
    from rich.table import Table

    settings = report["settings"]
    greedy = settings["temperature"] == 0
    table = Table(title=f"speculative decoding: {settings['prompts']} prompts, ≤{settings['max_new_tokens']} new "
                        f"tokens, {'greedy' if greedy else 'sampling T=' + str(settings['temperature'])}, "
                        f"{settings['threads']} threads")
    # Two-line headers keep the seven columns whole in an 80-column terminal.
    for header in ("way", "new\ntok/s", "speedup", "acceptance", "tokens/\nforward", "forward\ncost",
                   "identical" if greedy else "seed"):
        table.add_column(header, justify="left" if header == "way" else "right")
    for row in report["ways"]:
        last = f"{row['identical']}/{settings['prompts']}" if greedy else str(settings["seed"])
        table.add_row(_NAMES[row["way"]], _cell(row["tokens_per_second"]), _cell(row["speedup"]) + "×",
                      _cell(row["acceptance"], 3), _cell(row["tokens_per_forward"]), _cell(row.get("forward_cost")),
                      last)
    table.caption = _what_ran(settings)
    return table


def _what_ran(settings: dict) -> str:
    """Which proposers and products the rows come from (the settings a reader would otherwise have to guess)."""
    draft = settings.get("draft_tokens")
    proposals = (f"the draft proposes {draft} per teacher forward" if draft
                 else "the draft proposes as its generation config says")
    ways = settings.get("matmul_ways") or {}
    products = ("torch's own products" if settings.get("matmul") == "torch" else
                f"timed products ({ways.get('weight_major', 0)} shapes weight-major, {ways.get('torch', 0)} torch's)")
    wrapped = settings.get("matmul_wrapped_layers")
    kept = f"; {wrapped} linear layers already wrapped by another library kept their own" if wrapped else ""
    return f"{proposals}, prompt lookup {settings['prompt_lookup_tokens']}; {products}{kept}"


def time_split(report: dict) -> str | None:
    """Where each way's teacher forward went, in ms: the teacher's forward, the draft's steps, the rest
    (``generate``'s own loop); None for reports written before forwards were timed."""
    parts = []
    for row in report["ways"]:
        if row.get("teacher_ms_per_forward") is None:
            return None
        draft = f" + draft {row['draft_ms_per_forward']:.1f}" if row["way"] == "draft" else ""
        parts.append(f"{_NAMES[row['way']]}: teacher {row['teacher_ms_per_forward']:.1f}{draft} + rest "
                     f"{row['other_ms_per_forward']:.1f}")
    return ("ms per teacher forward (forward cost = this over plain decoding's ms per token; speedup = tokens/forward "
            "over forward cost): " + "; ".join(parts))


def baseline_note(settings: dict) -> str | None:
    """A line when plain decoding was slower per token than the teacher's bare forward suggests, or a forward of 1
    new token slower than one of 2 (the baseline is then not at its fastest, and every ratio is flattered)."""
    if not settings["baseline_fair"]:
        return (f"note: the teacher alone took {settings['teacher_alone_ms_per_token']} ms per token, its bare cached "
                f"forward {settings['teacher_forward_ms']} ms; another load on this machine slows the baseline and "
                "flatters every ratio: measure again on quiet cores")
    if not settings.get("one_token_forward_fair", True):  # reports written before it was measured lack it
        return (f"note: a cached forward of 1 new token took {settings['teacher_forward_ms']} ms, one of 2 "
                f"{settings['teacher_forward_2_ms']} ms: plain decoding was not at its fastest (a product's way timed "
                "under another load?), which flatters every ratio: measure again on quiet cores")
    return None


def verdict(report: dict) -> str | None:
    """One line on what the measurement says to use: the draft, prompt lookup (which needs no draft), or neither;
    None when the draft was not measured. Ratios are this machine's and these prompts'."""
    speeds = {row["way"]: row["speedup"] for row in report["ways"] if row.get("speedup") is not None}
    draft, lookup = speeds.get("draft"), speeds.get("prompt_lookup")
    if draft is None:
        return None
    if lookup is not None and lookup > max(draft, 1):
        return (f"verdict: prompt lookup, which needs no draft, made the teacher {lookup:.2f}× faster here, the draft "
                f"{draft:.2f}×: use prompt lookup (`generate(prompt_lookup_num_tokens=1)`)"
                + _needed(report, lookup, "prompt lookup"))
    if draft <= 1:
        return (f"verdict: the draft made the teacher no faster here ({draft:.2f}×): train it longer (--tokens) or "
                "measure where a teacher forward costs more against a draft step (a larger teacher, a GPU)"
                + _needed(report, 1.0, "the teacher alone"))
    ahead = f", ahead of prompt lookup ({lookup:.2f}×)" if lookup is not None else ""
    return f"verdict: the draft made the teacher {draft:.2f}× faster here{ahead}"


def _needed(report: dict, speedup: float, what: str) -> str:
    """With one proposal per forward, tokens per forward = 1 + acceptance × proposals per forward (just under 1: a
    forward with one token of the answer's length left has none), and speedup = tokens per forward / forward cost: so
    ``speedup`` needs an acceptance of ``(speedup × cost − 1) / proposals per forward`` at the cost measured. ""
    when the draft proposed another number of tokens per forward (the relation is not one acceptance then) or the
    cost or counts are unknown."""
    row = next(row for row in report["ways"] if row["way"] == "draft")
    cost, acceptance = row.get("forward_cost"), row.get("acceptance")
    proposed, forwards = row.get("proposed"), row.get("teacher_forwards")
    if report.get("settings", {}).get("draft_tokens") != 1 or None in (cost, acceptance, proposed) or not forwards:
        return ""
    needed = (speedup * cost - 1) * forwards / proposed
    digits = next((d for d in (0, 1) if f"{needed:.{d}%}" != f"{acceptance:.{d}%}"), 2)  # never "30% (here 30%)"
    return (f"; to beat {what} at this forward cost ({cost:.2f} plain steps) the draft's proposals would have to be "
            f"kept more than {needed:.{digits}%} of the time (here {acceptance:.{digits}%})")


def print_draft_report(console, report: dict) -> None:
    """The table, then where each forward's time went, the baseline's note if any, then the verdict (what
    ``eval --draft`` and the recipe show)."""
    console.print(render_draft_table(report))
    for line in (time_split(report), baseline_note(report["settings"]), verdict(report)):
        if line:
            console.print(line, highlight=False)
