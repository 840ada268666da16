"""teacher_topk against a float64 dense oracle."""

import pytest
import torch

from destila.targets.head import teacher_topk


def oracle(hidden, weight, bias, k, temperature):
    logits = hidden.double() @ weight.double().T + (0 if bias is None else bias.double())
    logp = torch.log_softmax(logits / temperature, dim=-1)
    values, ids = logp.topk(k, dim=-1)
    tail = logp.scatter(1, ids, float("-inf")).logsumexp(-1)
    return ids, values, tail


@pytest.mark.parametrize("chunk_size", [1, 7, 47, 1000])
@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_dense_oracle(chunk_size, temperature, with_bias):
    gen = torch.Generator().manual_seed(0)
    n, h, v, k = 47, 31, 123, 9
    hidden = torch.randn(n, h, generator=gen)
    weight = torch.randn(v, h, generator=gen)
    bias = torch.randn(v, generator=gen) if with_bias else None
    ids, lp, tail = teacher_topk(hidden, weight, bias, k, temperature, chunk_size)
    ref_ids, ref_lp, ref_tail = oracle(hidden, weight, bias, k, temperature)
    assert ids.dtype == torch.int64 and lp.dtype == torch.float32 and tail.dtype == torch.float32
    assert ids.shape == (n, k) and lp.shape == (n, k) and tail.shape == (n,)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(lp.double(), ref_lp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tail.double(), ref_tail, rtol=1e-5, atol=1e-5)


def test_result_does_not_depend_on_chunk_size():
    gen = torch.Generator().manual_seed(1)
    hidden, weight = torch.randn(64, 16, generator=gen), torch.randn(200, 16, generator=gen)
    results = [teacher_topk(hidden, weight, None, 20, 1.0, c) for c in (1, 5, 64, 65)]
    for ids, lp, tail in results[1:]:
        assert torch.equal(ids, results[0][0])
        torch.testing.assert_close(lp, results[0][1], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(tail, results[0][2], rtol=1e-6, atol=1e-6)


def test_tail_is_accurate_when_top_k_holds_almost_all_mass():
    # One logit 40 nats above the rest: the tail mass is ~e^-40 · V, far below
    # float32's resolution of 1 − Σp, yet its log must be exact, not -inf.
    gen = torch.Generator().manual_seed(2)
    v, h = 500, 8
    weight = torch.randn(v, h, generator=gen) * 0.01
    hidden = torch.zeros(3, h)
    hidden[:, 0] = 1.0
    weight[7] = 0.0
    weight[7, 0] = 40.0
    ids, lp, tail = teacher_topk(hidden, weight, None, 1, 1.0)
    _, _, ref_tail = oracle(hidden, weight, None, 1, 1.0)
    assert torch.all(ids[:, 0] == 7)
    assert torch.isfinite(tail).all() and tail.max() < -30
    torch.testing.assert_close(tail.double(), ref_tail, rtol=1e-5, atol=1e-5)
    naive = torch.log1p(-lp.exp().sum(-1))  # what 1 − Σp gives in float32
    assert torch.isinf(naive).all()


def test_k_equal_to_vocab_leaves_an_empty_tail():
    gen = torch.Generator().manual_seed(3)
    hidden, weight = torch.randn(5, 4, generator=gen), torch.randn(6, 4, generator=gen)
    ids, lp, tail = teacher_topk(hidden, weight, None, 6)
    assert torch.isneginf(tail).all()
    torch.testing.assert_close(lp.logsumexp(-1), torch.zeros(5), rtol=0, atol=1e-6)
    assert torch.equal(ids.sort(-1).values, torch.arange(6).expand(5, 6))


def test_half_precision_inputs_use_float32_logits():
    gen = torch.Generator().manual_seed(4)
    hidden, weight = torch.randn(20, 16, generator=gen), torch.randn(300, 16, generator=gen)
    ids, lp, tail = teacher_topk(hidden.bfloat16(), weight.bfloat16(), None, 10)
    ref_ids, ref_lp, ref_tail = oracle(hidden.bfloat16(), weight.bfloat16(), None, 10, 1.0)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(lp.double(), ref_lp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tail.double(), ref_tail, rtol=1e-5, atol=1e-5)


def test_bad_arguments_are_refused():
    hidden, weight = torch.randn(2, 4), torch.randn(6, 4)
    with pytest.raises(ValueError, match="k must be in"):
        teacher_topk(hidden, weight, None, 7)
    with pytest.raises(ValueError, match="temperature"):
        teacher_topk(hidden, weight, None, 2, temperature=0.0)
    with pytest.raises(ValueError, match="expected hidden"):
        teacher_topk(hidden, torch.randn(6, 5), None, 2)
