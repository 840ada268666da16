"""Online distillation against the cache: with K = V the two must be the same computation."""

import pytest

from conftest import pydoc_texts
from destila.cache import build_cache
from destila.data import DataSpec
from destila.training import DistillationArguments, TrainSpec, train_student
from train_helpers import DOCS, SEQ_LEN, read_log


def online_args(out, **overrides):
    options = dict(output_dir=str(out), max_steps=6, per_device_train_batch_size=4, learning_rate=3e-3,
                   logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, seed=3,
                   eval_fraction=0.1, lr_scheduler_type="constant")
    options.update(overrides)
    return DistillationArguments(**options)


@pytest.fixture(scope="module")
def full_vocab_cache(tiny_llama_dir, tiny_tokenizer, tmp_path_factory):
    """K = V in float32: the bucket loss equals the full-vocabulary KL."""
    path = tmp_path_factory.mktemp("full") / "cache"
    build_cache(str(tiny_llama_dir), pydoc_texts(DOCS), path, seq_len=SEQ_LEN, top_k=len(tiny_tokenizer),
                logprob_dtype="float32", progress=False)
    return path


@pytest.mark.parametrize("divergence", ["forward_kl", "reverse_kl"])
def test_cache_with_k_equal_v_follows_online_dense(full_vocab_cache, fresh_student, tiny_llama_dir, tmp_path,
                                                   divergence):
    offline = tmp_path / "offline"
    train_student(TrainSpec(str(fresh_student), offline, online_args(offline, divergence=divergence), cache=full_vocab_cache))
    online = tmp_path / "online"
    train_student(TrainSpec(str(fresh_student), online, online_args(online, divergence=divergence, online_loss="dense"),
                            teacher=str(tiny_llama_dir), data=DataSpec(pydoc_texts(DOCS), seq_len=SEQ_LEN)))
    offline_log, online_log = read_log(offline / "log.jsonl"), read_log(online / "log.jsonl")
    assert sorted(offline_log) == sorted(online_log) == list(range(1, 7))
    # Same sequences, same order, same maths: only float32 rounding differs
    # (the cache's logits come from a separately batched teacher pass).
    for step in offline_log:
        assert offline_log[step]["loss"] == pytest.approx(online_log[step]["loss"], rel=2e-4), step
        assert offline_log[step]["ce"] == pytest.approx(online_log[step]["ce"], rel=2e-4), step


def test_online_topk_matches_a_cache_of_the_same_k(tiny_llama_dir, fresh_student, tmp_path):
    cache = tmp_path / "cache"
    build_cache(str(tiny_llama_dir), pydoc_texts(DOCS), cache, seq_len=SEQ_LEN, top_k=8, logprob_dtype="float32",
                progress=False)
    offline = tmp_path / "offline"
    train_student(TrainSpec(str(fresh_student), offline, online_args(offline, max_steps=3), cache=cache))
    online = tmp_path / "online"
    train_student(TrainSpec(str(fresh_student), online, online_args(online, max_steps=3, online_loss="topk", top_k=8),
                            teacher=str(tiny_llama_dir), data=DataSpec(pydoc_texts(DOCS), seq_len=SEQ_LEN)))
    offline_log, online_log = read_log(offline / "log.jsonl"), read_log(online / "log.jsonl")
    for step in (1, 2, 3):
        assert offline_log[step]["loss"] == pytest.approx(online_log[step]["loss"], rel=2e-4)
