"""The comparison of evaluated models as a table (terminal or Markdown), ratios to the first model."""

from __future__ import annotations

from pathlib import Path

from destila.io.markdown import table_lines

METRICS = (  # key, label, format, show the ratio to the first model
    ("tokens", "tokens scored", "{:,.0f}", False),
    ("documents", "documents scored", "{:,.0f}", False),
    ("perplexity", "perplexity", "{:.2f}", True),
    # Per byte of text: comparable across tokenizers (a cache with byte spans).
    ("bits_per_byte", "bits per byte", "{:.3f}", True),
    ("accuracy", "next-token accuracy", "{:.1%}", True),
    # Against itself the teacher's KL is 0 (up to float16 rounding): no ratio.
    ("kl_to_teacher", "KL to teacher (nats/token)", "{:.4f}", False),
    ("top1_agreement", "top-1 agreement with teacher", "{:.1%}", True),
    # A model on another tokenizer: its KL and agreement count these rows only (see aligned_note).
    ("aligned_rows", "one-to-one positions (KL, agreement)", "{:,.0f}", False),
    ("parameters", "parameters", "{:,.0f}", True),
    ("size_bytes", "size on disk (MB)", "{:.1f}", True),
    ("forward_tokens_per_second", "forward (tokens/s)", "{:,.0f}", True),
    ("generate_tokens_per_second", "generation (new tokens/s)", "{:,.1f}", True),
    ("peak_bytes", "peak memory (MB)", "{:,.0f}", True),
)


def comparison_rows(results: list[dict]) -> list[tuple[str, list[str]]]:
    """``(label, cells)`` per metric: each model's value and its ratio to the first model's."""
    rows = []
    for key, label, fmt, with_ratio in METRICS:
        if not any(r.get(key) is not None for r in results):
            continue
        base = results[0].get(key)
        cells = []
        for result in results:
            value = result.get(key)
            if value is None:
                cells.append("–")
                continue
            shown = value / 1e6 if key in ("size_bytes", "peak_bytes") else value
            cell = fmt.format(shown).replace("-0.0000", "0.0000")
            if with_ratio and result is not results[0] and base not in (None, 0):
                cell += f" (×{value / base:.2f})"
            cells.append(cell)
        rows.append((label, cells))
    return rows


_SCORED = {"all": None, "assistant": "scored: assistant turns only (the positions trained on)",
           "completion": "scored: completions only (the positions trained on)"}


def scored_note(results: list[dict]) -> str | None:
    """One line saying which positions were scored, when not all of them (assistant turns, completions)."""
    scored = {r.get("scored_positions") or "all" for r in results}
    return "; ".join(_SCORED.get(k) or f"scored: {k}" for k in sorted(scored) if _SCORED.get(k, k)) or None


def aligned_note(results: list[dict]) -> str | None:
    """One line saying where the KL and agreement of a model on another tokenizer were measured."""
    if not any(r.get("aligned_rows") is not None for r in results):
        return None
    return ("KL and agreement of a model with another tokenizer than the cache's: on the aligned one-to-one "
            "positions only (the teacher's next token is the model's, the same bytes)")


def _notes(results: list[dict]) -> str | None:
    return "; ".join(note for note in (scored_note(results), aligned_note(results)) if note) or None


def render_table(results: list[dict], title: str = "destila eval"):
    """A ``rich`` table: metrics as rows, models as columns, ratios to the first model."""
    # rich: only when a table is printed
    from rich.table import Table

    table = Table(title=title, caption=_notes(results))
    table.add_column("metric")
    for result in results:
        table.add_column(Path(result["model"]).name or result["model"], justify="right")
    for label, cells in comparison_rows(results):
        table.add_row(label, *cells)
    return table


def markdown_table(results: list[dict]) -> str:
    """The same comparison as :func:`render_table`, as a Markdown table."""
    names = [Path(r["model"]).name or r["model"] for r in results]
    lines = table_lines(["metric", *names], [(label, *cells) for label, cells in comparison_rows(results)])
    note = _notes(results)
    return "\n".join(lines + ([f"\n{note[0].upper() + note[1:]}."] if note else []))
