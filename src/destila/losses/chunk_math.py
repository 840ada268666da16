"""The loss of one chunk of rows from its logits, and its logit gradient, in place.

This is the maths of the project, written once: ``chunked`` feeds it slices
of a full logit matrix, ``fused`` feeds it a buffer its lm_head GEMM has just
filled. Both then turn the gradient left in the buffer into parameter
gradients.

Naive equivalent for one row, ``tail="bucket"``, forward KL (``s = z / T``)::

    log_q  = log_softmax(s)                           # [V]
    rest   = ones(V, bool); rest[ids] = False
    lq     = cat([log_q[ids], logsumexp(log_q[rest])])
    lp     = cat([topk_logprobs, tail_logmass])
    D      = (lp.exp() * (lp - lq)).sum()
    loss   = soft_weight * T**2 * D + hard_weight * (logsumexp(z) - z[label])

Here no ``[C, V]`` temporary is made: the buffer is overwritten step by step
(teacher tokens masked out, exponentials, gradient) and every other tensor is
``[C]`` or ``[C, K]`` (the hard cross-entropy at T ≠ 1 adds one pass over
~8 MiB row blocks). Masking the teacher tokens first means the rest
bucket's mass is summed directly over its own tokens instead of as
``1 − Σ q_k``, which cancels catastrophically when the top-K holds most of it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import Tensor

from destila.losses import row_kernels
from destila.losses.divergences import bucket_terms
from destila.losses.inputs import Targets
from destila.losses.options import LossOptions

_NEG_INF = float("-inf")
# Rows per block for the one step that needs a [rows, V] temporary (hard
# cross-entropy at T ≠ 1): about 8 MiB of float32 at a time.
_BLOCK_ELEMENTS = 1 << 21


@contextlib.contextmanager
def small_ops_on_one_thread(device: torch.device):
    """Run the ``[C, K]`` and ``[C]`` ops of a chunk on one CPU thread, then restore the thread count.

    Each of these ops is microseconds of work, yet on several threads each becomes a parallel region that
    waits for its slowest thread: a few dozen per chunk, and on cores shared with another process every wait
    can last a scheduler slice. Measured on 2 cores, fused at 8K rows: 1.064 → 1.028 of the floor's time on
    quiet cores (in one process, alternated 4 times). The ``[C, V]`` passes keep every thread.
    """
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclass
class ChunkSums:
    """Sums over the chunk's kept rows (0-dim tensors): Σ D, Σ CE (0 without labels), Σ agree."""

    soft: Tensor
    hard: Tensor
    agree: Tensor


@dataclass
class TeacherBuckets:
    """The teacher's side of a chunk's buckets (it does not involve the student).

    lp, p, present ``[N, K+1]``: log-prob, probability and existence of the K
    token buckets and the rest bucket (last column); fill ``[N, K]``: -inf
    at real entries, +inf at padding; padding ``[N, K]``: not a real entry;
    top1 ``[N, 1]``: position of the teacher's most likely entry; counted
    ``[N]``: kept rows with a real entry.
    """

    targets: Targets
    lp: Tensor
    p: Tensor
    present: Tensor
    fill: Tensor
    padding: Tensor
    top1: Tensor
    counted: Tensor


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


def teacher_buckets(targets: Targets, options: LossOptions) -> TeacherBuckets:
    """:class:`TeacherBuckets` for the rows of ``targets`` (one chunk: O(C·K) memory)."""
    with small_ops_on_one_thread(targets.logprobs.device):
        return _teacher_buckets(targets, options)


def _teacher_buckets(targets: Targets, options: LossOptions) -> TeacherBuckets:
    valid = targets.valid
    lp = torch.cat([teacher_topk_logprobs(targets.logprobs, valid, options.tail), targets.tail_logmass[:, None]], 1)
    present = torch.cat([valid, targets.has_rest[:, None]], 1)
    p = torch.where(present, lp.exp(), 0.0)
    fill = torch.where(valid, _NEG_INF, float("inf")).to(lp.dtype)
    top1 = targets.logprobs.argmax(dim=1, keepdim=True)
    return TeacherBuckets(targets, lp, p, present, fill, ~valid, top1, targets.keep & valid.any(dim=1))


