"""The loss across tokenizers: one-to-one rows against a float64 oracle (every impl and divergence), the chain rule
of many-to-one groups by hand, and identical tokenizers giving the same-tokenizer loss."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.special import xlogy

from destila import distill_loss
from destila.crosstok.targets import chain, one_to_one

DIVERGENCES = ["forward_kl", "reverse_kl", "jsd", "tvd"]


def _teacher_rows(n=41, vocab=97, k=9, seed=0):
    gen = torch.Generator().manual_seed(seed)
    full = torch.log_softmax(3.0 * torch.randn(n, vocab, dtype=torch.float64, generator=gen), dim=1)
    lp, ids = full.topk(k, dim=1)
    rest = torch.ones(n, vocab, dtype=torch.bool).scatter_(1, ids, False)
    tail = torch.logsumexp(full.masked_fill(~rest, -math.inf), dim=1)
    lp[3, -2:] = -math.inf  # padded entries
    return ids.numpy(), lp.numpy(), tail.numpy()


def _oracle(ids, lp, tail, mapping, hidden, weight, bias, labels, divergence, temperature, hard_weight):
    """Row by row in Python: each student id's teacher mass (summed over the teacher ids mapping to it), the rest
    bucket holding the tail and every unmapped entry; the student's bucket masses from its full softmax."""
    z = hidden @ weight.T + bias
    q_all = torch.softmax(z / temperature, dim=1)
    total, kept = torch.zeros((), dtype=torch.float64), 0
    for r in range(len(ids)):
        if labels[r] == -100:
            continue
        kept += 1
        buckets, rest = {}, math.exp(tail[r])
        for t, l in zip(ids[r].tolist(), lp[r].tolist()):
            if l == -math.inf:
                continue
            if mapping[t] >= 0:
                buckets[int(mapping[t])] = buckets.get(int(mapping[t]), 0.0) + math.exp(l)
            else:
                rest += math.exp(l)
        p = torch.tensor(list(buckets.values()) + [rest], dtype=torch.float64)
        q_b = [q_all[r, s] for s in buckets]
        outside = [j for j in range(q_all.shape[1]) if j not in buckets]
        q = torch.stack(q_b + [q_all[r, outside].sum()])
        if divergence == "forward_kl":
            d = (xlogy(p, p) - xlogy(p, q)).sum()
        elif divergence == "reverse_kl":
            d = (xlogy(q, q) - xlogy(q, p)).sum()
        elif divergence == "jsd":
            m = 0.5 * p + 0.5 * q
            d = (0.5 * (xlogy(p, p) - xlogy(p, m)) + 0.5 * (xlogy(q, q) - xlogy(q, m))).sum()
        else:
            d = 0.5 * (p - q).abs().sum()
        ce = -torch.log_softmax(z[r], dim=0)[labels[r]]
        total = total + temperature ** 2 * d + hard_weight * ce
    return total / kept


@pytest.mark.parametrize("impl", ["dense", "chunked", "fused"])
@pytest.mark.parametrize("divergence", DIVERGENCES)
def test_one_to_one_rows_equal_the_float64_oracle(impl, divergence):
    ids, lp, tail = _teacher_rows()
    gen = torch.Generator().manual_seed(1)
    vocab, student_vocab, size = 97, 83, 29
    mapping = torch.randint(0, student_vocab, (vocab,), generator=gen).numpy()
    mapping[torch.rand(vocab, generator=gen).numpy() < 0.3] = -1  # unmapped teacher ids
    mapping[int(ids[0, 0])], mapping[int(ids[0, 1])] = 5, 5  # two teacher ids, one student token: summed
    s_ids, s_lp, s_tail, _ = one_to_one(ids, lp, tail, mapping)
    hidden = torch.randn(len(ids), size, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = (torch.randn(student_vocab, size, dtype=torch.float64, generator=gen) / size ** 0.5).requires_grad_()
    bias = torch.randn(student_vocab, dtype=torch.float64, generator=gen).requires_grad_()
    labels = torch.randint(0, student_vocab, (len(ids),), generator=gen)
    labels[::6] = -100
    temperature, hard = 2.0, 0.3
    loss = distill_loss(hidden, weight, torch.from_numpy(s_ids), torch.from_numpy(s_lp), torch.from_numpy(s_tail),
                        labels, bias=bias, divergence=divergence, impl=impl, temperature=temperature,
                        hard_weight=hard, chunk_size=7)
    grads = torch.autograd.grad(loss, (hidden, weight, bias))
    expected = _oracle(ids, lp, tail, mapping, hidden, weight, bias, labels, divergence, temperature, hard)
    want = torch.autograd.grad(expected, (hidden, weight, bias))
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-10, abs=1e-12)
    for got, ref in zip(grads, want):
        torch.testing.assert_close(got, ref, rtol=1e-8, atol=1e-11)


