"""The full-vocabulary loss: teacher and student logits ``[N, V]`` both at hand (online dense, the paper's baseline).

Same total as :func:`destila.distill_loss`, with every token a bucket instead
of the teacher's top-K and a rest bucket::

    L = (1/n) Σ_{valid rows} [ soft_weight · T² · D(p_T ‖ q_T) + hard_weight · CE(z, label) ]

``n`` = ``num_items`` or the number of valid rows (≥ 1). Memory: a few
``[N, V]`` float32 tensors; the cache's fused path exists to avoid exactly this.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from destila.constants import IGNORE_INDEX
from destila.losses.divergences import full_vocab_divergence


def full_vocab_loss(
    student_logits, teacher_logits, labels, *, divergence="forward_kl", beta=0.5, temperature=1.0,
    soft_weight=1.0, hard_weight=0.0, num_items=None, ignore_index=IGNORE_INDEX,
):
    """``(loss, stats)`` with the normalisation of :func:`destila.distill_loss`.

    ``student_logits``, ``teacher_logits`` ``[N, V]``; ``labels`` ``[N]``.
    ``stats`` holds the detached sums ``soft``, ``hard``, ``rows`` and
    ``agree`` (student argmax = teacher argmax).
    """
    valid = labels != ignore_index
    divergence_rows = full_vocab_divergence(student_logits, teacher_logits, divergence, beta, temperature)
    ce_rows = F.cross_entropy(student_logits.float(), labels.clamp_min(0), reduction="none")
    zero = torch.zeros((), device=student_logits.device)
    soft = torch.where(valid, divergence_rows, zero).sum()
    hard = torch.where(valid, ce_rows, zero).sum()
    n = torch.as_tensor(num_items if num_items is not None else valid.sum(), device=soft.device).clamp_min(1)
    loss = (soft_weight * temperature**2 * soft + hard_weight * hard) / n
    agree = (student_logits.argmax(-1) == teacher_logits.argmax(-1)) & valid
    stats = {"soft": soft.detach(), "hard": hard.detach(), "rows": valid.sum().float(), "agree": agree.sum().float()}
    return loss, stats
