"""The public surface: shapes, dtypes, the module, no-grad evaluation, partial and scaled gradients."""

from __future__ import annotations

import pytest
import torch
from loss_oracle import make_case

import destila.losses.fused as fused_module
from destila import DistillLoss, distill_loss

IMPLS = ["dense", "chunked", "fused"]


def _loss_and_grads(case, **options):
    case = case.leaves()
    loss = distill_loss(*case.args(), bias=case.bias, **options)
    loss.backward()
    return loss.detach(), case.hidden.grad, case.weight.grad, case.bias.grad


@pytest.mark.parametrize("impl", IMPLS)
def test_batch_time_layout_is_the_flat_layout(impl):
    case = make_case(n=12, h=5, v=20, k=4)
    flat = _loss_and_grads(case, impl=impl, hard_weight=0.5)
    shaped = case.leaves()
    loss = distill_loss(shaped.hidden.view(3, 4, 5), shaped.weight, shaped.topk_ids.view(3, 4, 4),
                        shaped.topk_logprobs.view(3, 4, 4), shaped.tail_logmass.view(3, 4),
                        shaped.labels.view(3, 4), bias=shaped.bias, impl=impl, hard_weight=0.5)
    loss.backward()
    for a, b in zip(flat, (loss.detach(), shaped.hidden.grad, shaped.weight.grad, shaped.bias.grad)):
        assert torch.allclose(a, b, rtol=1e-13, atol=0)


@pytest.mark.parametrize("impl", IMPLS)
def test_cache_dtypes_int32_ids_float16_logprobs(impl):
    case = make_case(n=10, h=6, v=30, k=5)
    wide = distill_loss(*case.args(), bias=case.bias, impl=impl)
    narrow = distill_loss(case.hidden, case.weight, case.topk_ids.int(), case.topk_logprobs.half(),
                          case.tail_logmass.float(), case.labels.int(), bias=case.bias, impl=impl)
    assert narrow.dtype == torch.float64  # the compute dtype follows hidden/weight
    assert torch.allclose(wide, narrow, rtol=2e-3)


def test_module_matches_function():
    case = make_case(n=9, h=4, v=15, k=3)
    options = dict(divergence="jsd", beta=0.2, temperature=2.0, hard_weight=0.1, chunk_size=4)
    module = DistillLoss(**options)
    assert "divergence='jsd'" in repr(module)
    got = module(*case.args(), bias=case.bias, return_stats=True)
    want = distill_loss(*case.args(), bias=case.bias, return_stats=True, **options)
    assert torch.equal(got[0], want[0])
    assert all(torch.equal(got[1][k], want[1][k]) for k in want[1])


def test_no_grad_evaluation_computes_no_gradient(monkeypatch):
    seen = []
    real = fused_module.chunk_loss_

    def spy(*args, want_grad, **kwargs):
        seen.append(want_grad)
        return real(*args, want_grad=want_grad, **kwargs)

    monkeypatch.setattr(fused_module, "chunk_loss_", spy)
    case = make_case(n=10, h=4, v=15, k=3).leaves()
    with torch.no_grad():
        loss = distill_loss(*case.args(), bias=case.bias, chunk_size=4)
    assert not loss.requires_grad and seen == [False] * 3
    seen.clear()
    frozen = make_case(n=10, h=4, v=15, k=3)  # nothing requires grad
    assert not distill_loss(*frozen.args(), bias=frozen.bias, chunk_size=4).requires_grad and seen == [False] * 3
    seen.clear()
    with_grad = distill_loss(*case.args(), bias=case.bias, chunk_size=4)
    assert seen == [True] * 3 and torch.allclose(with_grad.detach(), loss)


@pytest.mark.parametrize("impl", IMPLS)
def test_only_the_inputs_that_require_grad_get_one(impl):
    case = make_case(n=8, h=4, v=12, k=3)
    full = _loss_and_grads(case, impl=impl)
    hidden = case.hidden.clone().requires_grad_(True)
    distill_loss(hidden, case.weight, *case.args()[2:], bias=case.bias, impl=impl).backward()
    assert case.weight.grad is None and torch.allclose(hidden.grad, full[1], rtol=1e-13)


@pytest.mark.parametrize("impl", IMPLS)
def test_gradient_follows_the_outer_scale(impl):
    case = make_case(n=8, h=4, v=12, k=3)
    unit = _loss_and_grads(case, impl=impl)
    scaled = case.leaves()
    (3.0 * distill_loss(*scaled.args(), bias=scaled.bias, impl=impl)).backward()
    assert torch.allclose(scaled.hidden.grad, 3.0 * unit[1], rtol=1e-13)
    assert torch.allclose(scaled.weight.grad, 3.0 * unit[2], rtol=1e-13)


def test_num_items_may_be_a_tensor():
    case = make_case(n=8, h=4, v=12, k=3)
    as_int = distill_loss(*case.args(), bias=case.bias, num_items=20)
    as_tensor = distill_loss(*case.args(), bias=case.bias, num_items=torch.tensor(20))
    assert torch.equal(as_int, as_tensor)
    assert torch.equal(distill_loss(*case.args(), num_items=0), distill_loss(*case.args(), num_items=1))


@pytest.mark.parametrize("impl", IMPLS)
def test_mixed_precision_head(impl):
    """bf16 hidden states with a float32 head (e.g. a float32 lm_head kept for stability)."""
    case = make_case(n=8, h=16, v=40, k=5).to(torch.float32)
    hidden = case.hidden.bfloat16().requires_grad_(True)
    weight = case.weight.clone().requires_grad_(True)
    loss = distill_loss(hidden, weight, *case.args()[2:], bias=case.bias, impl=impl)
    loss.backward()
    assert loss.dtype == torch.float32 and hidden.grad.dtype == torch.bfloat16 and weight.grad.dtype == torch.float32
    reference = distill_loss(hidden.detach().float(), case.weight, *case.args()[2:], bias=case.bias)
    assert torch.allclose(loss.detach(), reference, rtol=1e-5)


def test_derived_tail_is_close_to_the_exact_one():
    case = make_case(n=16, h=8, v=50, k=10, pad=False)
    exact = distill_loss(*case.args(), bias=case.bias)
    derived = distill_loss(*case.args()[:4], None, case.labels, bias=case.bias)
    assert torch.allclose(exact, derived, rtol=1e-10)


@pytest.mark.parametrize("impl", IMPLS)
def test_backward_twice_with_retain_graph_accumulates(impl):
    case = make_case(n=8, h=4, v=12, k=3)
    once = _loss_and_grads(case, impl=impl)
    twice = case.leaves()
    loss = distill_loss(*twice.args(), bias=twice.bias, impl=impl)
    loss.backward(retain_graph=True)
    loss.backward()
    assert torch.allclose(twice.hidden.grad, 2 * once[1], rtol=1e-13)
    assert torch.allclose(twice.weight.grad, 2 * once[2], rtol=1e-13)
