"""Several teachers at once: the top-K of the exact weighted mixture of their full distributions.

With teachers ``i`` (weights ``w_i``, summing to 1) the target is the mixture
``m = Σ_i w_i · softmax(z_i / T)`` over the **whole** vocabulary, so a token
that only one teacher ranks high keeps exactly the mass that teacher gives it.
The cache stores ``m``'s top-K log-probs and ``log Σ_{j ∉ top-K} m_j``, the
exact tail mass of the mixture, in the same fields as for one teacher: every
reader, loss and check works unchanged.

Naive equivalent (builds ``[N, V]`` grids for every teacher at once)::

    log_m = torch.logsumexp(torch.stack([log(w_i) + log_softmax(h_i @ W_i.T + b_i) / T ...]), 0)
    topk_logprobs, topk_ids = log_m.topk(k, -1)
    tail_logmass = log_m.scatter(-1, topk_ids, -inf).logsumexp(-1)

Here rows go ``head_chunk_rows`` at a time through two float32 ``[C, V]`` buffers
(the running mixture and one teacher's log-probs), whatever the number of
teachers. Teachers must share the tokenizer: token j must mean the same
string to all of them, or the mixture mixes unrelated tokens.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from destila.targets.spec import DEFAULT_HEAD_CHUNK_ROWS


def normalised_weights(weights: Sequence[float], teachers: int) -> list[float]:
    """``weights`` divided by their sum; refuses a count that does not match or a non-positive weight."""
    weights = [float(w) for w in weights]
    if len(weights) != teachers:
        raise ValueError(
            f"teacher_weights: expected one weight per teacher ({teachers}), found {len(weights)} "
            f"({', '.join(map(str, weights)) or 'none'})"
        )
    if not all(math.isfinite(w) and w > 0 for w in weights):
        raise ValueError(f"teacher_weights: expected positive numbers, found {', '.join(map(str, weights))}")
    total = sum(weights)
    return [w / total for w in weights]


def check_shared_tokenizer(fingerprints: Sequence[str], vocab_sizes: Sequence[int], names: Sequence[str]) -> None:
    """Refuse teachers whose tokenizers or output vocabularies differ (a ``ValueError`` naming the first)."""
    for name, fingerprint, vocab in zip(names[1:], fingerprints[1:], vocab_sizes[1:]):
        if fingerprint != fingerprints[0]:
            raise ValueError(
                f"teachers: {name} has a different tokenizer from {names[0]} (fingerprints {fingerprint} and "
                f"{fingerprints[0]}); a mixture needs every teacher to share one tokenizer, so that token ids "
                "mean the same strings. Use teachers of one model family with one vocabulary"
            )
        if vocab != vocab_sizes[0]:
            raise ValueError(
                f"teachers: {name}'s output head has {vocab} rows but {names[0]}'s has {vocab_sizes[0]}; "
                "a mixture needs heads of one vocabulary size"
            )


def mixture_topk(
    hiddens: Sequence[torch.Tensor],
    heads: Sequence[tuple[torch.Tensor, torch.Tensor | None]],
    weights: Sequence[float],
    k: int,
    temperature: float = 1.0,
    head_chunk_rows: int = DEFAULT_HEAD_CHUNK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-K of the weighted mixture of the teachers' distributions and its exact tail log-mass.

    Shapes: ``hiddens[i] [N, H_i]`` (the teachers' final hidden states for the
    same ``N`` positions; widths may differ), ``heads[i] = (weight [V, H_i],
    bias [V] or None)``, ``weights`` one positive number per teacher
    (normalised here). Returns ``topk_ids [N, K]`` int64, ``topk_logprobs
    [N, K]`` float32 sorted descending, normalised over the full vocabulary,
    and ``tail_logmass [N]`` float32 (``-inf`` when ``K = V``); the same
    contract as :func:`destila.targets.head.teacher_topk`, which this equals for
    one teacher.
    """
    if len(hiddens) != len(heads) or not hiddens:
        raise ValueError(f"mixture_topk: expected one head per hidden-state tensor, found {len(hiddens)} and {len(heads)}")
    weights = normalised_weights(weights, len(hiddens))
    rows, vocab = hiddens[0].shape[0], heads[0][0].shape[0]
    for i, (hidden, (weight, _)) in enumerate(zip(hiddens, heads)):
        if hidden.dim() != 2 or hidden.shape[0] != rows or weight.shape != (vocab, hidden.shape[1]):
            raise ValueError(
                f"mixture_topk: teacher {i}: expected hidden [{rows}, H] and weight [{vocab}, H], "
                f"found {tuple(hidden.shape)} and {tuple(weight.shape)}"
            )
    if not 1 <= k <= vocab:
        raise ValueError(f"mixture_topk: k must be in [1, vocab size {vocab}], found {k}")
    if not temperature > 0 or head_chunk_rows < 1:
        raise ValueError(f"mixture_topk: expected temperature > 0 and head_chunk_rows ≥ 1, found {temperature}, "
                         f"{head_chunk_rows}")
    device = hiddens[0].device
    log_weights = [math.log(w) for w in weights]
    topk_ids = torch.empty(rows, k, dtype=torch.int64, device=device)
    topk_logprobs = torch.empty(rows, k, dtype=torch.float32, device=device)
    tail_logmass = torch.empty(rows, dtype=torch.float32, device=device)
    with torch.no_grad():
        for start in range(0, rows, head_chunk_rows):
            stop = min(start + head_chunk_rows, rows)
            mixed = None
            for hidden, (weight, bias), log_w in zip(hiddens, heads, log_weights):
                logits = hidden[start:stop].float() @ weight.float().T
                if bias is not None:
                    logits += bias.float()
                if temperature != 1.0:
                    logits /= temperature
                # log(w_i p_i) in place: logits − logsumexp + log w_i.
                logits -= torch.logsumexp(logits, dim=1, keepdim=True) - log_w
                mixed = logits if mixed is None else torch.logaddexp(mixed, logits, out=mixed)
            values, ids = torch.topk(mixed, k, dim=1, sorted=True)
            if k < vocab:
                # The tail is summed over the tokens outside the top-K, never taken as 1 − Σ top-K.
                tail = mixed.scatter_(1, ids, float("-inf")).logsumexp(dim=1)
            else:
                tail = torch.full((stop - start,), float("-inf"), device=device)
            # The mixture is normalised up to rounding; dividing by its float32 total makes it exact.
            total = torch.logaddexp(torch.logsumexp(values, dim=1), tail)
            topk_ids[start:stop] = ids
            topk_logprobs[start:stop] = values - total[:, None]
            tail_logmass[start:stop] = tail - total
    return topk_ids, topk_logprobs, tail_logmass
