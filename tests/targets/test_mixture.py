"""The mixture of teachers against an independent float64 computation on two tiny real models."""

import pytest
import torch
from conftest import make_tiny_model, mixture_rows

from destila.targets.head import teacher_topk
from destila.models import decoder_of, output_head, tokenizer_fingerprint
from destila.targets.mixture import check_shared_tokenizer, mixture_topk


def oracle(models, weights, input_ids, k, temperature=1.0):
    """float64, full [N, V] grids: log Σ_i w_i softmax(z_i), its top-K and log Σ of the rest."""
    total = sum(weights)
    probs = 0
    for model, w in zip(models, weights):
        hidden = decoder_of(model)(input_ids=input_ids).last_hidden_state.double().flatten(0, 1)
        weight, bias = output_head(model)
        logits = hidden @ weight.double().T + (0 if bias is None else bias.double())
        probs = probs + (w / total) * torch.softmax(logits / temperature, -1)
    top, ids = probs.topk(k, -1)
    rest = probs.sum(-1) - top.sum(-1)  # float64: exact enough for an oracle of a float32 result
    return ids, top.log(), rest.log()


@pytest.fixture(scope="module")
def teachers(tiny_tokenizer):
    # Different families and widths, one vocabulary: the mixture never assumes equal shapes.
    return [make_tiny_model("llama", len(tiny_tokenizer), seed=1, hidden=32),
            make_tiny_model("gpt2", len(tiny_tokenizer), seed=2, hidden=48)]


@pytest.mark.parametrize("chunk_size", [1, 7, 47, 1000])
def test_mixture_of_two_teachers_matches_float64(teachers, chunk_size):
    torch.manual_seed(0)
    input_ids = torch.randint(1, 300, (1, 47))
    weights = [0.7, 0.3]
    want_ids, want_lp, want_tail = oracle(teachers, weights, input_ids, k=12)
    got = mixture_rows(teachers, weights, input_ids, k=12, head_chunk_rows=chunk_size)
    ids, lp, tail = got["ids"], got["logprobs"], got["tail"]
    assert torch.equal(ids, want_ids)
    assert torch.allclose(lp.double(), want_lp, atol=2e-6)
    assert torch.allclose(tail.double(), want_tail, atol=2e-5)
    # The two teachers really disagree, so this is not one teacher's top-K in disguise.
    single = mixture_rows(teachers[:1], [1.0], input_ids, k=12)
    assert not torch.equal(single["ids"], ids)


def test_weights_are_normalised_and_one_teacher_is_teacher_topk(teachers):
    torch.manual_seed(1)
    hidden = torch.randn(20, 32)
    weight, bias = output_head(teachers[0])
    a = mixture_topk([hidden], [(weight, bias)], [3.0], k=5)
    b = teacher_topk(hidden, weight, bias, 5)
    assert torch.equal(a[0], b[0])
    assert torch.allclose(a[1], b[1], atol=1e-6) and torch.allclose(a[2], b[2], atol=1e-5)
    # Mixing a teacher with itself changes nothing, whatever the weights.
    c = mixture_topk([hidden, hidden], [(weight, bias)] * 2, [2.0, 5.0], k=5)
    assert torch.equal(c[0], b[0]) and torch.allclose(c[1], b[1], atol=1e-6)


def test_temperature_and_k_equal_to_vocab(teachers):
    torch.manual_seed(2)
    input_ids = torch.randint(1, 300, (2, 9))
    vocab = output_head(teachers[0])[0].shape[0]
    full = mixture_rows(teachers, [1, 1], input_ids, k=vocab, temperature=2.0)
    assert torch.isinf(full["tail"]).all()
    assert torch.allclose(full["logprobs"].double().exp().sum(-1), torch.ones(18, dtype=torch.float64), atol=1e-5)
    _, want_lp, _ = oracle(teachers, [1, 1], input_ids, k=vocab, temperature=2.0)
    assert torch.allclose(full["logprobs"].double(), want_lp, atol=2e-6)
    cold = mixture_rows(teachers, [1, 1], input_ids, k=vocab)
    assert not torch.allclose(full["logprobs"], cold["logprobs"], atol=1e-2)


def test_refusals(tiny_tokenizer):
    from conftest import train_tiny_tokenizer

    other = train_tiny_tokenizer(vocab_size=300)
    prints = [tokenizer_fingerprint(tiny_tokenizer), tokenizer_fingerprint(other)]
    with pytest.raises(ValueError, match="different tokenizer"):
        check_shared_tokenizer(prints, [320, 300], ["a", "b"])
    with pytest.raises(ValueError, match="vocabulary size"):
        check_shared_tokenizer(prints[:1] * 2, [320, 300], ["a", "b"])
    hidden, weight = torch.randn(3, 4), torch.randn(10, 4)
    with pytest.raises(ValueError, match="one weight per teacher"):
        mixture_topk([hidden, hidden], [(weight, None)] * 2, [1.0], k=2)
    with pytest.raises(ValueError, match="positive"):
        mixture_topk([hidden], [(weight, None)], [-1.0], k=2)
