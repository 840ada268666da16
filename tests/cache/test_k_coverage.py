"""`cache inspect`'s K′ table: covered mass and truncation KL per K′ ≤ K, and the suggested K′."""

import json
import math

import pytest
import torch

from destila.cache import build_cache, inspect_cache
from destila.cache.k_prime import KCoverage, suggest_k
from destila.cli.main import main


def naive_rows(logp: torch.Tensor, K: int, choices) -> dict:
    """Per position, with Python loops: mass of the top-k', and the KL of spreading the rest evenly."""
    V = logp.shape[1]
    out = {}
    for k in choices:
        masses, kls = [], []
        for row in logp.tolist():
            p = sorted((math.exp(x) for x in row), reverse=True)
            top, p_tail = p[:K], sum(p[K:])
            rest = p_tail + sum(top[k:])
            u = rest / (V - k)
            kl = sum(x * math.log(x / u) for x in top[k:]) + (p_tail * math.log(p_tail / (u * (V - K))))
            masses.append(sum(top[:k]))
            kls.append(kl)
        out[k] = (sum(masses) / len(masses), sum(kls) / len(kls))
    return out


def test_table_matches_a_per_position_loop():
    torch.manual_seed(0)
    logp = torch.log_softmax(torch.randn(30, 57, dtype=torch.float64) * 2.5, dim=-1)
    values, _ = logp.topk(12, dim=-1)
    tail = torch.log1p(-values.exp().sum(-1))
    table = KCoverage(12, 57)
    table.add(values[:17].float(), tail[:17].float())  # two batches, as two shards
    table.add(values[17:].float(), tail[17:].float())
    rows = table.rows()
    assert [r["k"] for r in rows] == [1, 2, 5, 10, 12]
    expected = naive_rows(logp, 12, [r["k"] for r in rows])
    for row in rows:
        mass, kl = expected[row["k"]]
        assert row["mass_mean"] == pytest.approx(mass, abs=1e-6)
        assert row["bucket_kl_mean"] == pytest.approx(kl, abs=1e-5)
    assert rows[-1]["bucket_kl_mean"] == pytest.approx(0.0, abs=1e-6)
    assert all(a["bucket_kl_mean"] > b["bucket_kl_mean"] for a, b in zip(rows, rows[1:]))
    assert all(r["mass_p5"] <= r["mass_mean"] for r in rows)


def test_suggestion_names_the_smallest_k_reaching_the_coverage():
    rows = [{"k": 1, "mass_mean": 0.5}, {"k": 5, "mass_mean": 0.91}, {"k": 20, "mass_mean": 0.97}]
    assert "--top_k 5" in suggest_k(rows, 0.9)
    assert "--top_k 20" in suggest_k(rows, 0.95)
    assert "none covers" in suggest_k(rows, 0.99) and "K = 20" in suggest_k(rows, 0.99)


@pytest.fixture(scope="module")
def small_cache(tmp_path_factory, tiny_llama_dir):
    path = tmp_path_factory.mktemp("kcov") / "c"
    build_cache(str(tiny_llama_dir), "pydoc", path, seq_len=32, max_tokens=32 * 6, top_k=24, progress=False)
    return path


def test_inspect_prints_the_table_and_the_suggestion(small_cache, capsys):
    summary = inspect_cache(small_cache)
    rows = summary["stats"]["k_coverage"]
    assert [r["k"] for r in rows] == [1, 2, 5, 10, 20, 24]
    assert rows[-1]["mass_mean"] == pytest.approx(summary["stats"]["topk_mass_mean"], rel=1e-4)
    with pytest.raises(SystemExit) as code:
        main(["cache", "inspect", str(small_cache), "--coverage", str(rows[2]["mass_mean"] - 1e-4)])
    out = capsys.readouterr().out
    assert code.value.code == 0
    assert "K′ coverage" in out and "--top_k 5" in out
    assert "0.0 MiB" not in out and "KiB in shards" in out  # a small cache's size is shown, not rounded to 0
    with pytest.raises(SystemExit):
        main(["cache", "inspect", str(small_cache), "--json"])
    assert json.loads(capsys.readouterr().out)["stats"]["k_suggestion"].startswith("suggested K′")


def test_a_batch_without_trained_positions_adds_nothing():
    logprobs = torch.log_softmax(torch.randn(6, 5, dtype=torch.float64), -1).sort(-1, descending=True).values
    tail = torch.full((6,), -30.0, dtype=torch.float64)
    alone, with_empty = KCoverage(top_k=5, vocab_size=50), KCoverage(top_k=5, vocab_size=50)
    alone.add(logprobs, tail)
    with_empty.add(logprobs[:0], tail[:0])
    assert with_empty.rows() == []
    with_empty.add(logprobs, tail)
    assert with_empty.rows() == alone.rows()
