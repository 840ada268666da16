"""Divergences between two small distributions over buckets, and their gradient weights.

A row's teacher ``p`` and student ``q`` are compared over buckets ``c``: the
K teacher tokens, plus (``tail="bucket"``) one bucket R for the rest of the
vocabulary. For every divergence this module gives, per bucket,

    d_c   the bucket's term, D = Σ_c d_c
    w_c = q_c · g_c,   g_c = ∂D/∂q_c

from which the caller gets the logit gradient without autograd:

    ∂D/∂z_j = q_j (g_{c(j)} − ḡ) / T,   ḡ = Σ_c q_c g_c = Σ_c w_c

(tail tokens without a bucket have g = 0). ``w`` rather than ``g`` because it
stays finite where ``q_c`` underflows (forward KL: w_c = −p_c, while
g_c = −p_c/q_c). Naive equivalent for forward KL, one row, all buckets present::

    d = p * (log_p - log_q);  w = -p

Conventions: 0·log 0 = 0, so a bucket with p_c = 0 adds nothing to the
forward KL and one with q_c = 0 nothing to the reverse KL. A bucket that is not
``present`` (padding, no rest bucket, masked row) has d = w = 0.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _xlogy_terms(a: Tensor, log_a: Tensor, log_b: Tensor, present: Tensor) -> Tensor:
    """``a · (log a − log b)`` where ``present`` and a > 0, else 0 (never NaN from 0·∞)."""
    use = present & (log_a > float("-inf"))
    return torch.where(use, a * (log_a - torch.where(use, log_b, 0.0)), 0.0)


def bucket_terms(lp: Tensor, lq: Tensor, present: Tensor, divergence: str, beta: float,
                 p: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``(d, w)``, both shaped like ``lp``: per-bucket divergence terms and ``q·∂D/∂q``.

    lp, lq ``[..., B]``: teacher and student log-probabilities of the buckets
    (``-inf`` allowed); present ``[..., B]`` bool; p: ``where(present, exp(lp), 0)``
    if the caller has it already.
    """
    if p is None:
        p = torch.where(present, lp.exp(), 0.0)
    q = torch.where(present, lq.exp(), 0.0)
    if divergence == "forward_kl":
        return _xlogy_terms(p, lp, lq, present), -p
    if divergence == "reverse_kl":
        d = _xlogy_terms(q, lq, lp, present)
        # g = log(q/p) + 1; q·g with the same 0·log 0 = 0 convention as d.
        return d, d + q
    if divergence == "jsd":
        lm = torch.logaddexp(lp + math.log(beta), lq + math.log1p(-beta))
        to_m_q = _xlogy_terms(q, lq, lm, present)
        d = beta * _xlogy_terms(p, lp, lm, present) + (1.0 - beta) * to_m_q
        return d, (1.0 - beta) * to_m_q
    if divergence == "tvd":
        d = 0.5 * (p - q).abs()
        return d, 0.5 * q * torch.sign(q - p)
    raise ValueError(f"divergence: expected forward_kl, reverse_kl, jsd or tvd, found {divergence!r}")


def teacher_topk_logprobs(logprobs: Tensor, valid: Tensor, tail: str) -> Tensor:
    """Teacher log-probs of the K token buckets ``[..., K]`` for a ``tail`` mode.

    bucket / none: as cached (normalised over the full vocabulary);
    renorm: renormalised over the valid top-K entries, ``ℓ_k − logsumexp_k ℓ``.
    """
    if tail != "renorm":
        return logprobs
    norm = torch.logsumexp(logprobs, dim=-1, keepdim=True)
    # A row with no valid entry has norm = -inf: keep its entries at -inf, not NaN.
    return torch.where(valid, logprobs - torch.where(valid, norm, 0.0), float("-inf"))
