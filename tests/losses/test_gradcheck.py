"""``torch.autograd.gradcheck`` of every impl on tiny float64 inputs (finite differences vs. backward)."""

from __future__ import annotations

import pytest
import torch
from loss_oracle import make_case

from destila import distill_loss
from destila.losses import DIVERGENCES, TAILS


@pytest.mark.parametrize("impl", ["dense", "chunked", "fused"])
@pytest.mark.parametrize("divergence", DIVERGENCES)
@pytest.mark.parametrize("tail", TAILS)
def test_gradcheck(impl, divergence, tail):
    case = make_case(n=6, h=3, v=11, k=4, seed=3, drop_every=4).leaves()

    def loss(hidden, weight, bias):
        return distill_loss(hidden, weight, case.topk_ids, case.topk_logprobs, case.tail_logmass, case.labels,
                            bias=bias, divergence=divergence, tail=tail, temperature=1.5, hard_weight=0.3,
                            impl=impl, chunk_size=4)

    assert torch.autograd.gradcheck(loss, (case.hidden, case.weight, case.bias), eps=1e-6, atol=1e-7, rtol=1e-5)
