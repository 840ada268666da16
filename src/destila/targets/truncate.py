"""Training at K′ < K from a cache built at K: the first K′ entries and the exact tail of the rest;
and nucleus (top-p) truncation of the same entries.

Cached log-probs are sorted descending and normalised over the full
vocabulary, so the top-K′ of a position is its first K′ entries, and the
mass outside them is the cache's tail plus the dropped entries::

    p_R′ = p_R + Σ_{k ≥ K′} p_k,   log p_R′ = logsumexp(ℓ_R, ℓ_K′, …, ℓ_{K-1})

computed as a logsumexp (never ``log(1 − Σ p_k)``, which loses every digit
when the top-K′ holds nearly all the mass). With float32 log-probs in the
cache this equals a cache built at K′ to float32 rounding; with the default
float16 the dropped entries carry their storage rounding into the tail.
So one teacher pass at a generous K lets every later run choose its K′.

Naive equivalent (one position)::

    p = exp(topk_logprobs); tail = log(exp(tail_logmass) + p[k:].sum())
    return topk_ids[:k], topk_logprobs[:k], tail

Top-p keeps, per position, the fewest leading entries whose mass reaches p
(all K when the top-K holds less than p: the top-K is then the binding cut,
as in "top-p then top-K" truncation), and moves the mass of the others into
the rest bucket the same way. The dropped entries stay in place as padding
(log-prob ``-inf``, which every loss and metric reads as "no entry"), so the
batch keeps its shape. Since the cached entries are the teacher's most likely
tokens in order, this equals a top-p cut of the teacher's full distribution
whenever the nucleus fits in K. Naive equivalent (one position)::

    p = exp(topk_logprobs); n = min(K, 1 + (cumsum(p) < top_p).sum())
    return topk_ids, [*topk_logprobs[:n], -inf, ...], log(exp(tail_logmass) + p[n:].sum())
"""

from __future__ import annotations

import torch


def truncate_topk(topk_ids: torch.Tensor, topk_logprobs: torch.Tensor, tail_logmass: torch.Tensor | None,
                  k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(ids [..., k], logprobs [..., k], tail [...] float32)`` from ``[..., K]`` entries sorted descending.

    ``tail_logmass`` ``[...]`` is the log-mass outside the K entries (None
    means an empty rest, ``-inf``). Untrained positions (all entries
    ``-inf``, tail 0) stay untrained.
    """
    width = topk_ids.shape[-1]
    if not 1 <= k <= width:
        raise ValueError(f"top_k: expected 1 ≤ K′ ≤ K = {width} (the entries stored per position), found {k}")
    if tail_logmass is None:
        tail_logmass = torch.full(topk_ids.shape[:-1], float("-inf"), device=topk_logprobs.device)
    if k == width:
        return topk_ids, topk_logprobs, tail_logmass
    rest = torch.cat([tail_logmass.float().unsqueeze(-1), topk_logprobs[..., k:].float()], dim=-1)
    return topk_ids[..., :k], topk_logprobs[..., :k], torch.logsumexp(rest, dim=-1)


def check_top_k(top_k: int | None, cache) -> None:
    """Refuse a ``top_k`` a cache cannot serve: larger than its K, or on sampled targets (no order to cut)."""
    if top_k is None:
        return
    if not cache.kind.ranked:
        raise ValueError(f"top_k: the cache {cache.path} holds {cache.kind.name} targets, which cannot be cut to the K′ most "
                         "likely tokens; drop --top_k (it applies to top-K caches)")
    if top_k > cache.top_k:
        raise ValueError(f"top_k: the cache {cache.path} holds K = {cache.top_k} tokens per position, so K′ = "
                         f"{top_k} cannot be read from it; pass --top_k ≤ {cache.top_k}, or rebuild the cache "
                         f"with `destila cache build ... --top-k {top_k}`")


def with_top_k(batch: dict, top_k: int | None) -> dict:
    """``batch`` with its ``topk_*`` fields and tail cut to ``top_k`` entries (unchanged when None or K)."""
    if top_k is None or "topk_ids" not in batch or batch["topk_ids"].shape[-1] == top_k:
        return batch
    ids, logprobs, tail = truncate_topk(batch["topk_ids"], batch["topk_logprobs"], batch.get("tail_logmass"), top_k)
    return {**batch, "topk_ids": ids, "topk_logprobs": logprobs, "tail_logmass": tail}


def truncate_top_p(topk_ids: torch.Tensor, topk_logprobs: torch.Tensor, tail_logmass: torch.Tensor | None,
                   top_p: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(ids, logprobs, tail)`` of ``[..., K]`` entries sorted descending, cut to each position's nucleus.

    Entries past the nucleus get log-prob ``-inf`` (padding) and their mass
    joins ``tail`` (float32, a logsumexp as in :func:`truncate_topk`).
    Untrained positions (all entries ``-inf``) stay untrained.
    """
    check_top_p(top_p)
    if tail_logmass is None:
        tail_logmass = torch.full(topk_ids.shape[:-1], float("-inf"), device=topk_logprobs.device)
    logprobs = topk_logprobs.float()
    # Mass of the entries before each one (float64: a nucleus edge must not move by rounding the sum).
    before = torch.cumsum(logprobs.double().exp(), dim=-1) - logprobs.double().exp()
    keep = before < top_p
    keep[..., 0] = True  # at least the most likely token
    dropped = logprobs.masked_fill(keep, float("-inf"))
    tail = torch.logsumexp(torch.cat([tail_logmass.float().unsqueeze(-1), dropped], dim=-1), dim=-1)
    untrained = torch.isneginf(logprobs).all(dim=-1)
    tail = torch.where(untrained, tail_logmass.float(), tail)
    return topk_ids, topk_logprobs.masked_fill(~keep, float("-inf")), tail


def check_top_p(top_p: float | None, cache=None) -> None:
    """Refuse a ``top_p`` outside (0, 1], or one asked of a cache whose entries have no order (sampled)."""
    if top_p is None:
        return
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(f"top_p: expected a probability in (0, 1], found {top_p!r}; e.g. --top_p 0.95")
    if cache is not None and not cache.kind.ranked:
        raise ValueError(f"top_p: the cache {cache.path} holds {cache.kind.name} targets, which have no order to cut "
                         "a nucleus from; drop --top_p (it applies to top-K caches)")


def with_top_p(batch: dict, top_p: float | None) -> dict:
    """``batch`` with its ``topk_*`` fields and tail cut to each position's nucleus (unchanged when None or 1)."""
    if top_p is None or top_p >= 1 or "topk_ids" not in batch:
        return batch
    ids, logprobs, tail = truncate_top_p(batch["topk_ids"], batch["topk_logprobs"], batch.get("tail_logmass"), top_p)
    return {**batch, "topk_ids": ids, "topk_logprobs": logprobs, "tail_logmass": tail}
