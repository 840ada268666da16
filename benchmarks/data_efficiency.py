"""Data efficiency: how many training tokens a distilled row needs to reach the CE-only baseline's perplexity.

Shared by ``benchmarks/student_quality.py`` and ``benchmarks/quality_fresh.py`` (records: one dict per row,
seed and budget with ``row``, ``budget_tokens`` and ``perplexity``).
"""

from __future__ import annotations

import math
import statistics


def mean_ppl_points(records: list[dict], row: str) -> list[tuple[int, float]]:
    """``(budget tokens, mean held-out perplexity over seeds)`` of ``row``, by budget, the untrained start left out."""
    by_budget: dict[int, list[float]] = {}
    for r in records:
        if r["row"] == row and r["budget_tokens"]:
            by_budget.setdefault(r["budget_tokens"], []).append(r["perplexity"])
    return sorted((b, statistics.mean(v)) for b, v in by_budget.items())


def data_efficiency(records: list[dict], row: str = "kd", against: str = "final") -> dict | None:
    """Tokens ``row`` (a loss with the teacher) needs to reach CE's final perplexity (``against="best"``: CE's
    lowest, at whichever budget, which differs once repeated passes over the data make CE worse), as a fraction
    of CE's tokens (linear in log-tokens between budgets; ``None`` when it never gets there within the budgets)."""
    ce, kd = mean_ppl_points(records, "ce"), mean_ppl_points(records, row)
    if not ce or not kd:
        return None
    ce_tokens, target = ce[-1] if against == "final" else min(ce, key=lambda point: point[1])
    previous = None
    for budget, ppl in kd:
        if ppl <= target:
            if previous is None:
                return {"ce_tokens": ce_tokens, "ce_ppl": target, "kd_tokens": budget, "fraction": budget / ce_tokens,
                        "at_most": True}
            (b0, p0) = previous
            t = (math.log(p0) - math.log(target)) / (math.log(p0) - math.log(ppl))
            tokens = math.exp(math.log(b0) + t * (math.log(budget) - math.log(b0)))
            return {"ce_tokens": ce_tokens, "ce_ppl": target, "kd_tokens": round(tokens), "fraction": tokens / ce_tokens,
                    "at_most": False}
        previous = (budget, ppl)
    return None
