"""Triton kernels for the row math of a chunk: two passes over the ``[C, V]`` logits instead of a chain of torch ops.

Between the lm_head GEMMs, each row of the chunk's buffer is read twice:

1. :func:`rest_stats` — one online max / sum-exp pass over the tokens left
   in the buffer (the caller has already pushed the teacher's top-K to
   ``-inf``, so what is left is the rest bucket R), and, for the hard
   cross-entropy at ``T ≠ 1``, the same over ``T·s`` (the row at T = 1);
2. :func:`write_grad` — one pass writing the logit gradient of the rest tokens,
   ``G_j = a_r·exp(s_j − shift_r) + b_r·exp(T·s_j − lse_r) − β_r·[j = label_r]``,
   in place (float32 / float64) or rounded to bfloat16 into the first half
   of each row's own bytes (the fast path's G for the bf16 gradient GEMMs).

Naive equivalent of both passes, per row (``rest`` = tokens not in the top-K)::

    rest_max = s[rest].max();  rest_sum = exp(s[rest] - rest_max).sum()
    lse_t    = logsumexp(T * s[rest])
    G[rest]  = a * exp(s[rest] - shift) + b * exp(T * s[rest] - lse) - beta * (rest == label)

Everything per bucket (``[C, K+1]``: the divergence's terms and weights)
stays in torch, so every divergence of the registry is served by the same
two kernels. The kernels run one program per row and walk the row in blocks
of up to 4096 columns; the buffer may be float32 or float64 (the oracle
tests). The vocabulary size is a compile-time constant (one compile per
vocabulary, which a run never changes): Triton 3.6's interpreter cannot
loop to a runtime bound under NumPy ≥ 2.4. On CPU they run only under Triton's interpreter (``TRITON_INTERPRET=1``),
which the tests use.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch
from torch import Tensor

_MAX_BLOCK = 4096


def triton_missing() -> str | None:
    """Why the Triton kernels cannot run in this environment at all (None when ``triton`` imports)."""
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed (pip install 'destila[triton]')"
    return None


def interpreting() -> bool:
    """Triton's interpreter is on: kernels run on CPU tensors (slowly), as the tests use them."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.cache
