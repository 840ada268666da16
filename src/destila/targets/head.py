"""The teacher's output head, chunk by chunk: top-K log-probs and the exact tail mass.

This is the one place where the teacher's ``[rows, vocab]`` logits exist, and
only ``head_chunk_rows`` rows at a time. The cache writer calls it on the hidden
states of each micro-batch; online distillation calls it on the fly.
"""

from __future__ import annotations

import torch

from destila.targets.spec import DEFAULT_HEAD_CHUNK_ROWS


def teacher_topk(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    k: int,
    temperature: float = 1.0,
    head_chunk_rows: int = DEFAULT_HEAD_CHUNK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-K of ``softmax((hidden @ weight.T + bias) / temperature)`` and the log-mass left out.

    Shapes: ``hidden [N, H]`` (any float dtype), ``weight [V, H]``,
    ``bias [V]`` or None. Returns ``topk_ids [N, K]`` int64,
    ``topk_logprobs [N, K]`` float32 sorted descending and normalised over
    the full vocabulary, and ``tail_logmass [N]`` float32 =
    ``log Σ_{j ∉ top-K} p_j`` (``-inf`` when ``K = V``).

    Naive equivalent (builds the ``[N, V]`` grid this function avoids)::

        logp = torch.log_softmax((hidden.float() @ weight.float().T + bias) / temperature, -1)
        topk_logprobs, topk_ids = logp.topk(k, -1)
        tail_logmass = logp.scatter(1, topk_ids, -inf).logsumexp(-1)

    Per chunk of ``head_chunk_rows`` rows one float32 ``[C, V]`` buffer holds the
    logits; the top-K entries are then overwritten with ``-inf`` in place and
    the buffer's logsumexp (computed in place, shifted by the largest tail
    logit) is the tail's. The full logsumexp is
    ``logaddexp(logsumexp(top-K), logsumexp(tail))``: exact, and one pass over
    the buffer cheaper than a separate ``logsumexp(logits)``. The tail is never ``log(1 − Σ p_k)``: when
    the top-K holds all but 1e-9 of the mass, that difference rounds to 0 in
    float32 and its log to ``-inf``.
    """
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(
            f"teacher_topk: expected hidden [N, H] and weight [V, H], found {tuple(hidden.shape)} and {tuple(weight.shape)}"
        )
    rows, vocab = hidden.shape[0], weight.shape[0]
    if not 1 <= k <= vocab:
        raise ValueError(f"teacher_topk: k must be in [1, vocab size {vocab}], found {k}")
    if temperature <= 0:
        raise ValueError(f"teacher_topk: temperature must be > 0, found {temperature}")
    if head_chunk_rows < 1:
        raise ValueError(f"teacher_topk: head_chunk_rows must be ≥ 1, found {head_chunk_rows}")
    device = hidden.device
    # Logits are accumulated in float32 even for bf16 teachers: rounding them
    # to bf16 before the softmax would move every stored log-prob.
    w32 = weight if weight.dtype == torch.float32 else weight.float()
    b32 = None if bias is None else bias.float()
    # Dividing h and b by T costs O(C·H + V) per chunk; dividing the logits would cost O(C·V).
    if b32 is not None and temperature != 1.0:
        b32 = b32 / temperature
    topk_ids = torch.empty(rows, k, dtype=torch.int64, device=device)
    topk_logprobs = torch.empty(rows, k, dtype=torch.float32, device=device)
    tail_logmass = torch.empty(rows, dtype=torch.float32, device=device)
    # One buffer for all chunks; the last, shorter chunk uses its first rows
    # (a row slice of a contiguous tensor is contiguous, as mm(out=) needs).
    full = torch.empty(min(head_chunk_rows, rows), vocab, dtype=torch.float32, device=device)
    with torch.no_grad():
        for start in range(0, rows, head_chunk_rows):
            stop = min(start + head_chunk_rows, rows)
            h = hidden[start:stop]
            h = h if h.dtype == torch.float32 else h.float()
            if temperature != 1.0:
                h = h / temperature
            buffer = full[: stop - start]
            if b32 is None:
                torch.mm(h, w32.T, out=buffer)
            else:
                torch.addmm(b32, h, w32.T, out=buffer)
            # One extra entry gives the tail's largest logit, the natural shift
            # for the tail's logsumexp: every tail term is then ≤ 1 and the sum
            # ≥ 1, so nothing under- or overflows.
            values, ids = torch.topk(buffer, min(k + 1, vocab), dim=1, sorted=True)
            if k < vocab:
                shift = values[:, k : k + 1]
                buffer.scatter_(1, ids[:, :k], float("-inf"))
                tail = shift[:, 0] + buffer.sub_(shift).exp_().sum(dim=1).log()
            else:
                tail = torch.full((stop - start,), float("-inf"), device=device)
            values, ids = values[:, :k], ids[:, :k]
            lse = torch.logaddexp(torch.logsumexp(values, dim=1), tail)
            topk_ids[start:stop] = ids
            topk_logprobs[start:stop] = values - lse[:, None]
            tail_logmass[start:stop] = tail - lse
    return topk_ids, topk_logprobs, tail_logmass


def nonfinite_logits_error(where: str, dtype) -> ValueError:
    """The error for a teacher whose logits are NaN or infinite ``where``: a half-precision teacher may be
    helped by float32; a float32 one (whose weights are finite: loading checks them) is not."""
    name = str(dtype).removeprefix("torch.")
    if name in ("float32", "float64"):
        return ValueError(f"teacher: non-finite logits {where} although the teacher runs in {name} and its weights "
                          "are finite: its activations overflow on this input; check the model (does it generate "
                          "sensible text?) or the data")
    return ValueError(f"teacher: non-finite logits {where} (teacher dtype {name}); try --dtype float32")