def chunk_loss_(scores: Tensor, teacher: TeacherBuckets, options: LossOptions, coef: Tensor, *,
                want_grad: bool, want_hard: bool, kernels: str = "torch", grad_out: Tensor | None = None,
                row_scale: Tensor | None = None) -> ChunkSums:
    """Loss sums of ``C`` rows; with ``want_grad``, the rows' logit gradient is written to ``grad_out``.

    scores ``[C, V]`` float32/float64, contiguous: on entry ``s = z / T`` (the
    student logits over the temperature); on return garbage, or, with
    ``want_grad`` and no ``grad_out``, ``G = ∂(Σ_r coef_r · loss_r)/∂z`` with
    ``loss_r = soft_weight·T²·D_r + hard_weight·CE_r``. teacher: the chunk's
    rows of :func:`teacher_buckets`. coef ``[C]``: each row's weight in the
    total, 0 for dropped rows (the caller passes ``keep / n``). want_hard:
    compute the cross-entropy sum (needs labels), for the loss or for the
    statistics. kernels: ``"torch"`` (eager ops, in place) or ``"triton"``
    (:mod:`destila.losses.row_kernels`: two passes over the buffer). grad_out:
    where G goes instead of ``scores`` (Triton only): the bfloat16 view over
    the buffer's own rows that the fast path's GEMMs read. row_scale ``[C]``
    (eager ops only): where G's per-row factor may go instead of into the
    buffer, saving the caller a pass over it: on return the buffer holds
    ``G / row_scale[:, None]`` and ``row_scale`` the factor (all ones where
    the buffer holds G itself), so that ``dh = row_scale ⊙ (buffer W)`` and
    ``dW += bufferᵀ (row_scale ⊙ h)``.
    """
    if kernels == "triton":
        return _chunk_loss_triton_(scores, teacher, options, coef, want_grad=want_grad, want_hard=want_hard,
                                   grad_out=scores if grad_out is None else grad_out)
    if grad_out is not None:
        raise ValueError("grad_out: the eager row math writes G in place; pass grad_out only with kernels='triton'")
    temperature = options.temperature
    targets = teacher.targets
    ids = targets.ids
    hard = want_hard and targets.labels is not None
    device = scores.device
    with small_ops_on_one_thread(device):
        s_topk, s_label = _gather_and_mask_(scores, teacher, hard)
    rest_max, shift, rest_sum = _exp_rest_(scores)
    with small_ops_on_one_thread(device):
        rows = _bucket_rows(s_topk, rest_max, shift, rest_sum, teacher, options, coef, want_grad)

    if not hard and not want_grad:
        return ChunkSums(rows.soft, scores.new_zeros(()), rows.agree)
    tail_coef, topk_grad, beta_hard, q_unit = rows.tail_coef, rows.topk_grad, rows.beta_hard, rows.q_unit
    keep = targets.keep
    scale = None  # G's factor on the rest bucket (G = scale · e there), when it is one per row
    if not hard:
        hard_sum = scores.new_zeros(())
        scale = tail_coef
    elif temperature == 1.0:
        # s = z: the cross-entropy's softmax is q itself, no extra pass.
        hard_sum = ((rows.lse - s_label) * keep).sum()
        if want_grad:
            scale = tail_coef + beta_hard * q_unit
            topk_grad = topk_grad + beta_hard[:, None] * rows.lq[:, :-1].exp()
    else:
        lse_z = _cross_entropy_at_t1_(scores, s_topk, shift, tail_coef, beta_hard, temperature, want_grad)
        hard_sum = ((lse_z - temperature * s_label) * keep).sum()
        if want_grad:
            topk_grad = topk_grad + beta_hard[:, None] * torch.exp(temperature * s_topk - lse_z[:, None])
    if not want_grad:
        return ChunkSums(rows.soft, hard_sum, rows.agree)
    with small_ops_on_one_thread(device):
        label_term = -beta_hard[:, None] if hard and options.hard_weight > 0 else None
        topk_grad = topk_grad.masked_fill_(teacher.padding, 0.0)
        if scale is not None and row_scale is not None and _divides_safely(scale, topk_grad, label_term):
            # The sparse part divided by the row's factor, which the caller applies to h and dh instead.
            topk_grad, label_term = topk_grad / scale[:, None], None if label_term is None else label_term / scale[:, None]
            row_scale.copy_(scale)
            scale = None
        elif row_scale is not None:
            row_scale.fill_(1.0)
    if scale is not None:
        scores.mul_(scale[:, None])
    with small_ops_on_one_thread(device):
        scores.scatter_add_(1, ids, topk_grad)
        if label_term is not None:
            scores.scatter_add_(1, targets.labels[:, None], label_term)
    return ChunkSums(rows.soft, hard_sum, rows.agree)