def _kernels():
    # Optional dependency, and its import is slow: only when a Triton path is taken.
    import triton
    import triton.language as tl

    @triton.jit
    def rest_stats_kernel(s_ptr, s_stride, t_ptr, max_ptr, sum_ptr, max_t_ptr, sum_t_ptr,
                          NEED_T: tl.constexpr, VOCAB: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        base = s_ptr + row.to(tl.int64) * s_stride
        cols = tl.arange(0, BLOCK)
        first = tl.load(base + cols, mask=cols < VOCAB, other=float("-inf"))
        temperature = tl.load(t_ptr)
        # Running max and Σ exp(s − max) over the blocks seen; a max of -inf (nothing seen yet, or an
        # empty rest bucket) is replaced by 0 as the reference so that no -inf − -inf appears.
        run_max = tl.max(first, axis=0)
        ref = tl.where(run_max == float("-inf"), 0.0, run_max)
        run_sum = tl.sum(tl.exp(first - ref), axis=0)
        if NEED_T:
            first_t = first * temperature
            run_max_t = tl.max(first_t, axis=0)
            ref_t = tl.where(run_max_t == float("-inf"), 0.0, run_max_t)
            run_sum_t = tl.sum(tl.exp(first_t - ref_t), axis=0)
        for start in range(BLOCK, VOCAB, BLOCK):
            idx = start + cols
            s = tl.load(base + idx, mask=idx < VOCAB, other=float("-inf"))
            new_max = tl.maximum(run_max, tl.max(s, axis=0))
            new_ref = tl.where(new_max == float("-inf"), 0.0, new_max)
            run_sum = run_sum * tl.exp(ref - new_ref) + tl.sum(tl.exp(s - new_ref), axis=0)
            run_max, ref = new_max, new_ref
            if NEED_T:
                s_t = s * temperature
                new_max_t = tl.maximum(run_max_t, tl.max(s_t, axis=0))
                new_ref_t = tl.where(new_max_t == float("-inf"), 0.0, new_max_t)
                run_sum_t = run_sum_t * tl.exp(ref_t - new_ref_t) + tl.sum(tl.exp(s_t - new_ref_t), axis=0)
                run_max_t, ref_t = new_max_t, new_ref_t
        # Σ relative to the true max (0 when the rest is empty: every exp was of -inf).
        tl.store(max_ptr + row, run_max)
        tl.store(sum_ptr + row, run_sum * tl.exp(ref - tl.where(run_max == float("-inf"), ref, run_max)))
        if NEED_T:
            tl.store(max_t_ptr + row, run_max_t)
            tl.store(sum_t_ptr + row, run_sum_t * tl.exp(ref_t - tl.where(run_max_t == float("-inf"), ref_t,
                                                                            run_max_t)))

    @triton.jit
    def write_grad_kernel(s_ptr, s_stride, g_ptr, g_stride, shift_ptr, a_ptr, t_ptr, lse_t_ptr, b_ptr,
                          label_ptr, beta_ptr, NEED_T: tl.constexpr, HAS_LABEL: tl.constexpr,
                          ALIASED: tl.constexpr, VOCAB: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        s_base = s_ptr + row.to(tl.int64) * s_stride
        g_base = g_ptr + row.to(tl.int64) * g_stride
        cols = tl.arange(0, BLOCK)
        shift = tl.load(shift_ptr + row)
        a = tl.load(a_ptr + row)
        if NEED_T:
            temperature = tl.load(t_ptr)
            lse_t = tl.load(lse_t_ptr + row)
            b = tl.load(b_ptr + row)
        if HAS_LABEL:
            label = tl.load(label_ptr + row)
            beta = tl.load(beta_ptr + row)
        for start in range(0, VOCAB, BLOCK):
            idx = start + cols
            inside = idx < VOCAB
            s = tl.load(s_base + idx, mask=inside, other=float("-inf"))
            g = a * tl.exp(s - shift)
            if NEED_T:
                g += b * tl.exp(s * temperature - lse_t)
            if HAS_LABEL:
                # The label's -β where it is a rest token (s > -inf); at a teacher token the caller adds it.
                g = tl.where((idx == label) & (s > float("-inf")), g - beta, g)
            if ALIASED:
                # G's bf16 row lies over the first half of the same float32 row: every thread of the program
                # must have read this block before any writes over it (later blocks sit further right).
                tl.debug_barrier()
            tl.store(g_base + idx, g.to(g_ptr.dtype.element_ty), mask=inside)

    return rest_stats_kernel, write_grad_kernel


def _launch_shape(vocab: int) -> tuple[int, int]:
    # optional extra (triton), slow to import: only when a Triton kernel is launched
    import triton

    block = min(_MAX_BLOCK, triton.next_power_of_2(max(vocab, 16)))
    return block, 8 if block >= 2048 else 4


def rest_stats(scores: Tensor, temperature: Tensor, need_t: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """Per row of ``scores [C, V]`` (teacher tokens already ``-inf``): ``rest_max [C]`` (-inf when the rest
    is empty), ``rest_sum [C] = Σ exp(s − rest_max)`` (0 when empty) and, with ``need_t``,
    ``lse_t [C] = logsumexp(T·s)`` over the same tokens. ``temperature``: a 1-element tensor in the
    buffer's dtype (a Python float would reach the kernel as float32)."""
    stats_kernel, _ = _kernels()
    rows, vocab = scores.shape
    rest_max, rest_sum = (torch.empty(rows, dtype=scores.dtype, device=scores.device) for _ in range(2))
    max_t, sum_t = (torch.empty(rows if need_t else 1, dtype=scores.dtype, device=scores.device) for _ in range(2))
    block, warps = _launch_shape(vocab)
    stats_kernel[(rows,)](scores, scores.stride(0), temperature, rest_max, rest_sum, max_t, sum_t,
                          NEED_T=need_t, VOCAB=vocab, BLOCK=block, num_warps=warps)
    lse_t = max_t + sum_t.log() if need_t else None  # -inf + log 0 = -inf for an empty rest
    return rest_max, rest_sum, lse_t


def write_grad(scores: Tensor, out: Tensor, shift: Tensor, a: Tensor, *, temperature: Tensor,
               lse_t: Tensor | None = None, b: Tensor | None = None, labels: Tensor | None = None,
               beta: Tensor | None = None) -> None:
    """``out[r, j] = a_r·exp(s_rj − shift_r) [+ b_r·exp(T·s_rj − lse_t_r)] [− beta_r at j = labels_r]``.

    scores ``[C, V]`` (teacher tokens at ``-inf``, where G's rest part is 0);
    out ``[C, V]``: ``scores`` itself (in place) or the bfloat16 view of the
    first half of each of its rows (:func:`bf16_rows_over`), or a separate
    tensor. The label term applies only where the label is a rest token.
    """
    _, grad_kernel = _kernels()
    rows, vocab = scores.shape
    need_t, has_label = lse_t is not None, labels is not None
    aliased = out.data_ptr() == scores.data_ptr() and out.dtype != scores.dtype
    dummy = shift  # unused pointer arguments still need a tensor
    block, warps = _launch_shape(vocab)
    grad_kernel[(rows,)](scores, scores.stride(0), out, out.stride(0), shift, a, temperature,
                         lse_t if need_t else dummy, b if need_t else dummy, labels if has_label else dummy,
                         beta if has_label else dummy, NEED_T=need_t, HAS_LABEL=has_label, ALIASED=aliased,
                         VOCAB=vocab, BLOCK=block, num_warps=warps)


def bf16_rows_over(scores: Tensor) -> Tensor:
    """A bfloat16 ``[C, V]`` view whose row r is the first half of the bytes of float32 row r of ``scores``.

    The fast path's G is written there by :func:`write_grad` (each row's
    bf16 values overwrite only float32 values of the same row that have been
    read already), so no second ``[C, V]`` buffer exists.
    """
    if scores.dtype != torch.float32 or scores.stride(1) != 1:
        raise ValueError(f"scores: expected a float32 buffer with contiguous rows, found {scores.dtype} "
                         f"with strides {tuple(scores.stride())}")
    return scores.view(torch.bfloat16)[:, : scores.shape[1]]
