"""Distillation losses against a cached teacher top-K: dense reference, forward-chunked, fused.

``distill_loss(..., impl="fused")`` is the point of the project: the student's
lm_head runs inside the loss, chunk by chunk, so ``[N, V]`` logits never
exist. See :func:`distill_loss` for shapes and maths, :class:`LossOptions`
for the options.
"""

from destila.losses.api import DistillLoss, distill_loss, distill_loss_with
from destila.losses.options import DIVERGENCES, IGNORE_INDEX, IMPLS, KERNELS, PRECISIONS, TAILS, LossOptions
from destila.losses.plan import describe_path

__all__ = ["distill_loss", "distill_loss_with", "DistillLoss", "LossOptions", "describe_path", "DIVERGENCES", "TAILS", "IMPLS",
           "PRECISIONS", "KERNELS", "IGNORE_INDEX"]
