"""The fresh-token quality table: rows and budgets over seeds, which rows are complete, data efficiency."""

from benchmarks.quality_fresh import BUDGETS, CURVE_BUDGETS, ROWS, fresh_table, status


def records(row, ppl_at, seeds=(0, 1), budgets=CURVE_BUDGETS):
    return [{"row": row, "corpus": "stdlib", "seed": seed, "budget_tokens": b, "steps": b // 1024, "passes": 1.0,
             "perplexity": ppl_at[b], "bits_per_byte": 0.5, "accuracy": 0.4, "top1_agreement": 0.5,
             "kl_to_teacher": 1.0} for seed in seeds for b in budgets]


CE = {25_600: 400.0, 51_200: 200.0, 102_400: 100.0, 204_800: 50.0, 409_600: 25.0}
KD = {25_600: 300.0, 51_200: 100.0, 102_400: 50.0, 204_800: 25.0, 409_600: 12.0}


def test_status_names_complete_partial_and_missing_rows():
    found = status(records("ce", CE) + records("kd+ce", KD, seeds=(0,))
                   + records("pd", KD, budgets=BUDGETS))
    assert found["ce"] == "complete" and found["pd"] == "complete"  # pd: one run per table budget
    assert found["kd+ce"] == "partial: seed 0 to 409,600 tokens"
    assert found["rskd+ce"] == "not run yet"
    assert set(found) == set(ROWS)


def test_table_rows_passes_and_data_efficiency():
    start = [{"row": "start", "corpus": "stdlib", "seed": 0, "budget_tokens": 0, "passes": 0.0, "perplexity": 900.0,
              "bits_per_byte": 2.0, "accuracy": 0.1, "top1_agreement": 0.1, "kl_to_teacher": 3.0}]
    text = fresh_table(start + records("ce", CE) + records("kd+ce", KD))
    assert "| untrained student | 0 | – | – | 900.00 | 2.0000 | 10.00% | 10.00% | 3.000 |" in text
    assert "| kd+ce | 409,600 | 1 | 2 | 12.00 (12.00 / 12.00) |" in text
    assert "| ce | 51,200 |" not in text  # curve budgets are plotted, not tabled
    # KD+CE reaches 25.0 exactly at 204,800 tokens: half of CE's.
    assert ("Data efficiency, `kd+ce`: reaches CE's final held-out perplexity (25.00 after 409,600 tokens) with "
            "204,800 tokens, **0.50×** CE's.") in text
