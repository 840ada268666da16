"""``impl="chunked"``: the paper's forward-chunked loss, full logits once, loss over row chunks.

Naive equivalent::

    logits = F.linear(hidden, weight, bias)        # [N, V], kept for backward
    loss = sum(chunk_loss(logits[i:i + C]) for i in range(0, N, C)) / n

The student logits ``[N, V]`` are computed by an ordinary autograd
``F.linear`` in the inputs' dtype, as a model's lm_head would, and their
gradient ``[N, V]`` is stored during the forward; only the loss's own
float32 work is chunked. Memory: two ``N × V`` tensors plus one ``C × V``
float32 buffer. The maths is :func:`chunk_loss_`, the one the fused path uses.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from destila.losses.chunk_math import ChunkSums, chunk_loss_, teacher_buckets, total_loss
from destila.losses.inputs import Batch, promoted_dtype
from destila.losses.options import LossOptions
from destila.losses.plan import Plan


def _chunked_from_logits(logits: Tensor, batch: Batch, options: LossOptions, *, want_grad: bool,
                         want_hard: bool, plan: Plan) -> tuple[ChunkSums, Tensor | None]:
    """Loss sums over ``logits [N, V]`` and, with ``want_grad``, their gradient ``[N, V]`` (logits' dtype)."""
    rows, vocab = logits.shape
    cdt = batch.compute_dtype
    chunk = plan.chunk
    coef = batch.keep.to(cdt) / batch.n
    buffer = torch.empty(chunk, vocab, dtype=cdt, device=logits.device)
    grad = torch.empty_like(logits) if want_grad else None
    soft, hard, agree = (torch.zeros((), dtype=cdt, device=logits.device) for _ in range(3))
    for start in range(0, rows, chunk):
        stop = min(start + chunk, rows)
        scores = buffer[: stop - start]
        scores.copy_(logits[start:stop])  # upcast before dividing: never scale in bf16
        if options.temperature != 1.0:
            scores.mul_(1.0 / options.temperature)
        teacher = teacher_buckets(batch.targets(start, stop), options)
        sums = chunk_loss_(scores, teacher, options, coef[start:stop], want_grad=want_grad, want_hard=want_hard,
                           kernels=plan.kernels)
        soft, hard, agree = soft + sums.soft, hard + sums.hard, agree + sums.agree
        if want_grad:
            grad[start:stop].copy_(scores)
    return ChunkSums(soft, hard, agree), grad


class ChunkedDistillFunction(torch.autograd.Function):
    """``(loss, soft, hard, agree) = f(logits)``; the logit gradient is computed in the forward."""

    @staticmethod
    def forward(ctx, logits, batch: Batch, options: LossOptions, want_hard: bool, plan: Plan):
        sums, grad = _chunked_from_logits(logits, batch, options, want_grad=ctx.needs_input_grad[0],
                                          want_hard=want_hard, plan=plan)
        ctx.save_for_backward(grad)  # freed by autograd right after backward
        ctx.mark_non_differentiable(sums.soft, sums.hard, sums.agree)
        return total_loss(sums, batch.n, options), sums.soft, sums.hard, sums.agree

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss, *_unused_stat_grads):
        (grad,) = ctx.saved_tensors
        if not bool(grad_loss == 1):
            grad = grad * grad_loss.to(grad.dtype)
        return grad, None, None, None, None


def chunked_loss(batch: Batch, options: LossOptions, want_hard: bool, plan: Plan) -> tuple[Tensor, ChunkSums]:
    """The forward-chunked loss and its sums."""
    dtype = promoted_dtype(batch.hidden, batch.weight, batch.bias)
    bias = None if batch.bias is None else batch.bias.to(dtype)
    logits = F.linear(batch.hidden.to(dtype), batch.weight.to(dtype), bias)
    if torch.is_grad_enabled() and logits.requires_grad:
        loss, soft, hard, agree = ChunkedDistillFunction.apply(logits, batch, options, want_hard, plan)
        return loss, ChunkSums(soft, hard, agree)
    sums, _ = _chunked_from_logits(logits, batch, options, want_grad=False, want_hard=want_hard, plan=plan)
    return total_loss(sums, batch.n, options), sums