# A row's sparse gradient may be divided by its rest factor only while the quotient stays far from overflow.
_SAFE_QUOTIENT = 1e30


def _divides_safely(scale: Tensor, topk_grad: Tensor, label_term: Tensor | None) -> bool:
    """Whether every row's sparse part divided by ``scale`` stays finite and far below overflow: false for a
    chunk with a zero factor (a masked row, an empty rest) or one tiny beside its sparse part; that chunk
    gets its factor multiplied into the buffer instead."""
    largest = topk_grad.abs().amax(dim=1)
    if label_term is not None:
        largest = torch.maximum(largest, label_term.abs().squeeze(1))
    return bool((largest < _SAFE_QUOTIENT * scale.abs()).all())


@dataclass
class _BucketRows:
    """What the per-bucket maths gives the row passes: sums, the student's bucket log-probs ``lq [C, K+1]``,
    ``lse [C]`` (logsumexp of s), and G's coefficients: on R ``G_j = tail_coef·exp(s_j − shift)``, at the
    teacher tokens ``topk_grad [C, K]``; ``q_unit = exp(shift − lse)``, ``beta_hard = coef·hard_weight``."""

    soft: Tensor
    agree: Tensor
    lse: Tensor
    lq: Tensor
    q_unit: Tensor
    tail_coef: Tensor
    topk_grad: Tensor
    beta_hard: Tensor


def _gather_and_mask_(scores: Tensor, teacher: TeacherBuckets, hard: bool) -> tuple[Tensor, Tensor | None]:
    """``s_topk [C, K]`` (padding at -inf) and the label's ``s [C]``; then the teacher's tokens pushed to -inf,
    so that what is left of each row is exactly the rest bucket. "amin" with +inf for padded entries leaves a
    real token alone even when a padded entry shares its (sanitised) id."""
    targets = teacher.targets
    s_topk = scores.gather(1, targets.ids).masked_fill_(teacher.padding, _NEG_INF)
    s_label = scores.gather(1, targets.labels[:, None]).squeeze(1) if hard else None
    scores.scatter_reduce_(1, targets.ids, teacher.fill, reduce="amin")
    return s_topk, s_label


