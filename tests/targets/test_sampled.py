"""Sampled targets: the draws follow the teacher, are keyed per position, and give an unbiased gradient."""

import math

import numpy as np
import pytest
import torch

from destila.losses.api import distill_loss
from destila.targets.sampled import distinct_counts, position_keys, teacher_sample, uniforms


def teacher_problem(rows=5, hidden=8, vocab=40, seed=0):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, hidden, generator=gen, dtype=torch.float64)
    w = torch.randn(vocab, hidden, generator=gen, dtype=torch.float64) * 0.8
    return h, w


def test_distinct_counts_equals_unique_per_row():
    gen = torch.Generator().manual_seed(1)
    draws = torch.randint(0, 7, (50, 9), generator=gen)
    ids, counts = distinct_counts(draws)
    for r in range(50):
        want_ids, want_counts = draws[r].unique(return_counts=True)
        n = len(want_ids)
        assert torch.equal(ids[r, :n], want_ids) and torch.equal(counts[r, :n], want_counts)
        assert (counts[r, n:] == 0).all() and (ids[r, n:] == 0).all()


def test_keys_are_per_position_and_uniforms_cover_the_unit_interval():
    keys = position_keys(0, np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]))
    assert len(set(keys.tolist())) == 4
    assert np.array_equal(keys, position_keys(0, np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])))
    assert not np.array_equal(keys, position_keys(1, np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])))
    u = uniforms(position_keys(3, np.arange(2000), np.zeros(2000)), 50).ravel()
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / u.size)  # 5 standard errors


def test_draws_do_not_depend_on_chunking():
    h, w = teacher_problem(rows=30, vocab=60)
    keys = position_keys(7, np.arange(30), np.arange(30))
    results = [teacher_sample(h, w, None, keys, 16, 1.0, chunk) for chunk in (1, 7, 30, 100)]
    for ids, counts in results[1:]:
        assert torch.equal(ids, results[0][0]) and torch.equal(counts, results[0][1])
    assert (results[0][1].sum(dim=1) == 16).all()


def test_draw_frequencies_follow_the_teacher_at_its_temperature():
    h, w = teacher_problem(rows=3, vocab=30, seed=2)
    temperature, samples, rounds = 2.0, 64, 400
    p = torch.softmax(h @ w.T / temperature, dim=-1)
    freq = torch.zeros_like(p)
    for seed in range(rounds):
        ids, counts = teacher_sample(h, w, None, position_keys(seed, np.zeros(3), np.arange(3)), samples, temperature)
        freq.scatter_add_(1, ids, counts.double())
    draws = samples * rounds
    freq /= draws
    # Each frequency is a mean of `draws` Bernoulli(p) variables: within 5 standard errors.
    assert ((freq - p).abs() <= 5 * (p * (1 - p) / draws).sqrt() + 1e-9).all()


def sampled_gradient(h_student, w_student, h_teacher, w_teacher, seed, samples, temperature):
    keys = position_keys(seed, np.zeros(len(h_teacher)), np.arange(len(h_teacher)))
    ids, counts = teacher_sample(h_teacher, w_teacher, None, keys, samples, temperature)
    logprobs = torch.where(counts > 0, (counts.double() / samples).log(), -math.inf)
    tail = torch.full((len(ids),), -math.inf, dtype=torch.float64)
    hs, ws = h_student.clone().requires_grad_(), w_student.clone().requires_grad_()
    distill_loss(hs, ws, ids, logprobs, tail, temperature=temperature, chunk_size=3).backward()
    return torch.cat([hs.grad.ravel(), ws.grad.ravel()])


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_mean_sampled_gradient_converges_to_the_full_kl_gradient(temperature):
    """E[∇ KL(p̂ ‖ q)] = ∇ KL(p ‖ q) when p̂ = counts / S of S draws from p (forward KL, through the fused loss).

    Tolerance: every coordinate of the mean of M independent draws lies within 5 of its standard errors
    (std over the draws / √M) of the full-vocabulary float64 gradient; a top-K of 5 entries, for contrast,
    is biased far outside that band.
    """
    h_teacher, w_teacher = teacher_problem(rows=4, vocab=30, seed=3)
    h_student, w_student = teacher_problem(rows=4, vocab=30, seed=4)
    draws, samples = 400, 8
    grads = torch.stack([sampled_gradient(h_student, w_student, h_teacher, w_teacher, seed, samples, temperature)
                         for seed in range(draws)])
    mean, stderr = grads.mean(0), grads.std(0) / math.sqrt(draws)

    hs, ws = h_student.clone().requires_grad_(), w_student.clone().requires_grad_()
    p = torch.softmax(h_teacher @ w_teacher.T / temperature, dim=-1)
    log_q = torch.log_softmax(hs @ ws.T / temperature, dim=-1)
    full_kl = temperature**2 * (p * (p.log() - log_q)).sum(-1).mean()
    full_kl.backward()
    exact = torch.cat([hs.grad.ravel(), ws.grad.ravel()])

    assert ((mean - exact).abs() <= 5 * stderr + 1e-7).all(), ((mean - exact).abs() / stderr).max()

    logp = torch.log_softmax(h_teacher @ w_teacher.T / temperature, dim=-1)
    top_lp, top_ids = logp.topk(5, dim=-1)
    hs, ws = h_student.clone().requires_grad_(), w_student.clone().requires_grad_()
    distill_loss(hs, ws, top_ids, top_lp, tail="renorm", temperature=temperature).backward()
    biased = torch.cat([hs.grad.ravel(), ws.grad.ravel()])
    assert ((biased - exact).abs() > 5 * stderr + 1e-7).any()
