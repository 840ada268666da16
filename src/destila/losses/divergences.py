"""The divergence registry: every divergence destila can train with or report, one entry each.

A row's teacher ``p`` and student ``q`` are compared over buckets ``c``: the
K teacher tokens, plus (``tail="bucket"``) one bucket R for the rest of the
vocabulary; or, for the full-vocabulary form (online dense training, eval
against a loaded teacher), every token is a bucket. An entry gives, per bucket,

    d_c   the bucket's term, D = Σ_c d_c                  (:attr:`Divergence.terms`)
    w_c = q_c · g_c,   g_c = ∂D/∂q_c                       (:attr:`Divergence.weights`)

from which the fused and chunked losses get the logit gradient without autograd:

    ∂D/∂z_j = q_j (g_{c(j)} − ḡ) / T,   ḡ = Σ_c q_c g_c = Σ_c w_c

(tail tokens without a bucket have g = 0). ``w`` rather than ``g`` because it
stays finite where ``q_c`` underflows (forward KL: w_c = −p_c, while
g_c = −p_c/q_c). The dense reference differentiates ``d`` with autograd
instead, so a wrong ``w`` shows up as a dense/fused mismatch in the tests.

Both functions take ``(p, lp, q, lq, present, beta)``, tensors shaped
``[..., B]``: probabilities, log-probabilities (``-inf`` allowed) and a bool
``present`` (padding, no rest bucket, masked rows: False); they must return
0 where a bucket is not present and never NaN there, since autograd also
walks the unused branch of a ``torch.where``. Conventions: 0·log 0 = 0, so a
bucket with p_c = 0 adds nothing to the forward KL and one with q_c = 0
nothing to the reverse KL.

Adding a divergence is one :func:`register` call (plus a test)::

    register(Divergence("hellinger", "Σ (√p − √q)²", "hellinger",
                        terms=lambda p, lp, q, lq, present, beta: torch.where(present, (p.sqrt() - q.sqrt()) ** 2, 0.0),
                        weights=lambda p, lp, q, lq, present, beta: torch.where(present, q - (p * q).sqrt(), 0.0)))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

Terms = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, float], Tensor]


@dataclass(frozen=True)
class Divergence:
    """One divergence: its name (the ``divergence`` option's value), its formula (for help texts),
    the name its value is logged under, and its per-bucket terms and gradient weights."""

    name: str
    formula: str
    metric: str
    terms: Terms
    weights: Terms
    uses_beta: bool = False
    # Optional: Σ_j d_j per row of a dense ``[N, V]`` teacher grid ``p`` (0 off the teacher's tokens) and
    # the student's ``log q``, without the log-p grid ``terms`` needs (the dense reference's memory).
    dense_row_sums: Callable[[Tensor, Tensor], Tensor] | None = None


REGISTRY: dict[str, Divergence] = {}


def register(divergence: Divergence) -> Divergence:
    """Add ``divergence`` (or replace the entry of that name); returns it."""
    REGISTRY[divergence.name] = divergence
    return divergence


def divergence_names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def get_divergence(name: str, option: str = "divergence") -> Divergence:
    """The entry called ``name``, or a ``ValueError`` naming every registered one."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"{option}: expected one of {', '.join(map(repr, REGISTRY))}, found {name!r}; "
            "pick one of those (see help(destila.losses.LossOptions))"
        ) from None


def divergence_help() -> str:
    """Every entry's name and formula, for the ``divergence`` option's help."""
    return "; ".join(f"{d.name} {d.formula}" for d in REGISTRY.values())


def kl_terms(p: Tensor, log_p: Tensor, log_q: Tensor | float) -> Tensor:
    """``p · (log p − log q)`` elementwise, 0 where ``p = 0`` (0 · log 0 = 0); summed over a row, KL(p‖q).

    For code outside the losses that measures a divergence of its own
    distributions (a truncated cache against its full top-K, a cut model
    against its teacher). Naive equivalent: ``torch.where(p > 0, p * (log_p - log_q), 0)``.
    """
    return torch.where(p > 0, p * (log_p - log_q), 0.0)


def entropy_terms(p: Tensor, log_p: Tensor) -> Tensor:
    """``−p · log p`` elementwise, 0 where ``p = 0``; summed over a row, the entropy of ``p``."""
    return -kl_terms(p, log_p, 0.0)


