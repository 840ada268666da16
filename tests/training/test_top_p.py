"""Nucleus (top-p) truncation of a top-K cache: each position's fewest leading entries reaching p, the rest of the
mass in the tail bucket."""

import pytest
import torch
from conftest import TRAIN_SEQ_LEN, pydoc_texts
from test_train import args_for
from train_helpers import read_log

from destila import distill_loss
from destila.cache import build_cache
from destila.targets.truncate import truncate_top_p
from destila.training import DistillationArguments, train_student


def full_distribution(rows=47, vocab=123, scale=3.0):
    torch.manual_seed(0)
    return torch.log_softmax(torch.randn(rows, vocab, dtype=torch.float64) * scale, dim=-1)


def test_nucleus_equals_top_p_of_the_full_distribution():
    """Float64 oracle: from a K = 40 cache, top-p 0.8 keeps what a top-p cut of the full softmax keeps."""
    logp = full_distribution()
    values, ids = logp.topk(40, dim=-1)
    tail = logp.scatter(1, ids, -torch.inf).logsumexp(-1)
    cut_ids, cut_lp, cut_tail = truncate_top_p(ids, values.float(), tail.float(), 0.8)
    assert torch.equal(cut_ids, ids)
    for row in range(logp.shape[0]):
        probs = values[row].exp()
        before = torch.cumsum(probs, 0) - probs
        n = int((before < 0.8).sum())  # the fewest leading tokens whose mass reaches 0.8
        assert probs[:n].sum() >= 0.8 and (n == 1 or probs[:n - 1].sum() < 0.8)
        torch.testing.assert_close(cut_lp[row, :n], values[row, :n].float())
        assert torch.isneginf(cut_lp[row, n:]).all()
        torch.testing.assert_close(cut_tail[row].double(), torch.log1p(-probs[:n].sum()), rtol=0, atol=1e-6)


def test_a_nucleus_wider_than_k_keeps_all_k_and_untrained_rows_stay_untrained():
    logp = full_distribution(scale=0.1)  # nearly flat: 0.95 of the mass needs most of the 123 tokens
    values, ids = logp.topk(10, dim=-1)
    tail = logp.scatter(1, ids, -torch.inf).logsumexp(-1).float()
    _, cut_lp, cut_tail = truncate_top_p(ids, values.float(), tail, 0.95)
    torch.testing.assert_close(cut_lp, values.float())
    torch.testing.assert_close(cut_tail, tail)
    empty_lp, empty_tail = torch.full((1, 10), -torch.inf), torch.zeros(1)
    _, lp, kept_tail = truncate_top_p(ids[:1], empty_lp, empty_tail, 0.5)
    assert torch.isneginf(lp).all() and kept_tail.item() == 0.0


def test_the_loss_on_a_nucleus_is_the_bucket_kl_of_the_nucleus_and_its_rest():
    """distill_loss over the truncated targets (padding included) = a float64 KL over (nucleus tokens, rest)."""
    torch.manual_seed(1)
    rows, hidden_size, vocab = 9, 16, 123
    hidden = torch.randn(rows, hidden_size, dtype=torch.float64)
    weight = torch.randn(vocab, hidden_size, dtype=torch.float64)
    logp = full_distribution(rows, vocab)
    values, ids = logp.topk(30, dim=-1)
    tail = logp.scatter(1, ids, -torch.inf).logsumexp(-1)
    cut_ids, cut_lp, cut_tail = truncate_top_p(ids, values, tail, 0.7)
    loss = distill_loss(hidden, weight, cut_ids, cut_lp.double(), tail_logmass=cut_tail.double(), impl="fused")
    q = torch.log_softmax(hidden @ weight.T, dim=-1)
    expected = 0.0
    for row in range(rows):
        kept = torch.isfinite(cut_lp[row])
        p = torch.cat([cut_lp[row][kept].exp(), cut_tail[row].double().exp()[None]])
        q_kept = q[row, ids[row][kept]].exp()
        q_buckets = torch.cat([q_kept, (1 - q_kept.sum())[None]])
        expected += (p * (p.log() - q_buckets.log())).sum()
    torch.testing.assert_close(loss, expected / rows, rtol=1e-9, atol=1e-12)


