"""Training at K′ < K from a cache built at K: the first K′ entries and the exact tail of the rest.

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
    kind = cache.manifest.target_kind
    if kind != "topk":
        raise ValueError(f"top_k: the cache {cache.path} holds {kind} targets, which cannot be cut to the K′ most "
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