def _xlogy_terms(a: Tensor, log_a: Tensor, log_b: Tensor, present: Tensor) -> Tensor:
    """``a · (log a − log b)`` where ``present`` and a > 0, else 0 (never NaN from 0·∞)."""
    use = present & (log_a > float("-inf"))
    return torch.where(use, a * (log_a - torch.where(use, log_b, 0.0)), 0.0)


def _log_mixture(lp: Tensor, lq: Tensor, beta: float) -> Tensor:
    """``log m``, ``m = βp + (1−β)q``."""
    return torch.logaddexp(lp + math.log(beta), lq + math.log1p(-beta))


register(Divergence(
    "forward_kl", "Σ p log(p/q)", "kl",
    terms=lambda p, lp, q, lq, present, beta: _xlogy_terms(p, lp, lq, present),
    weights=lambda p, lp, q, lq, present, beta: torch.where(present, -p, 0.0),
    # Σ p log p − Σ p log q: the textbook KL against the dense grid, two reductions.
    dense_row_sums=lambda p, log_q: torch.xlogy(p, p).sum(dim=1) - (p * log_q).sum(dim=1),
))
register(Divergence(
    "reverse_kl", "Σ q log(q/p)", "reverse_kl",
    terms=lambda p, lp, q, lq, present, beta: _xlogy_terms(q, lq, lp, present),
    # g = log(q/p) + 1; q·g with the same 0·log 0 = 0 convention as d.
    weights=lambda p, lp, q, lq, present, beta: _xlogy_terms(q, lq, lp, present) + torch.where(present, q, 0.0),
))
register(Divergence(
    "jsd", "β·KL(p‖m)+(1−β)·KL(q‖m) with m = βp+(1−β)q", "jsd", uses_beta=True,
    terms=lambda p, lp, q, lq, present, beta: (
        beta * _xlogy_terms(p, lp, _log_mixture(lp, lq, beta), present)
        + (1.0 - beta) * _xlogy_terms(q, lq, _log_mixture(lp, lq, beta), present)),
    weights=lambda p, lp, q, lq, present, beta: (1.0 - beta) * _xlogy_terms(q, lq, _log_mixture(lp, lq, beta), present),
))
register(Divergence(
    "tvd", "½ Σ |p−q|", "tvd",
    terms=lambda p, lp, q, lq, present, beta: torch.where(present, 0.5 * (p - q).abs(), 0.0),
    weights=lambda p, lp, q, lq, present, beta: torch.where(present, 0.5 * q * torch.sign(q - p), 0.0),
))


def bucket_terms(lp: Tensor, lq: Tensor, present: Tensor, divergence: str, beta: float,
                 p: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``(d, w)``, both shaped like ``lp``: per-bucket divergence terms and ``q·∂D/∂q``.

    lp, lq ``[..., B]``: teacher and student log-probabilities of the buckets
    (``-inf`` allowed); present ``[..., B]`` bool; p: ``where(present, exp(lp), 0)``
    if the caller has it already.

    Naive equivalent for forward KL, one row, all buckets present::

        d = p * (log_p - log_q);  w = -p
    """
    entry = get_divergence(divergence)
    if p is None:
        p = torch.where(present, lp.exp(), 0.0)
    q = torch.where(present, lq.exp(), 0.0)
    return entry.terms(p, lp, q, lq, present, beta), entry.weights(p, lp, q, lq, present, beta)


def full_vocab_divergence(student_logits: Tensor, teacher_logits: Tensor, divergence: str, beta: float = 0.5,
                          temperature: float = 1.0) -> Tensor:
    """Per-row divergence ``D(p‖q)`` over the whole vocabulary, ``[N, V] × [N, V] -> [N]``.

    ``p = softmax(teacher_logits / T)``, ``q = softmax(student_logits / T)``,
    both in float32: the registry's terms with every token a bucket.
    Memory: a few ``[N, V]`` float32 tensors.
    """
    entry = get_divergence(divergence)
    log_q = torch.log_softmax(student_logits.float() / temperature, dim=-1)
    log_p = torch.log_softmax(teacher_logits.float() / temperature, dim=-1)
    present = torch.ones_like(log_p, dtype=torch.bool)
    return entry.terms(log_p.exp(), log_p, log_q.exp(), log_q, present, beta).sum(-1)
