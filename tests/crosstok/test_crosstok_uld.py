"""The optional ULD term against a row-by-row float64 reference: loss and gradients, chunked or not."""

from __future__ import annotations

import math

import pytest
import torch

from destila.crosstok.uld import uld_loss


def _reference(hidden, weight, bias, uld_lp, ids, lp, labels):
    z = hidden @ weight.T + bias
    total, kept = torch.zeros((), dtype=torch.float64), 0
    for r in range(hidden.shape[0]):
        if labels[r] == -100:
            continue
        kept += 1
        q = torch.softmax(z[r], dim=0)
        mapped = {int(i) for i, l in zip(ids[r], lp[r]) if l > -math.inf}
        others = torch.stack([q[j] for j in range(q.shape[0]) if j not in mapped])
        teacher = [math.exp(v) for v in uld_lp[r].tolist() if v > -math.inf]
        top = others.sort(descending=True).values[: len(teacher)]
        total = total + sum((t - s).abs() for t, s in zip(teacher, top)) if teacher else total
    return total / kept


@pytest.mark.parametrize("chunk_size", [1, 5, 100])
def test_uld_equals_the_reference(chunk_size):
    gen = torch.Generator().manual_seed(0)
    n, size, vocab, k = 13, 7, 31, 5
    hidden = torch.randn(n, size, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = torch.randn(vocab, size, dtype=torch.float64, generator=gen, requires_grad=True)
    bias = torch.randn(vocab, dtype=torch.float64, generator=gen, requires_grad=True)
    ids = torch.randint(0, vocab, (n, k), generator=gen)
    lp = torch.log(torch.rand(n, k, dtype=torch.float64, generator=gen) / k)
    lp[2, 3:] = -math.inf
    uld_lp = torch.log(torch.rand(n, 4, dtype=torch.float64, generator=gen) / 8).sort(dim=1, descending=True).values
    uld_lp[4, 1:] = -math.inf
    uld_lp[6, :] = -math.inf  # no unmapped mass: no term
    labels = torch.arange(n)
    labels[::4] = -100
    got = uld_loss(hidden, weight, uld_lp, ids, lp, labels, bias=bias, chunk_size=chunk_size)
    want = _reference(hidden, weight, bias, uld_lp, ids.tolist(), lp.tolist(), labels.tolist())
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-12)
    for a, b in zip(torch.autograd.grad(got, (hidden, weight, bias)), torch.autograd.grad(want, (hidden, weight, bias))):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
