"""A plain float64 oracle for the distillation loss, and random test cases.

Written from DESIGN.md § The loss without looking at destila.losses: bucket
vectors are built with Python loops, the rest bucket's mass is a direct sum
of the student's probabilities over the tokens outside the top-K, every
divergence is its textbook formula through ``torch.special.xlogy``, and
gradients come from autograd. Buckets that do not exist (padding, no rest
bucket, dropped rows) are given p = q = 1, which makes every divergence term
0 with no gradient.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch.special import xlogy


@dataclass
class Case:
    hidden: torch.Tensor       # [N, H]
    weight: torch.Tensor       # [V, H]
    bias: torch.Tensor | None  # [V]
    topk_ids: torch.Tensor     # [N, K]
    topk_logprobs: torch.Tensor
    tail_logmass: torch.Tensor | None
    labels: torch.Tensor | None

    def to(self, dtype: torch.dtype, lp_dtype: torch.dtype | None = None) -> "Case":
        """The same case with float tensors in ``dtype`` (teacher log-probs in ``lp_dtype``)."""
        cast = lambda t: None if t is None else t.detach().to(dtype)  # noqa: E731
        return replace(self, hidden=cast(self.hidden), weight=cast(self.weight), bias=cast(self.bias),
                       topk_logprobs=self.topk_logprobs.to(lp_dtype or dtype),
                       tail_logmass=None if self.tail_logmass is None else self.tail_logmass.to(lp_dtype or dtype))

    def leaves(self) -> "Case":
        """Fresh leaves requiring grad for hidden, weight and bias."""
        grad = lambda t: None if t is None else t.detach().clone().requires_grad_(True)  # noqa: E731
        return replace(self, hidden=grad(self.hidden), weight=grad(self.weight), bias=grad(self.bias))

    def args(self) -> tuple:
        return self.hidden, self.weight, self.topk_ids, self.topk_logprobs, self.tail_logmass, self.labels


def make_case(n=47, h=31, v=123, k=9, *, seed=0, bias=True, labels=True, drop_every=5, pad=True,
              tail=True, teacher_scale=3.0, student_scale=1.0) -> Case:
    """A random float64 case: peaked teacher top-K from full logits, exact tail, padding and dropped rows.

    Padding puts ``-inf`` log-probs with ids that are out of range, negative or
    repeat a real id of the row: the loss must ignore all of them.
    """
    gen = torch.Generator().manual_seed(seed)
    f64 = dict(dtype=torch.float64, generator=gen)
    teacher = torch.log_softmax(teacher_scale * torch.randn(n, v, **f64), dim=1)
    topk_lp, topk_ids = teacher.topk(k, dim=1)
    rest = torch.ones(n, v, dtype=torch.bool).scatter_(1, topk_ids, False)
    tail_lm = torch.logsumexp(teacher.masked_fill(~rest, float("-inf")), dim=1)
    if pad and k >= 3:
        for r in range(1, n, 3):
            topk_lp[r, -1] = float("-inf")
            topk_ids[r, -1] = [-1, v + 5, int(topk_ids[r, 0])][r % 3]
        topk_lp[2, 1:] = float("-inf")  # a row with only one real entry
    hidden = torch.randn(n, h, **f64)
    weight = student_scale * torch.randn(v, h, **f64) / h ** 0.5
    label = torch.randint(0, v, (n,), generator=gen)
    if drop_every:
        label[::drop_every] = -100
    return Case(hidden, weight, torch.randn(v, **f64) if bias else None, topk_ids, topk_lp,
                tail_lm if tail else None, label if labels else None)


def _divergence(p, q, divergence, beta):
    if divergence == "forward_kl":
        return xlogy(p, p) - xlogy(p, q)
    if divergence == "reverse_kl":
        return xlogy(q, q) - xlogy(q, p)
    if divergence == "jsd":
        m = beta * p + (1 - beta) * q
        return beta * (xlogy(p, p) - xlogy(p, m)) + (1 - beta) * (xlogy(q, q) - xlogy(q, m))
    if divergence == "tvd":
        return 0.5 * (p - q).abs()
    raise AssertionError(divergence)


def oracle(case: Case, *, divergence="forward_kl", beta=0.5, tail="bucket", temperature=1.0, soft_weight=1.0,
           hard_weight=0.0, num_items=None, ignore_index=-100, dtype=torch.float64, formula=None):
    """``(loss, stats)`` by plain dense maths in ``dtype`` (float64 for the oracle; bf16 gives the naive baseline).

    ``formula(p, q)``: the per-bucket terms of a divergence the oracle does not know by name."""
    hidden, weight, bias = case.hidden, case.weight, case.bias
    z = hidden.to(dtype) @ weight.to(dtype).T
    if bias is not None:
        z = z + bias.to(dtype)
    n_rows, vocab = z.shape
    log_q = torch.log_softmax(z / temperature, dim=1)
    q_all = log_q.exp()
    ids = case.topk_ids.tolist()
    lps = case.topk_logprobs.double().tolist()
    keep = [True] * n_rows if case.labels is None else [int(x) != ignore_index for x in case.labels]
    one = torch.ones((), dtype=dtype)
    rows = []
    for r in range(n_rows):
        real = [(i, lp) for i, lp in zip(ids[r], lps[r]) if lp > float("-inf")] if keep[r] else []
        if tail == "renorm" and real:
            total = torch.logsumexp(torch.tensor([lp for _, lp in real], dtype=torch.float64), 0).item()
            real = [(i, lp - total) for i, lp in real]
        p = [torch.tensor(lp, dtype=torch.float64).exp().to(dtype) for _, lp in real]
        q = [q_all[r, i] for i, _ in real]
        taken = {i for i, _ in real}
        if tail == "bucket" and keep[r] and len(taken) < vocab:
            outside = [j for j in range(vocab) if j not in taken]
            q.append(q_all[r, outside].sum())
            if case.tail_logmass is not None:
                lt = case.tail_logmass[r].double()
            else:
                lt = torch.log(-torch.expm1(torch.logsumexp(torch.tensor([lp for _, lp in real] or [float("-inf")],
                                                                         dtype=torch.float64), 0).clamp(max=0)))
            p.append(lt.exp().to(dtype))
        if not p:  # no bucket at all: p = q = 1 contributes nothing
            p, q = [one], [one]
        p, q = torch.stack(p), torch.stack(q)
        rows.append(formula(p, q) if formula is not None else _divergence(p, q, divergence, beta))
    keep_t = torch.tensor(keep)
    # Σ|terms|: the scale against which a sum of terms that may cancel is accurate.
    soft_scale = sum(float(t.detach().abs().sum()) for t, k in zip(rows, keep) if k)
    d_rows = torch.stack([t.sum() for t in rows])
    soft = torch.where(keep_t, d_rows, 0).sum()
    hard = torch.zeros((), dtype=dtype)
    if case.labels is not None:
        log_q1 = torch.log_softmax(z, dim=1)
        safe = torch.where(keep_t, case.labels, 0)
        hard = torch.where(keep_t, -log_q1.gather(1, safe[:, None]).squeeze(1), 0).sum()
    n = torch.as_tensor(float(sum(keep)) if num_items is None else float(num_items), dtype=dtype).clamp(min=1)
    loss = (soft_weight * temperature ** 2 * soft + hard_weight * hard) / n
    best = [max(((lp, i) for i, lp in zip(ids[r], lps[r]) if lp > float("-inf")), default=(None, None))[1]
            for r in range(n_rows)]
    student_best = z.argmax(dim=1).tolist()
    agree = sum(1 for r in range(n_rows) if keep[r] and best[r] is not None and student_best[r] == best[r])
    stats = {"soft": soft.detach(), "hard": hard.detach(), "rows": float(sum(keep)), "agree": float(agree),
             "soft_scale": soft_scale}
    return loss, stats
