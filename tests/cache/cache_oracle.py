"""Direct teacher computations the cache is checked against (float64, whole vocabulary)."""

from __future__ import annotations

import torch

from destila.cache.kinds.topk import MASS_TOLERANCE

# Relative rounding of the storage dtype (half an ulp, doubled for margin) and
# the float32-vs-float64 error of computing the logits, in nats.
RTOL = {"float32": 1e-5, "float16": 2.0**-10, "bfloat16": 2.0**-7}
ATOL = 2e-5


def direct_topk(model, input_ids: torch.Tensor, k: int, temperature: float = 1.0, position_ids=None):
    """``(topk_ids [B, L, K+1], topk_logprobs [B, L, K+1], tail_logmass [B, L])`` from ``model(ids).logits``.

    One rank more than the cache holds, so that callers can tell near-ties at the K boundary.
    ``position_ids`` restarting per document keep packed documents apart, as in the cache.
    """
    with torch.no_grad():
        # use_cache=False: with a KV cache transformers ignores restarting position ids (no per-document mask).
        logits = model(input_ids, position_ids=position_ids, use_cache=False).logits
        logp = torch.log_softmax(logits.double() / temperature, dim=-1)
    values, ids = logp.topk(min(k + 1, logp.shape[-1]), dim=-1)
    tail = logp.scatter(-1, ids[..., :k], float("-inf")).logsumexp(-1)
    return ids, values, tail, logp


def assert_matches_teacher(item_ids, item_lp, item_tail, model, input_ids, k, temperature, logprob_dtype,
                           trained=None, position_ids=None):
    """The cached top-K equals a direct computation at the trained positions (``trained [B, L]``; default:
    all but the last): ids exactly (except at float ties), log-probs within the storage dtype, tail
    log-mass within float32, total mass 1. Untrained positions hold no entries (-inf, id 0, tail 0)."""
    if trained is None:
        trained = torch.ones(input_ids.shape, dtype=torch.bool)
        trained[:, -1] = False
    assert torch.isneginf(item_lp[~trained]).all() and (item_ids[~trained] == 0).all()
    assert (item_tail[~trained] == 0).all()
    ids, values, tail, logp = direct_topk(model, input_ids, k, temperature, position_ids)
    ids, values, tail, logp = ids[trained], values[trained], tail[trained], logp[trained]
    item_ids, item_lp, item_tail = item_ids[trained], item_lp[trained], item_tail[trained]
    lp = item_lp.double()
    torch.testing.assert_close(lp, values[..., :k], rtol=RTOL[logprob_dtype], atol=ATOL)
    # The stored log-prob of each stored id is that id's log-prob, whatever its rank.
    torch.testing.assert_close(lp, logp.gather(-1, item_ids.long()), rtol=RTOL[logprob_dtype], atol=ATOL)
    # Ids must be identical except where two logits are equal within float32 error.
    inf = torch.full_like(values[..., :1], float("inf"))
    steps = values[..., :-1] - values[..., 1:]
    above, below = torch.cat([inf, steps], -1), torch.cat([steps, inf], -1)
    distinct = (above[..., :k] > 1e-5) & (below[..., :k] > 1e-5)
    assert distinct.float().mean() > 0.9, "too many ties for a meaningful id comparison"
    assert torch.equal(item_ids.long()[distinct], ids[..., :k][distinct])
    finite = torch.isfinite(tail)
    assert torch.equal(finite, torch.isfinite(item_tail))
    torch.testing.assert_close(item_tail.double()[finite], tail[finite], rtol=1e-4, atol=1e-4)
    mass = torch.logsumexp(torch.cat([lp, item_tail.double()[..., None]], dim=-1), dim=-1)
    assert mass.abs().max() < MASS_TOLERANCE[logprob_dtype]
