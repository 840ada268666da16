"""Choosing K′ after the teacher pass: what training at K′ ≤ K (``--top_k``) keeps of a K cache.

For each K′ in :data:`K_CHOICES` (those ≤ K, and K itself), over the trained
positions of the cache:

- the covered mass ``Σ_{k<K′} p_k``: its mean and its 5th percentile (the
  positions where the teacher is least sure);
- the bucket KL of truncating to K′: the forward KL, over the cache's K+1
  buckets, from the teacher to the target training at K′ describes, which
  keeps the top-K′ and knows only the total mass ``p_R′`` of the rest; its
  least-informed reading spreads that mass evenly over the ``V − K′`` other
  tokens. 0 at K′ = K; what the K′ loss cannot tell the student.

Naive equivalent (one position, ``p`` its K probabilities, ``p_R`` its tail)::

    rest = p_R + p[k:].sum(); u = rest / (V - k)
    kl = sum(p[j] * log(p[j] / u) for j in range(k, K)) + p_R * log(p_R / (u * (V - K)))
"""

from __future__ import annotations

import math

import numpy as np
import torch

from destila.losses.divergences import kl_terms

K_CHOICES = (1, 2, 5, 10, 20, 50, 100)
DEFAULT_COVERAGE = 0.95


class KCoverage:
    """Accumulates the covered mass and truncation KL per K′ over batches of positions."""

    def __init__(self, top_k: int, vocab_size: int):
        self.top_k, self.vocab_size = top_k, vocab_size
        self.choices = sorted({k for k in K_CHOICES if k < top_k} | {top_k})
        self.masses: dict[int, list[np.ndarray]] = {k: [] for k in self.choices}
        self.kls: dict[int, list[np.ndarray]] = {k: [] for k in self.choices}

    def add(self, logprobs: torch.Tensor, tail: torch.Tensor) -> None:
        """``logprobs [P, K]`` sorted descending, ``tail [P]``: the trained positions of some sequences."""
        if logprobs.shape[0] == 0:  # sequences with no trained position (e.g. prompts only) add nothing
            return
        lp, tail = logprobs.double(), tail.double()
        p, p_tail = lp.exp(), tail.exp()
        cumulative = p.cumsum(-1)
        outside = math.log(self.vocab_size - self.top_k) if self.vocab_size > self.top_k else 0.0
        for k in self.choices:
            self.masses[k].append(cumulative[:, k - 1].numpy())
            rest = torch.logsumexp(torch.cat([tail[:, None], lp[:, k:]], dim=-1), dim=-1)
            if self.vocab_size > k:
                uniform = rest - math.log(self.vocab_size - k)  # log-probability of each of the V − K′ others
            else:
                uniform = torch.full_like(rest, -math.inf)
            kl = kl_terms(p[:, k:], lp[:, k:], uniform[:, None]).sum(-1) + kl_terms(p_tail, tail, uniform + outside)
            self.kls[k].append(kl.clamp_min(0).numpy())

    def rows(self) -> list[dict]:
        """``[{"k", "mass_mean", "mass_p5", "bucket_kl_mean"}]``, one per K′; ``[]`` before any position."""
        if not self.masses[self.top_k]:
            return []
        out = []
        for k in self.choices:
            mass, kl = np.concatenate(self.masses[k]), np.concatenate(self.kls[k])
            out.append({"k": k, "mass_mean": float(mass.mean()), "mass_p5": float(np.percentile(mass, 5)),
                        "bucket_kl_mean": float(kl.mean())})
        return out


def suggest_k(rows: list[dict], coverage: float = DEFAULT_COVERAGE) -> str:
    """One line naming the smallest K′ of ``rows`` whose mean covered mass reaches ``coverage``."""
    if not rows:
        return ""
    for row in rows:
        if row["mass_mean"] >= coverage:
            return (f"suggested K′    {row['k']}: the smallest K′ covering a mean {coverage:.0%} of the teacher's mass "
                    f"({row['mass_mean']:.3f}); train with --top_k {row['k']}")
    last = rows[-1]
    return (f"suggested K′    none covers a mean {coverage:.0%}: the cache's K = {last['k']} covers "
            f"{last['mass_mean']:.3f}; train at K = {last['k']}, or rebuild with a larger --top-k")


def format_table(rows: list[dict]) -> list[str]:
    """The K-coverage table's lines, as ``destila cache inspect`` prints them."""
    if not rows:
        return []
    lines = ["K′ coverage    K′      mean Σp   p5 Σp    bucket KL of truncating"]
    lines += [f"               {r['k']:<7} {r['mass_mean']:.4f}    {r['mass_p5']:.4f}   {r['bucket_kl_mean']:.4g}"
              for r in rows]
    return lines
