"""Properties of the loss that hold for any input (hypothesis draws shapes, seeds and options)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from destila import distill_loss
from destila.losses import DIVERGENCES, TAILS

SETTINGS = settings(max_examples=25, deadline=None)


@st.composite
def problems(draw, self_teacher: bool = False):
    """A float64 problem: student head, a teacher top-K with exact tail, options."""
    n = draw(st.integers(1, 12))
    v = draw(st.integers(2, 40))
    k = draw(st.integers(1, v))
    h = draw(st.integers(1, 8))
    temperature = draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    hidden = torch.randn(n, h, dtype=torch.float64, generator=gen)
    weight = 2.0 * torch.randn(v, h, dtype=torch.float64, generator=gen)
    bias = torch.randn(v, dtype=torch.float64, generator=gen)
    if self_teacher:  # the teacher is the student itself at temperature T
        teacher = torch.log_softmax((hidden @ weight.T + bias) / temperature, dim=1)
    else:
        teacher = torch.log_softmax(3.0 * torch.randn(n, v, dtype=torch.float64, generator=gen), dim=1)
    lp, ids = teacher.topk(k, dim=1)
    outside = torch.ones(n, v, dtype=torch.bool).scatter_(1, ids, False)
    tail = torch.logsumexp(teacher.masked_fill(~outside, float("-inf")), dim=1)
    return dict(hidden=hidden, weight=weight, bias=bias, ids=ids, lp=lp, tail=tail, teacher=teacher,
                temperature=temperature)


def call(p, hidden=None, weight=None, **options):
    return distill_loss(p["hidden"] if hidden is None else hidden, p["weight"] if weight is None else weight,
                        p["ids"], p["lp"], p["tail"], bias=p["bias"], temperature=p["temperature"], **options)


PROPER = [(d, "bucket") for d in DIVERGENCES] + [("forward_kl", "renorm"), ("tvd", "renorm"), ("tvd", "none")]


@SETTINGS
@given(problems(), st.sampled_from(PROPER), st.sampled_from(["fused", "chunked", "dense"]))
def test_proper_divergences_are_non_negative(p, choice, impl):
    divergence, tail = choice
    assert call(p, divergence=divergence, tail=tail, impl=impl).item() >= -1e-12


@SETTINGS
@given(problems(self_teacher=True), st.sampled_from(DIVERGENCES), st.sampled_from(["bucket", "none"]))
def test_divergence_of_a_distribution_with_itself_is_zero(p, divergence, tail):
    hidden = p["hidden"].clone().requires_grad_(True)
    loss = call(p, hidden=hidden, divergence=divergence, tail=tail)
    assert abs(loss.item()) <= 1e-12
    # p = q is the minimum of a proper divergence: no gradient (TVD has a kink
    # there, and rounding picks a side).
    if tail == "bucket" and divergence != "tvd":
        loss.backward()
        assert hidden.grad.abs().max().item() <= 1e-10


@SETTINGS
@given(problems(), st.sampled_from(DIVERGENCES), st.sampled_from(TAILS), st.integers(1, 13),
       st.sampled_from(["fused", "chunked"]))
def test_result_does_not_depend_on_chunk_size(p, divergence, tail, chunk_size, impl):
    results = []
    for size in (chunk_size, 10_000):
        hidden, weight = p["hidden"].clone().requires_grad_(True), p["weight"].clone().requires_grad_(True)
        loss = call(p, hidden=hidden, weight=weight, divergence=divergence, tail=tail, impl=impl,
                    chunk_size=size, hard_weight=0.0)
        loss.backward()
        results.append((loss.detach(), hidden.grad, weight.grad))
    for a, b in zip(*results):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-14)


@SETTINGS
@given(problems(), st.sampled_from(DIVERGENCES), st.sampled_from(TAILS))
def test_micro_batches_with_num_items_add_up_to_the_batch(p, divergence, tail):
    """Halving the rows doubles each row's weight unless num_items says the batch is whole."""
    n = p["hidden"].shape[0]
    half = n // 2
    kwargs = dict(divergence=divergence, tail=tail)
    whole = call(p, **kwargs)
    parts = sum(
        distill_loss(p["hidden"][s], p["weight"], p["ids"][s], p["lp"][s], p["tail"][s], bias=p["bias"],
                     temperature=p["temperature"], num_items=n, **kwargs)
        for s in (slice(0, half), slice(half, n))
    )
    assert torch.allclose(parts, whole, rtol=1e-12, atol=1e-14)
    if half:
        alone = distill_loss(p["hidden"][:half], p["weight"], p["ids"][:half], p["lp"][:half], p["tail"][:half],
                             bias=p["bias"], temperature=p["temperature"], **kwargs)
        with_n = distill_loss(p["hidden"][:half], p["weight"], p["ids"][:half], p["lp"][:half], p["tail"][:half],
                              bias=p["bias"], temperature=p["temperature"], num_items=2 * half, **kwargs)
        assert torch.allclose(alone, 2 * with_n, rtol=1e-12, atol=1e-14)


def _full_kl(p) -> torch.Tensor:
    log_q = torch.log_softmax((p["hidden"] @ p["weight"].T + p["bias"]) / p["temperature"], dim=1)
    return (p["teacher"].exp() * (p["teacher"] - log_q)).sum(1).mean() * p["temperature"] ** 2


@SETTINGS
@given(problems(), st.sampled_from(["fused", "chunked", "dense"]))
def test_bucket_kl_is_at_most_the_full_kl_and_equal_when_k_is_v(p, impl):
    v = p["weight"].shape[0]
    bucket = call(p, impl=impl)
    assert bucket.item() <= _full_kl(p).item() + 1e-12
    every = p["teacher"].topk(v, dim=1)
    full = {**p, "ids": every.indices, "lp": every.values, "tail": torch.full_like(p["tail"], float("-inf"))}
    assert torch.allclose(call(full, impl=impl), _full_kl(p), rtol=1e-12, atol=1e-14)
