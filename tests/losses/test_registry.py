"""A divergence added as one registry entry works everywhere a divergence is named.

The toy entry is the squared Hellinger distance ``H² = Σ_c (√p_c − √q_c)²``,
``w_c = q_c·∂H²/∂q_c = q_c − √(p_c q_c)``. It is checked against a float64
formula through the dense, chunked and fused losses (value and gradients),
the online teacher's full-vocabulary loss, and eval (against a teacher and
against cached top-K targets).
"""

from __future__ import annotations

import pytest
import torch
from conftest import make_tiny_model
from loss_oracle import make_case, oracle

from destila import distill_loss
from destila.eval.quality import metrics_from_sums, quality_sums
from destila.losses import LossOptions
from destila.losses.divergences import REGISTRY, Divergence, get_divergence, register
from destila.losses.full_vocab import full_vocab_loss


def _hellinger_terms(p, lp, q, lq, present, beta):
    return torch.where(present, (p.sqrt() - q.sqrt()) ** 2, 0.0)


def _hellinger_weights(p, lp, q, lq, present, beta):
    return torch.where(present, q - (p * q).sqrt(), 0.0)


def hellinger_formula(p, q):  # float64, textbook
    return (p.sqrt() - q.sqrt()) ** 2


@pytest.fixture
def hellinger():
    register(Divergence("hellinger", "Σ (√p − √q)²", "hellinger", _hellinger_terms, _hellinger_weights))
    try:
        yield "hellinger"
    finally:
        del REGISTRY["hellinger"]


def rel_err(found, expected) -> float:
    found, expected = found.detach().double(), expected.detach().double()
    return float((found - expected).abs().max() / expected.abs().max().clamp(min=1e-30))


@pytest.mark.parametrize("impl", ["dense", "chunked", "fused"])
@pytest.mark.parametrize("tail,temperature,hard_weight", [("bucket", 1.0, 0.0), ("renorm", 2.0, 0.5),
                                                          ("none", 0.7, 0.5)])
def test_a_registered_divergence_trains_through_every_impl(hellinger, impl, tail, temperature, hard_weight):
    options = dict(tail=tail, temperature=temperature, hard_weight=hard_weight, soft_weight=0.8)
    expected_case = make_case().leaves()
    expected, expected_stats = oracle(expected_case, formula=hellinger_formula, **options)
    expected.backward()
    case = make_case().leaves()
    loss, stats = distill_loss(*case.args(), bias=case.bias, impl=impl, divergence=hellinger, chunk_size=7,
                               return_stats=True, **options)
    loss.backward()
    assert rel_err(loss, expected) <= 1e-10
    assert float(stats["soft"]) == pytest.approx(float(expected_stats["soft"]), rel=1e-6)
    for name in ("hidden", "weight", "bias"):
        assert rel_err(getattr(case, name).grad, getattr(expected_case, name).grad) <= 1e-10, name


def test_options_and_their_errors_come_from_the_registry(hellinger):
    assert LossOptions(divergence=hellinger).divergence == hellinger
    with pytest.raises(ValueError, match="'forward_kl', 'reverse_kl', 'jsd', 'tvd', 'hellinger', found 'hellnger'"):
        LossOptions(divergence="hellnger")
    assert get_divergence("jsd").metric == "jsd" and get_divergence("forward_kl").metric == "kl"


def test_the_online_dense_loss_uses_the_full_vocabulary_form(hellinger):
    gen = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(2, 13, 50, generator=gen, dtype=torch.float64).unbind(0)
    labels = torch.randint(0, 50, (13,), generator=gen)
    labels[::4] = -100
    loss, stats = full_vocab_loss(student, teacher, labels, divergence=hellinger, temperature=2.0)
    p, q = torch.softmax(teacher / 2.0, -1), torch.softmax(student / 2.0, -1)
    rows = hellinger_formula(p, q).sum(-1)[labels != -100]
    assert float(stats["soft"]) == pytest.approx(float(rows.sum()), rel=1e-5)
    assert float(loss) == pytest.approx(float(4.0 * rows.sum() / len(rows)), rel=1e-5)


def test_eval_reports_a_registered_divergence_under_its_metric_name(hellinger):
    model, teacher = make_tiny_model("llama", 64, seed=1), make_tiny_model("llama", 64, seed=2)
    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, 64, (2, 12), generator=gen)
    labels = torch.cat([input_ids[:, 1:], torch.full((2, 1), -100)], 1)  # the next token at each position
    batch = {"input_ids": input_ids, "labels": labels}  # batches carry position-aligned labels
    with torch.no_grad():
        q = torch.softmax(model(input_ids).logits.double(), -1)
        p = torch.softmax(teacher(input_ids).logits.double(), -1)
    valid = labels != -100
    expected = hellinger_formula(p, q).sum(-1)[valid]

    metrics = metrics_from_sums(quality_sums(model, [batch], teacher, chunk_size=5, divergence=hellinger))
    assert "kl_to_teacher" not in metrics
    assert metrics["hellinger_to_teacher"] == pytest.approx(float(expected.mean()), rel=1e-5)

    # Against cached targets: the top-K buckets of the same teacher, as a cache stores them.
    logp = torch.log_softmax(teacher(input_ids).logits.detach().double(), -1)
    top, ids = logp.topk(8, -1)
    tail = logp.scatter(-1, ids, float("-inf")).logsumexp(-1)
    cached = {**batch, "topk_ids": ids, "topk_logprobs": top.float(), "tail_logmass": tail.float()}
    sums = quality_sums(model, [cached], chunk_size=5, divergence=hellinger)
    bucket_p = torch.cat([top.exp(), tail.exp()[..., None]], -1)
    bucket_q = torch.cat([q.gather(-1, ids), 1 - q.gather(-1, ids).sum(-1, keepdim=True)], -1)
    assert sums["hellinger"] == pytest.approx(float(hellinger_formula(bucket_p, bucket_q).sum(-1)[valid].sum()),
                                              rel=1e-4)


def test_the_training_log_names_the_divergence_it_trains_on(hellinger):
    from destila.training.trainer import DistillationTrainer  # heavy (transformers' Trainer): only here

    sums = torch.tensor([6.0, 2.0, 4.0, 3.0], dtype=torch.float64)  # soft, hard, rows, agree
    assert DistillationTrainer._metrics(sums)["kl"] == 1.5
    logged = DistillationTrainer._metrics(sums, "eval_", divergence=hellinger)
    assert logged == {"eval_hellinger": 1.5, "eval_ce": 0.5, "eval_ppl": pytest.approx(1.6487, rel=1e-4),
                      "eval_top1_agreement": 0.75}
