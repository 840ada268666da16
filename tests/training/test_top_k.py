"""Training at K′ ≤ K from a cache built at K: the first K′ entries and the exact tail of the rest."""

import pytest
import torch
from conftest import TRAIN_SEQ_LEN, pydoc_texts, requires_real_teacher
from test_train import args_for
from train_helpers import read_log

from destila.cache import build_cache
from destila.targets.truncate import truncate_topk
from destila.training import TrainSpec, train_student


def test_truncation_equals_the_top_k_of_the_full_distribution():
    """Float64 oracle: cutting a K = 12 target to K′ = 4 gives the top-4 and log(1 − Σ top-4 p) of the full softmax."""
    torch.manual_seed(0)
    logp = torch.log_softmax(torch.randn(47, 123, dtype=torch.float64) * 3, dim=-1)
    values, ids = logp.topk(12, dim=-1)
    tail12 = logp.scatter(1, ids, -torch.inf).logsumexp(-1)
    cut_ids, cut_lp, cut_tail = truncate_topk(ids, values.float(), tail12.float(), 4)
    values4, ids4 = logp.topk(4, dim=-1)
    assert torch.equal(cut_ids, ids4)
    torch.testing.assert_close(cut_lp, values4.float())
    torch.testing.assert_close(cut_tail.double(), torch.log1p(-values4.exp().sum(-1)), rtol=0, atol=1e-6)
    # Untrained positions (no entries, tail 0) stay untrained; K′ > K is refused.
    empty = truncate_topk(ids[:1], torch.full((1, 12), -torch.inf), torch.zeros(1), 4)
    assert empty[2].item() == 0.0 and torch.isinf(empty[1]).all()
    with pytest.raises(ValueError, match="K′ ≤ K = 12"):
        truncate_topk(ids, values, tail12, 13)


@pytest.fixture(scope="module")
def caches_at_two_k(tiny_llama_dir, tmp_path_factory):
    """The same teacher pass at K = 16 and K = 5, float32 log-probs (so no storage rounding differs)."""
    root = tmp_path_factory.mktemp("top-k")
    for k in (16, 5):
        build_cache(str(tiny_llama_dir), pydoc_texts(3), root / f"k{k}", seq_len=TRAIN_SEQ_LEN, top_k=k,
                    logprob_dtype="float32", progress=False)
    return root / "k16", root / "k5"


def test_k_prime_from_a_larger_cache_trains_as_a_cache_built_at_k_prime(caches_at_two_k, fresh_student, tmp_path):
    big, small = caches_at_two_k
    common = dict(max_steps=3, hard_weight=0.0)
    cut = train_and_log(fresh_student, big, tmp_path / "cut", top_k=5, **common)
    built = train_and_log(fresh_student, small, tmp_path / "built", **common)
    full = train_and_log(fresh_student, big, tmp_path / "full", **common)
    for step in (1, 2, 3):
        assert cut[step]["loss"] == pytest.approx(built[step]["loss"], rel=1e-6)  # float32 rounding of the tail
    assert abs(full[1]["loss"] - cut[1]["loss"]) > 1e-3  # --top_k is not ignored


def train_and_log(student, cache, out, **overrides):
    train_student(TrainSpec(str(student), out, args_for(out, **overrides), cache=cache))
    return read_log(out / "log.jsonl")


def test_k_prime_above_the_cache_k_is_refused(caches_at_two_k, fresh_student, tmp_path):
    _, small = caches_at_two_k
    with pytest.raises(ValueError, match=r"holds K = 5 .* --top_k ≤ 5"):
        train_student(TrainSpec(str(fresh_student), tmp_path / "o", args_for(tmp_path / "o", top_k=6), cache=small))


@pytest.mark.real_model
@requires_real_teacher
def test_embedded_teacher_k20_from_k100_equals_a_k20_cache(tmp_path):
    """The embedded default: training at K′ = 20 from a K = 100 cache gives a K = 20 cache's losses to 1e-6 (relative)."""
    from destila.models import EMBEDDED
    from destila.student import StudentInitSpec, init_student

    for k in (100, 20):
        build_cache(EMBEDDED, "pydoc", tmp_path / f"k{k}", seq_len=64, max_tokens=64 * 8, top_k=k,
                    logprob_dtype="float32", progress=False)
    student = tmp_path / "student"
    init_student(StudentInitSpec(EMBEDDED, student, layers=2))
    common = dict(max_steps=2, per_device_train_batch_size=2, hard_weight=0.0)
    cut = train_and_log(student, tmp_path / "k100", tmp_path / "cut", top_k=20, **common)
    built = train_and_log(student, tmp_path / "k20", tmp_path / "built", **common)
    for step in (1, 2):
        assert cut[step]["loss"] == pytest.approx(built[step]["loss"], rel=1e-6)  # float32: 1 ulp at 46 is 4e-6
