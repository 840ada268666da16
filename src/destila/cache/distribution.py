"""The teacher's distribution statistics over trained positions, from any reader of a cache's targets.

Given chunks of ``(log-probs [P, K], tail log-mass [P])`` of trained positions
(padding of sampled targets ``-inf``), per position (token):

- ``topk_mass_mean``: mean of ``Σ_k p_k``, the share of the teacher's
  probability the top-K keeps (1 − tail mass);
- ``tail_logmass_percentiles``: percentiles of ``log(1 − Σ_k p_k)``;
- ``entropy_topk_mean``: mean of ``−Σ_k p_k log p_k``, the part of the
  teacher's entropy the top-K carries (a lower bound on the full entropy);
- ``entropy_bucket_mean``: the same plus the tail bucket ``−p_R log p_R``,
  the entropy of the K+1-bucket distribution the default loss compares;
- for ranked (top-K) targets, ``k_coverage`` per K′ ≤ K and ``k_suggestion``.

Naive equivalent: ``p = lp.exp(); p.sum(-1).mean(), np.percentile(tail, ...)``
over the positions of every chunk concatenated.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from destila.cache.k_prime import KCoverage, suggest_k
from destila.cache.kinds import kind_of
from destila.constants import IGNORE_INDEX
from destila.losses.divergences import entropy_terms

PERCENTILES = (1, 5, 25, 50, 75, 95, 99)


def trained_targets(items) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log-probs [P, K], tail log-mass [P])`` of the trained positions of dense ``items`` (cache items:
    ``labels``, ``topk_logprobs``, ``tail_logmass``); padding of sampled targets becomes ``-inf`` (p = 0)."""
    trained = torch.cat([item["labels"] != IGNORE_INDEX for item in items])
    lp = torch.cat([item["topk_logprobs"] for item in items]).float()[trained]
    tail = torch.cat([item["tail_logmass"] for item in items])[trained]
    return lp.masked_fill(~torch.isfinite(lp), -torch.inf), tail


def distribution_stats(chunks: Iterable[tuple[int, torch.Tensor, torch.Tensor]], manifest,
                       coverage: float | None) -> dict | None:
    """The statistics (module docstring) of ``chunks`` of ``(sequences, log-probs, tail)``; None when they hold no
    trained position."""
    tails, masses, entropy_topk, entropy_bucket, taken = [], [], [], [], 0
    k_table = KCoverage(manifest.top_k, manifest.vocab_size) if kind_of(manifest.target_kind).ranked else None
    for rows, lp, tail in chunks:
        p = lp.exp()
        h_topk = entropy_terms(p, lp).sum(-1)
        h_tail = entropy_terms(tail.exp(), tail)  # 0 · log 0 = 0 when the tail is empty (K = V)
        masses.append(p.sum(-1).double().numpy())
        tails.append(tail.numpy())
        if k_table is not None:
            k_table.add(lp, tail)
        entropy_topk.append(h_topk.double().numpy())
        entropy_bucket.append((h_topk + h_tail).double().numpy())
        taken += rows
    if not (taken and sum(len(m) for m in masses)):  # sequences with no trained position have no statistics
        return None
    tail_all = np.concatenate(tails)
    finite = tail_all[np.isfinite(tail_all)]
    stats = {
        "sequences": taken,
        "positions": int(len(tail_all)),
        "topk_mass_mean": float(np.concatenate(masses).mean()),
        "tail_logmass_percentiles": (
            {f"p{q}": float(v) for q, v in zip(PERCENTILES, np.percentile(finite, PERCENTILES))}
            if len(finite) else None
        ),
        "tail_logmass_neg_inf": int(len(tail_all) - len(finite)),
        "entropy_topk_mean": float(np.concatenate(entropy_topk).mean()),
        "entropy_bucket_mean": float(np.concatenate(entropy_bucket).mean()),
    }
    if k_table is not None:
        stats["k_coverage"] = k_table.rows()
        stats["k_suggestion"] = suggest_k(k_table.rows(), coverage)
    return stats
