"""The quality benchmark's headline: tokens a loss with the teacher needs to reach the CE-only baseline's final
perplexity, interpolated in log-tokens between budgets, computed from the records `run` writes."""

from __future__ import annotations

import math

from benchmarks.student_quality import data_efficiency, table


def records(row: str, perplexities: dict[int, list[float]]) -> list[dict]:
    return [{"row": row, "seed": seed, "budget_tokens": budget, "steps": budget // 1024, "perplexity": ppl,
             "accuracy": 0.3, "top1_agreement": 0.4, "kl_to_teacher": 1.5}
            for budget, values in perplexities.items() for seed, ppl in enumerate(values)]


CE = records("ce", {4096: [400.0, 400.0], 16384: [160.0, 140.0], 65536: [60.0, 60.0]})


def test_fraction_is_interpolated_in_log_tokens_between_budgets():
    # KD+CE: 100 at 16,384 and 36 at 65,536; 60 lies at t = log(100/60) / log(100/36) of the way in log-tokens.
    kd_ce = records("kd+ce", {4096: [300.0, 300.0], 16384: [100.0, 100.0], 65536: [36.0, 36.0]})
    result = data_efficiency(CE + kd_ce, "kd+ce")
    t = math.log(100 / 60) / math.log(100 / 36)
    expected = math.exp(math.log(16384) + t * math.log(4))
    assert result["ce_ppl"] == 60.0 and result["ce_tokens"] == 65536
    assert math.isclose(result["fraction"], expected / 65536, rel_tol=1e-9)
    assert not result["at_most"]


def test_reached_at_the_first_budget_is_an_upper_bound():
    kd = records("kd", {4096: [59.0, 58.0], 16384: [30.0, 30.0]})
    result = data_efficiency(CE + kd)
    assert result["kd_tokens"] == 4096 and result["at_most"]


def test_table_says_so_when_a_loss_never_reaches_the_baseline():
    kd = records("kd", {4096: [500.0, 480.0], 16384: [150.0, 150.0], 65536: [70.0, 69.0]})
    kd_ce = records("kd+ce", {4096: [300.0, 300.0], 16384: [100.0, 100.0], 65536: [50.0, 52.0]})
    text = table(CE + kd + kd_ce)
    assert "Data efficiency: KD does not reach the CE-only baseline's final perplexity" in text
    assert "Data efficiency: KD + CE reaches the CE-only baseline's final perplexity (60.0 after 65,536 tokens)" in text
    assert "| kd+ce | 65,536 | 64 | 2 | 51.0 (50.0 / 52.0) |" in text


def test_a_baseline_that_gets_worse_with_more_passes_is_also_measured_at_its_best():
    # CE: best 40 at 32,768 tokens, then 50 at 65,536 (repeated data). KD+CE: 80 at 16,384, 30 at 32,768.
    ce = records("ce", {16384: [120.0, 120.0], 32768: [40.0, 40.0], 65536: [50.0, 50.0]})
    kd_ce = records("kd+ce", {16384: [80.0, 80.0], 32768: [30.0, 30.0], 65536: [25.0, 25.0]})
    best = data_efficiency(ce + kd_ce, "kd+ce", against="best")
    t = math.log(80 / 40) / math.log(80 / 30)
    assert best["ce_ppl"] == 40.0 and best["ce_tokens"] == 32768
    assert math.isclose(best["fraction"], math.exp(math.log(16384) + t * math.log(2)) / 32768, rel_tol=1e-9)
    text = table(ce + kd_ce)
    assert "final perplexity (50.0 after 65,536 tokens)" in text
    assert f"Against the baseline's best perplexity (40.0 after 32,768 tokens; later budgets were worse): " \
           f"KD + CE reaches it with {best['kd_tokens']:,} tokens, **{best['fraction']:.2f}×** the baseline's." in text
    assert "best perplexity" not in table(CE + kd_ce)  # a baseline still improving at its last budget: no such line