def _exp_rest_(scores: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``rest_max, shift, rest_sum [C]`` of the rest bucket, the buffer turned into ``e_j = exp(s_j − shift)``
    (0 on the masked teacher tokens). Naive equivalent::

        rest_max = scores.amax(1); shift = rest_max.clamp(min=finfo.min)
        scores.sub_(shift[:, None]).exp_(); rest_sum = scores.sum(1)

    done as three whole-chunk passes: the row maxima, the softmax in place (one fused pass that keeps each
    row in a core's cache for its max, exponentials and sum), and the softmax's row maxima, ``exp(0) / Σ``,
    which give the sum; so that ``shift`` is the rest bucket's logsumexp and ``rest_sum`` is 1. Three
    parallel regions per chunk, not four per small block: on a machine whose cores are shared, every parallel
    region waits for its slowest thread, and the hundreds per chunk that small blocks make turned the row
    math into several times the GEMMs' time. (``torch.max`` with indices would save the last pass but is
    several times slower than ``amax``.) A row whose rest is empty (the top-K covers the vocabulary) gets
    ``rest_max = -inf``, ``rest_sum = 0`` and zeros."""
    rest_max = torch.amax(scores, dim=1)  # -inf when the top-K covers the vocabulary
    torch._softmax(scores, 1, False, out=scores)  # in place: each row is read into cache before it is written
    shift = rest_max - torch.amax(scores, dim=1).log()  # max + log Σ exp(s − max): the rest's logsumexp
    rest_sum = torch.ones_like(rest_max)
    empty = rest_max == _NEG_INF
    if bool(empty.any()):  # the softmax of a row of -inf is NaN; that row's rest has no mass at all
        scores[empty] = 0.0
        shift = torch.where(empty, torch.finfo(scores.dtype).min, shift)
        rest_sum = torch.where(empty, 0.0, rest_sum)
    return rest_max, shift, rest_sum


def _bucket_rows(s_topk: Tensor, rest_max: Tensor, shift: Tensor, rest_sum: Tensor, teacher: TeacherBuckets,
                 options: LossOptions, coef: Tensor, want_grad: bool) -> _BucketRows:
    """The ``[C, K+1]`` bucket maths of a chunk from the row passes' results (the same for both kernels)."""
    lse_rest = shift + rest_sum.log()
    lse = torch.logaddexp(lse_rest, torch.logsumexp(s_topk, dim=1))
    lq = torch.cat([s_topk, lse_rest[:, None]], 1).sub_(lse[:, None])  # student bucket log-probs [C, K+1]
    terms, weights = bucket_terms(teacher.lp, lq, teacher.present, options.divergence, options.beta, p=teacher.p)
    soft = (terms.sum(dim=1) * teacher.targets.keep).sum()

    # Student top-1 equals the teacher's top-1 iff that token's logit is the row maximum.
    row_max = torch.maximum(rest_max, s_topk.amax(dim=1))
    agree = (teacher.counted & (s_topk.gather(1, teacher.top1).squeeze(1) >= row_max)).sum().to(s_topk.dtype)

    # G_j = tail_coef · e_j on R, topk_grad at the teacher tokens.
    q_unit = torch.exp(shift - lse)  # q_j = e_j · q_unit on R
    tail_coef = torch.zeros_like(lse)
    topk_grad = torch.zeros_like(s_topk)
    if want_grad and options.soft_weight > 0:
        alpha = coef * (options.soft_weight * options.temperature)  # soft_weight · T² · (1/T) from s = z/T
        gbar = weights.sum(dim=1)
        w_rest = weights[:, -1] / rest_sum.clamp(min=1.0)  # q_j g_R = e_j · w_R / Σ e; Σ e ≥ 1 unless R is empty
        tail_coef = alpha * (w_rest - q_unit * gbar)
        topk_grad = alpha[:, None] * (weights[:, :-1] - lq[:, :-1].exp() * gbar[:, None])
    return _BucketRows(soft, agree, lse, lq, q_unit, tail_coef, topk_grad, coef * options.hard_weight)


def _chunk_loss_triton_(scores: Tensor, teacher: TeacherBuckets, options: LossOptions, coef: Tensor, *,
                        want_grad: bool, want_hard: bool, grad_out: Tensor) -> ChunkSums:
    """:func:`chunk_loss_` with the two row passes as Triton kernels; ``scores`` keeps ``s`` (teacher tokens at
    -inf) and G goes to ``grad_out``. Same maths, same bucket code."""
    temperature = options.temperature
    targets = teacher.targets
    hard = want_hard and targets.labels is not None
    need_t = hard and temperature != 1.0
    t_value = torch.full((1,), temperature, dtype=scores.dtype, device=scores.device)
    s_topk, s_label = _gather_and_mask_(scores, teacher, hard)
    rest_max, rest_sum, lse_t_rest = row_kernels.rest_stats(scores, t_value, need_t)
    shift = rest_max.clamp(min=torch.finfo(scores.dtype).min)
    rows = _bucket_rows(s_topk, rest_max, shift, rest_sum, teacher, options, coef, want_grad)
    if not hard and not want_grad:
        return ChunkSums(rows.soft, scores.new_zeros(()), rows.agree)
    keep = targets.keep
    a, topk_grad, lse_z = rows.tail_coef, rows.topk_grad, None
    if not hard:
        hard_sum = scores.new_zeros(())
    elif temperature == 1.0:
        hard_sum = ((rows.lse - s_label) * keep).sum()
        a = a + rows.beta_hard * rows.q_unit
        topk_grad = topk_grad + rows.beta_hard[:, None] * rows.lq[:, :-1].exp()
    else:
        lse_z = torch.logaddexp(lse_t_rest, torch.logsumexp(temperature * s_topk, dim=1))
        hard_sum = ((lse_z - temperature * s_label) * keep).sum()
        topk_grad = topk_grad + rows.beta_hard[:, None] * torch.exp(temperature * s_topk - lse_z[:, None])
    if want_grad:
        label_term = hard and options.hard_weight > 0
        if label_term:  # the label's -β at a teacher token; the kernel adds it at a rest token
            topk_grad = topk_grad - rows.beta_hard[:, None] * (targets.ids == targets.labels[:, None])
        row_kernels.write_grad(scores, grad_out, shift, a, temperature=t_value, lse_t=lse_z,
                               b=rows.beta_hard if lse_z is not None else None,
                               labels=targets.labels if label_term else None,
                               beta=rows.beta_hard if label_term else None)
        grad_out.scatter_add_(1, targets.ids, topk_grad.masked_fill_(teacher.padding, 0.0).to(grad_out.dtype))
    return ChunkSums(rows.soft, hard_sum, rows.agree)


def total_loss(sums: ChunkSums, n: Tensor, options: LossOptions) -> Tensor:
    """``(soft_weight·T²·Σ D + hard_weight·Σ CE) / n``; a zero weight drops its term (even an infinite one)."""
    loss = torch.zeros((), dtype=n.dtype, device=n.device)
    if options.soft_weight > 0:
        loss = loss + (options.soft_weight * options.temperature ** 2) * sums.soft
    if options.hard_weight > 0:
        loss = loss + options.hard_weight * sums.hard
    return loss / n


def _cross_entropy_at_t1_(scores: Tensor, s_topk: Tensor, shift: Tensor, tail_coef: Tensor, beta_hard: Tensor,
                          temperature: float, want_grad: bool) -> Tensor:
    """``logsumexp(z)`` per row when the buffer holds ``e = exp(z/T − shift)`` on R (0 on the top-K).

    ``exp(z_j − T·shift) = e_j^T``, so the rest of the row's mass at T = 1 is
    ``Σ e^T``. With ``want_grad`` the buffer becomes ``tail_coef·e +
    beta_hard·softmax(z)`` on R. Works on row blocks to bound the temporary.
    """
    rows, vocab = scores.shape
    lse_z = torch.empty_like(shift)
    head = torch.logsumexp(temperature * s_topk, dim=1)
    block = max(1, _BLOCK_ELEMENTS // max(vocab, 1))
    for start in range(0, rows, block):
        stop = min(start + block, rows)
        part = scores[start:stop]
        powered = part.pow(temperature)
        lse_z[start:stop] = torch.logaddexp(temperature * shift[start:stop] + powered.sum(dim=1).log(),
                                            head[start:stop])
        if want_grad:
            scale = beta_hard[start:stop] * torch.exp(temperature * shift[start:stop] - lse_z[start:stop])
            part.mul_(tail_coef[start:stop, None]).add_(powered.mul_(scale[:, None]))
    return lse_z
