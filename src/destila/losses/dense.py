"""``impl="dense"``: the reference. Full ``[N, V]`` grids, plain tensor maths, autograd for gradients.

This is the paper's correctness baseline: the student's log-probabilities over
the whole vocabulary, and a dense teacher grid rebuilt from the top-K (zero
outside it), compared token by token. With ``tail="bucket"`` the teacher's
rest mass is compared with the student's mass on the same tokens as one more
term. It shares only the divergence's per-bucket terms with
:mod:`destila.losses.chunk_math` (:mod:`destila.losses.divergences`), not their
gradient weights: autograd differentiates the terms here, so the two check
each other. Memory: several ``N × V`` tensors.

Naive equivalent, forward KL, one row::

    log_q = log_softmax(z / T)
    D = Σ_{k} p_k (ℓ_k − log_q[i_k])  +  p_R (ℓ_R − log Σ_{j ∉ top-K} q_j)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from destila.losses.chunk_math import ChunkSums, total_loss
from destila.losses.divergences import get_divergence
from destila.losses.inputs import Batch, promoted_dtype
from destila.losses.options import LossOptions


def dense_loss(batch: Batch, options: LossOptions, want_hard: bool, plan=None) -> tuple[Tensor, ChunkSums]:
    """The loss over full ``[N, V]`` grids and its sums (same contract as the other impls)."""
    t, cdt = batch.targets(), batch.compute_dtype
    dtype = promoted_dtype(batch.hidden, batch.weight, batch.bias)
    bias = None if batch.bias is None else batch.bias.to(dtype)
    logits = F.linear(batch.hidden.to(dtype), batch.weight.to(dtype), bias).to(cdt)  # [N, V]
    hard = torch.zeros((), dtype=cdt, device=logits.device)
    if want_hard and t.labels is not None:
        hard = torch.where(t.keep, F.cross_entropy(logits, t.labels, reduction="none"), 0.0).sum()
    teacher_top1 = t.ids.gather(1, t.logprobs.argmax(dim=1, keepdim=True)).squeeze(1)
    agree = (t.keep & t.valid.any(dim=1) & (logits.argmax(dim=1) == teacher_top1)).sum().to(cdt)
    log_q = torch.log_softmax(logits if options.temperature == 1.0 else logits / options.temperature, dim=1)
    del logits  # log_softmax keeps its output, not its input: one grid less from here on

    # Dense teacher grid. Sanitised ids of padded entries are 0 and their
    # values 0, so scatter_add leaves a real entry at id 0 intact.
    topk_lp = t.logprobs
    if options.tail == "renorm":
        topk_lp = topk_lp - torch.logsumexp(topk_lp, dim=1, keepdim=True).nan_to_num(neginf=0.0)
    member = torch.zeros(log_q.shape, dtype=torch.uint8, device=log_q.device)
    member = member.scatter_add_(1, t.ids, t.valid.to(torch.uint8)).bool()
    p = torch.zeros_like(log_q).scatter_add_(1, t.ids, torch.where(t.valid, topk_lp.exp(), 0.0))
    divergence = get_divergence(options.divergence)
    if divergence.dense_row_sums is not None:  # no log-p grid: one [N, V] tensor less
        per_row = divergence.dense_row_sums(p, log_q)
    else:
        log_p = torch.zeros_like(log_q).scatter_add_(1, t.ids, torch.where(t.valid, topk_lp, 0.0))
        per_row = divergence.terms(p, log_p, log_q.exp(), log_q, member, options.beta).sum(dim=1)
        del log_p
    del p

    if options.tail == "bucket":
        rest = t.has_rest
        # The student's mass outside the teacher's top-K, summed directly; rows
        # without a rest bucket take 1 (log 0 would put NaN into the gradient).
        rest_q = log_q.exp().masked_fill(member, 0.0).sum(dim=1)
        rest_log_q = torch.log(torch.where(rest, rest_q, 1.0))
        rest_log_p = torch.where(rest, t.tail_logmass, 0.0)
        rest_p = torch.where(rest, rest_log_p.exp(), 0.0)
        per_row = per_row + divergence.terms(rest_p, rest_log_p, rest_log_q.exp(), rest_log_q, rest, options.beta)

    soft = torch.where(t.keep, per_row, 0.0).sum()
    sums = ChunkSums(soft, hard, agree)
    return total_loss(sums, batch.n, options), ChunkSums(soft.detach(), hard.detach(), agree)