@pytest.fixture(scope="module")
def cache(tiny_llama_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("top-p") / "cache"
    build_cache(str(tiny_llama_dir), pydoc_texts(3), path, seq_len=TRAIN_SEQ_LEN, top_k=16, logprob_dtype="float32",
                progress=False)
    return path


def test_top_p_trains_and_one_leaves_the_targets_alone(cache, fresh_student, tmp_path):
    common = dict(max_steps=2, hard_weight=0.0)
    runs = {}
    for name, top_p in (("none", None), ("one", 1.0), ("half", 0.5)):
        out = tmp_path / name
        train_student(str(fresh_student), out, args_for(out, top_p=top_p, **common), cache=cache)
        runs[name] = read_log(out / "log.jsonl")
    for step in (1, 2):
        assert runs["one"][step]["loss"] == runs["none"][step]["loss"]
    assert abs(runs["half"][1]["loss"] - runs["none"][1]["loss"]) > 1e-3  # --top_p is not ignored


def test_bad_top_p_and_top_p_without_a_ranked_cache_are_refused(tiny_llama_dir, fresh_student, tmp_path):
    for value in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"top_p: expected a probability in \(0, 1\]"):
            DistillationArguments(output_dir=str(tmp_path / "o"), top_p=value)
    sampled = tmp_path / "sampled"
    build_cache(str(tiny_llama_dir), pydoc_texts(2), sampled, seq_len=TRAIN_SEQ_LEN, kind="sampled", samples=8,
                progress=False)
    with pytest.raises(ValueError, match="top_p: the cache .* holds sampled targets"):
        train_student(str(fresh_student), tmp_path / "s", args_for(tmp_path / "s", top_p=0.9), cache=sampled)
    with pytest.raises(ValueError, match="top_p: cuts the entries of a top-K cache; this run has no cache"):
        train_student(str(fresh_student), tmp_path / "on", args_for(tmp_path / "on", top_p=0.9),
                      teacher=str(tiny_llama_dir), data=pydoc_texts(2), seq_len=TRAIN_SEQ_LEN)


def test_the_held_out_objective_reads_the_nucleus_too(tiny_cache, fresh_student, tmp_path):
    """`eval_loss` is the training objective, so it trains on the nucleus as training does; the yardstick KL
    beside it keeps every cached entry."""
    from test_eval_objective import HELD_OUT, oracle, trainer_for

    from destila.cache import TopKCache
    from destila.data import collate
    from destila.models import final_hidden_states, output_head
    from destila.targets.truncate import with_top_p

    trainer = trainer_for(tiny_cache, fresh_student, tmp_path / "p", top_p=0.5)
    metrics = trainer.evaluate()
    batch = with_top_p(collate([TopKCache(tiny_cache)[i] for i in range(HELD_OUT)]), 0.5)
    model = trainer.model.eval()
    with torch.no_grad():
        hidden = final_hidden_states(model, batch["input_ids"], position_ids=batch["position_ids"])
        weight, bias = output_head(model)
        nucleus = distill_loss(hidden.flatten(0, 1), weight, batch["topk_ids"].flatten(0, 1),
                               batch["topk_logprobs"].flatten(0, 1), batch["tail_logmass"].flatten(),
                               batch["labels"].flatten(), bias=bias, impl="dense").item()
    assert metrics["eval_loss"] == pytest.approx(nucleus, rel=1e-5)
    assert metrics["eval_kl"] == pytest.approx(oracle(trainer, tiny_cache), rel=1e-5)
    assert abs(metrics["eval_loss"] - metrics["eval_kl"]) > 1e-3
