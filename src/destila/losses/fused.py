"""``impl="fused"``: the lm_head inside the loss, one ``[chunk, V]`` buffer, gradients in the forward.

Naive equivalent (what it computes, not how)::

    logits = hidden @ weight.T + bias              # [N, V]  -- never materialised
    loss = dense_loss(logits, targets)             # see destila.losses.dense
    loss.backward()                                # dh, dW, db

Per chunk of C rows: ``s = (h_c Wᵀ + b) / T`` into the float32 buffer (one
GEMM; ``1/T`` rides on the GEMM's alpha), then :func:`chunk_loss_` turns the
buffer into the logit gradient ``G`` in place, then ``dh_c = G W`` and
``dW += Gᵀ h_c`` (two GEMMs), ``db += Σ_rows G``. Peak memory is
``C·V`` floats plus O(N·(H+K)) inputs and gradients, whatever N.

Gradients are computed in the forward pass when autograd will need them: that
costs exactly the three GEMMs of a plain lm_head forward+backward (the floor),
where recomputing the logits in ``backward`` would cost a fourth GEMM (+33%),
for O(N·H + V·H) of stored gradient instead of O(N·H) of saved input. The
backward then only scales the stored gradients by the incoming scalar. Under
``torch.no_grad()`` (evaluation) no gradient work is done at all.

Two precisions (:mod:`destila.losses.plan` picks one per call):

- exact: inputs in bfloat16/float16 are multiplied in float32 (exact
  products, float32 sums) through a float32 copy of the head; gradients
  come back in each input's dtype. On CUDA those float32 GEMMs run with TF32
  enabled: a bf16/fp16 value is exactly representable in TF32, so the
  logits are what a float32 GEMM would give; the two gradient GEMMs round G
  to TF32 (10 mantissa bits).
- fast (bf16 inputs; on CUDA by default): the GEMMs of a plain bf16 lm_head,
  see :func:`_fused_fast`.

The row math between the GEMMs is :func:`chunk_loss_`, as eager torch ops or
as the two Triton kernels of :mod:`destila.losses.row_kernels`.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

from destila.losses.chunk_math import ChunkSums, chunk_loss_, teacher_buckets, total_loss
from destila.losses.inputs import Batch
from destila.losses.options import LossOptions
from destila.losses.plan import Plan
from destila.losses.row_kernels import bf16_rows_over


@contextlib.contextmanager
def _lossless_tf32(device: torch.device, *dtypes: torch.dtype):
    """Allow TF32 GEMMs while only half-precision inputs are multiplied (exact in TF32), then restore."""
    if device.type != "cuda" or not all(d in (torch.bfloat16, torch.float16) for d in dtypes):
        yield
        return
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_tf32
    matmul.allow_tf32 = True
    try:
        yield
    finally:
        matmul.allow_tf32 = before


def fused_forward(batch: Batch, options: LossOptions, *, need_dh: bool, need_dw: bool, need_db: bool,
                  want_hard: bool, plan: Plan) -> tuple[ChunkSums, Tensor | None, Tensor | None, Tensor | None]:
    """Loss sums over all rows and, as asked, ``dh [N, H]``, ``dW [V, H]``, ``db [V]`` of ``Σ_r coef_r·loss_r``.

    Gradients are those of the normalised loss (rows weighted by ``keep / n``),
    in the dtypes of hidden, weight and bias. ``plan``: precision, row kernels
    and chunk rows (:func:`destila.losses.plan.plan_for`).
    """
    if plan.precision == "fast":
        return _fused_fast(batch, options, need_dh=need_dh, need_dw=need_dw, need_db=need_db, want_hard=want_hard,
                           plan=plan)
    hidden, weight, bias = batch.hidden, batch.weight, batch.bias
    cdt, device = batch.compute_dtype, hidden.device
    rows, size = hidden.shape
    vocab = weight.shape[0]
    chunk = plan.chunk
    inv_t = 1.0 / options.temperature
    want_grad = need_dh or need_dw or need_db
    coef = batch.keep.to(cdt) / batch.n

    w = weight.to(cdt)  # a no-op for float32; once per call for bf16 (V·H·4 bytes)
    b = None if bias is None else bias.to(cdt)
    buffer = torch.empty(chunk, vocab, dtype=cdt, device=device)
    dh = torch.empty(rows, size, dtype=hidden.dtype, device=device) if need_dh else None
    dh_cast = torch.empty(chunk, size, dtype=cdt, device=device) if need_dh and hidden.dtype != cdt else None
    dw = torch.zeros(vocab, size, dtype=cdt, device=device) if need_dw else None
    db = torch.zeros(vocab, dtype=cdt, device=device) if need_db else None
    soft, hard, agree = (torch.zeros((), dtype=cdt, device=device) for _ in range(3))
    # The eager row math leaves G's per-row factor here instead of in the buffer (one pass over it less).
    row_scale = torch.empty(chunk, dtype=cdt, device=device) if want_grad and plan.kernels == "torch" else None

    with _lossless_tf32(device, hidden.dtype, weight.dtype):
        for start in range(0, rows, chunk):
            stop = min(start + chunk, rows)
            scores = buffer[: stop - start]
            h = hidden[start:stop].to(cdt)
            if b is not None:
                torch.addmm(b, h, w.t(), beta=inv_t, alpha=inv_t, out=scores)
            elif inv_t != 1.0:
                torch.addmm(scores, h, w.t(), beta=0.0, alpha=inv_t, out=scores)  # beta=0: old content ignored
            else:
                torch.mm(h, w.t(), out=scores)
            teacher = teacher_buckets(batch.targets(start, stop), options)
            scale = None if row_scale is None else row_scale[: stop - start]
            sums = chunk_loss_(scores, teacher, options, coef[start:stop], want_grad=want_grad, want_hard=want_hard,
                               kernels=plan.kernels, row_scale=scale)
            soft, hard, agree = soft + sums.soft, hard + sums.hard, agree + sums.agree
            if need_dh:  # G = scale ⊙ buffer: dh = scale ⊙ (buffer W)
                out = dh[start:stop] if dh_cast is None else dh_cast[: stop - start]
                torch.mm(scores, w, out=out)
                if scale is not None:
                    out.mul_(scale[:, None])
                if dh_cast is not None:
                    dh[start:stop].copy_(out)
            if need_dw:  # dW += bufferᵀ (scale ⊙ h)
                dw.addmm_(scores.t(), h if scale is None else h * scale[:, None])
            if need_db:
                db.add_(scores.sum(dim=0) if scale is None else torch.mv(scores.t(), scale))
    # Freed before the casts below, which make the output copies: the buffer (and its view), the float32 head.
    buffer = scores = dh_cast = w = b = h = None  # noqa: F841
    if dw is not None and dw.dtype != weight.dtype:
        dw = dw.to(weight.dtype)
    if db is not None and db.dtype != bias.dtype:
        db = db.to(bias.dtype)
    return ChunkSums(soft, hard, agree), dh, dw, db


def _fused_fast(batch: Batch, options: LossOptions, *, need_dh: bool, need_dw: bool, need_db: bool, want_hard: bool,
                plan: Plan) -> tuple[ChunkSums, Tensor | None, Tensor | None, Tensor | None]:
    """:func:`fused_forward` with the GEMMs of a plain bf16 lm_head (bf16 inputs; float32 ones rounded to bf16
    first, as autocast rounds them; gradients come back in each input's dtype).

    Per chunk: ``s = h Wᵀ / T`` by a bf16 GEMM that writes float32 (the logits
    are never rounded to bf16, and no float32 copy of W exists); the row math;
    G rounded once to bf16 (by the Triton kernel into the first half of each
    float32 row's bytes, or by a cast after the eager ops); ``dh = G W`` in
    bf16 and ``dW += Gᵀ h`` into a float32 accumulator, both bf16 GEMMs with
    float32 accumulation. The buffer is freed before dW is cast to bf16.

    Emulated on CPU (``plan.emulated``): the same roundings, with float32
    GEMMs of the upcast values (the products of bf16 values are exact in
    float32), so the tests check these numerics without a GPU.
    """
    hidden, weight, bias = batch.hidden, batch.weight, batch.bias
    device, f32 = hidden.device, torch.float32
    rows, size = hidden.shape
    vocab = weight.shape[0]
    chunk, emulated, triton_rows = plan.chunk, plan.emulated, plan.kernels == "triton"
    inv_t = 1.0 / options.temperature
    want_grad = need_dh or need_dw or need_db
    coef = batch.keep.to(f32) / batch.n

    bf16 = torch.bfloat16
    w16 = weight.to(bf16)  # a no-op for a bf16 head; for float32 master weights the copy autocast would make
    w32 = w16.to(f32) if emulated else None  # CPU has no bf16 → float32 GEMM: upcast, exact products
    b32 = None if bias is None else bias.to(bf16).to(f32)
    buffer = torch.empty(chunk, vocab, dtype=f32, device=device)
    dh = torch.empty(rows, size, dtype=hidden.dtype, device=device) if need_dh else None
    dw = torch.zeros(vocab, size, dtype=f32, device=device) if need_dw else None
    db = torch.zeros(vocab, dtype=f32, device=device) if need_db else None
    soft, hard, agree = (torch.zeros((), dtype=f32, device=device) for _ in range(3))

    g = None
    for start in range(0, rows, chunk):
        stop = min(start + chunk, rows)
        scores = buffer[: stop - start]
        h = hidden[start:stop].to(bf16)
        if emulated:
            torch.mm(h.to(f32), w32.t(), out=scores)
        elif b32 is None and inv_t != 1.0:
            torch.addmm(scores, h, w16.t(), beta=0.0, alpha=inv_t, out_dtype=f32, out=scores)
        else:
            torch.mm(h, w16.t(), out_dtype=f32, out=scores)
        if b32 is not None:
            scores.add_(b32)
        if (emulated or b32 is not None) and inv_t != 1.0:
            scores.mul_(inv_t)
        teacher = teacher_buckets(batch.targets(start, stop), options)
        g16 = bf16_rows_over(scores) if want_grad and triton_rows else None
        sums = chunk_loss_(scores, teacher, options, coef[start:stop], want_grad=want_grad, want_hard=want_hard,
                           kernels=plan.kernels, grad_out=g16)
        soft, hard, agree = soft + sums.soft, hard + sums.hard, agree + sums.agree
        if not want_grad:
            continue
        if g16 is None:
            g16 = scores.to(torch.bfloat16)  # eager row math: G is float32 in place; one rounding
        if emulated:
            g = g16.to(f32)
            if need_dh:
                dh[start:stop].copy_(g @ w32)
            if need_dw:
                dw.addmm_(g.t(), h.to(f32))
        else:
            if need_dh:
                if dh.dtype == bf16:
                    torch.mm(g16, w16, out=dh[start:stop])
                else:
                    torch.mm(g16, w16, out_dtype=f32, out=dh[start:stop])
            if need_dw:
                torch.addmm(dw, g16.t(), h, out_dtype=f32, out=dw)
        if need_db:
            db.add_(g16.sum(dim=0, dtype=f32))
    # Freed before the casts below, which make the output copies: the buffer (and every view of it), the
    # chunk's bf16 hidden and G, the head's bf16 and float32 copies.
    buffer = scores = g16 = g = h = w16 = w32 = b32 = None  # noqa: F841
    if dw is not None:
        dw = dw.to(weight.dtype)  # a no-op for float32 master weights
    if db is not None:
        db = db.to(bias.dtype)
    return ChunkSums(soft, hard, agree), dh, dw, db


class FusedDistillFunction(torch.autograd.Function):
    """``(loss, soft, hard, agree) = f(hidden, weight, bias)``; only ``loss`` is differentiable."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, batch: Batch, options: LossOptions, want_hard: bool, plan: Plan):
        need_dh, need_dw, need_db = ctx.needs_input_grad[:3]
        sums, dh, dw, db = fused_forward(batch, options, need_dh=need_dh, need_dw=need_dw,
                                         need_db=need_db and bias is not None, want_hard=want_hard, plan=plan)
        # Saved (not kept as ctx attributes) so that autograd frees them right
        # after backward, and a leaf's .grad can take them over without a copy.
        ctx.present = tuple(g is not None for g in (dh, dw, db))
        ctx.save_for_backward(*(g for g in (dh, dw, db) if g is not None))
        ctx.mark_non_differentiable(sums.soft, sums.hard, sums.agree)
        return total_loss(sums, batch.n, options), sums.soft, sums.hard, sums.agree

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss, *_unused_stat_grads):
        saved = iter(ctx.saved_tensors)
        grads = [next(saved) if here else None for here in ctx.present]
        # The stored gradients are for d(loss) = 1; scale only when the caller
        # scaled the loss (gradient accumulation, loss scaling).
        if not bool(grad_loss == 1):
            grads = [None if g is None else g * grad_loss.to(g.dtype) for g in grads]
        return (*grads, None, None, None, None)


def fused_loss(batch: Batch, options: LossOptions, want_hard: bool, plan: Plan) -> tuple[Tensor, ChunkSums]:
    """The fused loss and its sums; builds an autograd node only when a gradient can be asked for."""
    params = (batch.hidden, batch.weight, batch.bias)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in params):
        loss, soft, hard, agree = FusedDistillFunction.apply(*params, batch, options, want_hard, plan)
        return loss, ChunkSums(soft, hard, agree)
    sums, *_ = fused_forward(batch, options, need_dh=False, need_dw=False, need_db=False, want_hard=want_hard,
                             plan=plan)
    return total_loss(sums, batch.n, options), sums