def test_one_to_one_moves_unmapped_mass_into_the_rest_exactly():
    ids, lp, tail = _teacher_rows(n=5, vocab=20, k=6, seed=3)
    mapping = np.where(np.arange(20) % 3 == 0, -1, np.arange(20) + 100)
    s_ids, s_lp, s_tail, unmapped = one_to_one(ids, lp, tail, mapping)
    for r in range(5):
        real = lp[r] > -np.inf
        lost = [l for t, l in zip(ids[r][real], lp[r][real]) if mapping[t] < 0]
        assert math.exp(s_tail[r]) == pytest.approx(math.exp(tail[r]) + sum(map(math.exp, lost)), rel=1e-13)
        assert sorted(unmapped[r][unmapped[r] > -np.inf].tolist(), reverse=True) == sorted(lost, reverse=True)
        assert (np.diff(s_lp[r][s_lp[r] > -np.inf]) <= 0).all()  # descending, as the cache stores them


def _vocab(teacher: list[bytes], student: list[bytes]):
    index = {b: i for i, b in enumerate(student)}
    return SimpleNamespace(teacher=SimpleNamespace(table=teacher), student_index=index,
                           teacher_to_student=np.array([index.get(b, -1) for b in teacher]))


def test_the_chain_rule_of_a_many_to_one_group_by_hand():
    """Teacher 'a' + 'bc', student 'abc': the walk through the realised 'a', entries as strings, by hand."""
    vocab = _vocab([b"a", b"b", b"ab", b"c", b"abc", b"bc"], [b"abc", b"ab", b"a", b"x"])
    log = np.log
    rows_ids = np.array([[0, 2, 3], [5, 1, 0]])
    rows_lp = np.array([[log(.5), log(.3), log(.1)], [log(.6), log(.3), -np.inf]])
    rows_tail = np.array([log(.1), log(.1)])
    ids, lps, tail, unmapped = chain(rows_ids, rows_lp, rows_tail, [0], [b"a"], vocab, width=3)
    got = {int(i): math.exp(v) for i, v in zip(ids, lps) if v > -np.inf}
    # "ab": .3 at the first step, + .5·.3 after "a"; "abc": .5·.6; the rest: "c" (.1), both tails (.1 + .5·.1)
    assert got == pytest.approx({1: 0.45, 0: 0.30})
    assert math.exp(tail) == pytest.approx(0.25)
    assert sorted(np.exp(unmapped[unmapped > -np.inf])) == pytest.approx([0.1])
    # At most `width` entries: the others join the rest.
    ids, lps, tail, _ = chain(rows_ids, rows_lp, rows_tail, [0], [b"a"], vocab, width=1)
    assert (int(ids[0]), math.exp(lps[0]), math.exp(tail)) == pytest.approx((1, 0.45, 0.55))
    # The realised 'a' outside the first row's top-K: the walk stops, its mass stays in that row's tail.
    ids, lps, tail, _ = chain(np.array([[2, 3, 4], [5, 1, 0]]), np.array([[log(.3), log(.1), log(.05)], rows_lp[1]]),
                              np.array([log(.55), log(.1)]), [0], [b"a"], vocab, width=3)
    got = {int(i): math.exp(v) for i, v in zip(ids, lps) if v > -np.inf}
    assert got == pytest.approx({1: 0.3, 0: 0.05}) and math.exp(tail) == pytest.approx(0.65)
