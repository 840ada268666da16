"""Half-precision inputs: float32 accumulation must be no worse than naive bf16 maths.

Reference: the float64 oracle on the very bf16 values. Naive: the same oracle
run in bfloat16 throughout (logits, softmax, divergence, autograd), what a
model in bf16 computing the loss directly would get.
"""

from __future__ import annotations

import pytest
import torch
from loss_oracle import make_case, oracle

from destila import distill_loss


def rel_err(found, expected) -> float:
    found, expected = found.detach().double(), expected.detach().double()
    return float((found - expected).abs().max() / expected.abs().max())


def _grads(case, loss):
    loss.backward()
    return [case.hidden.grad, case.weight.grad, case.bias.grad]


@pytest.mark.parametrize("impl", ["dense", "chunked", "fused"])
@pytest.mark.parametrize("options", [
    dict(divergence="forward_kl", tail="bucket", temperature=1.0, hard_weight=0.0),
    dict(divergence="jsd", tail="renorm", temperature=2.0, hard_weight=0.5),
    dict(divergence="reverse_kl", tail="bucket", temperature=1.0, hard_weight=0.5),
], ids=["fkl", "jsd-T2-hard", "rkl-hard"])
def test_bf16_inputs_no_worse_than_naive_bf16(impl, options):
    # float16 teacher log-probs, as a cache stores them.
    base = make_case(n=64, h=48, v=300, k=12, seed=1).to(torch.bfloat16, lp_dtype=torch.float16)
    exact = base.to(torch.float64).leaves()
    want_loss = oracle(exact, **options)[0]
    want = [want_loss.detach(), *_grads(exact, want_loss)]
    naive_case = base.leaves()
    naive_loss = oracle(naive_case, dtype=torch.bfloat16, **options)[0]
    naive = [naive_loss.detach(), *_grads(naive_case, naive_loss)]

    case = base.leaves()
    loss = distill_loss(*case.args(), bias=case.bias, impl=impl, chunk_size=16, **options)
    got = [loss.detach(), *_grads(case, loss)]
    assert loss.dtype == torch.float32
    assert all(g.dtype == torch.bfloat16 for g in got[1:])
    for name, g, n, w in zip(["loss", "hidden", "weight", "bias"], got, naive, want):
        assert rel_err(g, w) <= rel_err(n, w) + 1e-3, name
    if impl == "fused":
        # Exact products and float32 sums: the loss is float32-accurate, and the
        # gradients are off by little more than their rounding to bf16 (2^-8).
        assert rel_err(got[0], want[0]) <= 1e-5
        assert max(rel_err(g, w) for g, w in zip(got[1:], want[1:])) <= 8e-3
