"""The fresh-token quality table: rows and budgets over seeds, which rows are complete, data efficiency."""

import json
import math
import shutil
import subprocess
import sys

import pytest

from benchmarks.quality_fresh import (BUDGETS, CURVE_BUDGETS, METRICS, ROWS, claim, claimed_elsewhere, evaluate,
                                      fresh_table, status)


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
    assert "| kd+ce | 409,600 | 1 | 2 of 2 (0, 1) | 12.00 (12.00 / 12.00) |" in text
    assert "| pd | – | – | 0 of 2 | not run | – | – | – | – |" in text  # every row shows, run or not
    assert "| ce | 51,200 | 1 | 2 of 2 (0, 1) | 200.00 (200.00 / 200.00) |" in text  # the curves' points too
    assert "| pd | 51,200 |" not in text  # pd runs once per table budget: it has no curve points to miss
    # KD+CE reaches 25.0 exactly at 204,800 tokens: half of CE's.
    assert ("Data efficiency, `kd+ce`: reaches CE's final held-out perplexity (25.00 after 409,600 tokens) with "
            "204,800 tokens, **0.50×** CE's (seeds 0, 1).") in text
    assert "Data efficiency, `pd`: not measurable, the row has not run." in text


def test_a_row_claimed_by_a_live_process_is_left_alone_and_freed_when_it_dies(tmp_path):
    """Two ``fresh-all`` workers share the rows: a (row, seed) whose claim another process holds is skipped, a
    second ``fresh-run`` of it stops with one line, and the claim goes with its holder (killed here)."""
    assert not claimed_elsewhere(tmp_path, "ce", 0)
    held = tmp_path / "runs" / ".ce-seed0.claim"
    held.parent.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from destila.io import exclusive_lock; "
         f"h = exclusive_lock({str(held)!r}, 'busy'); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert claimed_elsewhere(tmp_path, "ce", 0)
        assert not claimed_elsewhere(tmp_path, "ce", 1) and not claimed_elsewhere(tmp_path, "kd+ce", 0)
        with pytest.raises(SystemExit, match="fresh-run: ce seed 0 is being run by another process; wait"):
            claim(tmp_path, "ce", 0)
        mine = claim(tmp_path, "kd+ce", 0)  # a row nobody holds is claimed here
        mine.close()
    finally:
        holder.kill()
        holder.wait()
    assert not claimed_elsewhere(tmp_path, "ce", 0)
    claim(tmp_path, "ce", 0).close()


def test_a_training_run_of_the_row_counts_as_a_claim(tmp_path):
    """`destila train` holds its output folder's .lock while it runs: a run folder of (row, seed) locked by another
    process claims the row, a folder of another seed does not."""
    folders = [tmp_path / "runs" / "pd-seed1-b25600", tmp_path / "runs" / "ce-seed10"]
    for folder in folders:
        folder.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; from destila.io import exclusive_lock; "
         f"h = [exclusive_lock(p, 'busy') for p in {[str(f / '.lock') for f in folders]!r}]; print('held', flush=True); "
         "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert claimed_elsewhere(tmp_path, "pd", 1) and not claimed_elsewhere(tmp_path, "pd", 0)
        assert claimed_elsewhere(tmp_path, "ce", 10) and not claimed_elsewhere(tmp_path, "ce", 1)  # not a prefix
    finally:
        holder.kill()
        holder.wait()
    assert not claimed_elsewhere(tmp_path, "pd", 1) and not claimed_elsewhere(tmp_path, "ce", 10)


def test_a_partial_result_measures_only_what_it_can():
    """Seed 0 only, CE short of its final budget: the table shows what ran, and no data efficiency is made up."""
    partial = records("ce", CE, seeds=(0,), budgets=(25_600,)) + records("kd+ce", KD, seeds=(0,), budgets=(25_600,))
    text = fresh_table(partial)
    assert "| ce | 25,600 | 1 | 1 of 2 (0) | 400.00 |" in text and "| kd+ce | 25,600 | 1 | 1 of 2 (0) | 300.00 |" in text
    assert "| ce | 102,400 | – | 0 of 2 | not reached |" in text
    assert ("Data efficiency, `kd+ce`: not measurable yet: it needs CE's perplexity at 409,600 tokens (for a seed "
            "this row has run); CE has reached 25,600.") in text
    assert "×** CE's" not in text
    # CE complete for seed 0; KD + CE scored to 102,400 and still above CE's final 25.0: not measurable yet.
    slow = {25_600: 300.0, 51_200: 200.0, 102_400: 90.0}
    text = fresh_table(records("ce", CE, seeds=(0,)) + records("kd+ce", slow, seeds=(0,), budgets=tuple(slow)))
    assert ("Data efficiency, `kd+ce`: not measurable yet: CE's final perplexity is 25.00, and the row, scored up to "
            "102,400 tokens, is not there yet (seed 0).") in text
    # Complete and never there: said so. CE's seed 1 is not averaged against a row that has only seed 0.
    never = {b: 30.0 for b in CURVE_BUDGETS}
    ce_seed1 = [dict(r, perplexity=1.0) for r in records("ce", CE, seeds=(1,))]
    text = fresh_table(records("ce", CE, seeds=(0,)) + ce_seed1 + records("kd+ce", never, seeds=(0,)))
    assert ("Data efficiency, `kd+ce`: does not reach CE's final held-out perplexity (25.00) within 409,600 tokens "
            "(seed 0).") in text


def test_each_scored_checkpoint_records_every_metric_the_table_shows(tiny_llama_dir, tiny_cache, tmp_path):
    """The benchmark's scoring on the held-out cache: every metric of the table, from the real evaluation."""
    shutil.copytree(tiny_cache, tmp_path / "cache-heldout")
    scores = evaluate(tmp_path, tiny_llama_dir)
    assert {key for key, _, _ in METRICS} <= set(scores)
    assert scores["tokens"] > 0 and scores["bytes"] > 0 and scores["parameters"] > 0
    assert scores["bits_per_byte"] == pytest.approx(
        math.log(scores["perplexity"]) * scores["tokens"] / (math.log(2) * scores["bytes"]), rel=1e-9)
    assert scores["top1_agreement"] > 0.99 and abs(scores["kl_to_teacher"]) < 1e-3  # the cache's own teacher


def task_records(row, accs, stderr=0.02, task="pydoc_next_word"):
    return [{"row": row, "seed": seed, "budget_tokens": 0 if row == "start" else max(BUDGETS),
             "task": task, "acc": acc, "acc_stderr": stderr, "questions": 600, "chance": 0.25,
             "seconds": 10.0} for seed, acc in enumerate(accs)]


def test_task_table_shows_each_seed_and_says_whether_a_gap_exceeds_the_standard_error():
    from benchmarks.quality_fresh import task_table

    text = task_table(task_records("start", [0.30]) + task_records("ce", [0.50, 0.52])
                      + task_records("kd+ce", [0.56, 0.58]) + task_records("rskd+ce", [0.515]))
    assert "| untrained student | 0 | – | 30.0% ± 2.0% |" in text
    assert "| kd+ce | 409,600 | 2 of 2 (0, 1) | 56.0% ± 2.0% / 58.0% ± 2.0% |" in text
    assert "| pd | 409,600 | 0 of 2 | not reached |" in text
    assert "Task `pydoc_next_word`, 600 questions, chance 25%." in text
    assert "- `kd+ce` against `ce` (seeds 0, 1): +6.0%, more than one standard error (2.0%)." in text
    assert "- `rskd+ce` against `ce` (seeds 0): +1.5%, within one standard error (2.0%)." in text


def test_task_table_gives_each_task_its_own_table_in_the_benchmarks_order():
    from benchmarks.quality_fresh import task_table

    stdlib = task_records("ce", [0.40], task="stdlib_next_word") + task_records("kd+ce", [0.45],
                                                                                task="stdlib_next_word")
    text = task_table(stdlib + task_records("ce", [0.50]) + task_records("kd+ce", [0.51]))
    pydoc, other = text.split("\n\n| row |")
    assert "Task `pydoc_next_word`" in pydoc and "- `kd+ce` against `ce` (seeds 0): +1.0%, within" in pydoc
    assert "Task `stdlib_next_word`" in other and "| ce | 409,600 | 1 of 2 (0) | 40.0% ± 2.0% |" in other
    assert "- `kd+ce` against `ce` (seeds 0): +5.0%, more than one standard error (2.0%)." in other


def test_final_students_are_the_runs_scored_at_the_largest_budget(tmp_path):
    from benchmarks.quality_fresh import final_students

    for folder in ("student", "runs/ce-seed0", "runs/kd+ce-seed0", f"runs/pd-seed1-b{max(BUDGETS)}"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "config.json").write_text("{}")
    scored = records("ce", CE, seeds=(0,)) + records("kd+ce", KD, seeds=(0,), budgets=(25_600,))
    scored += records("pd", KD, seeds=(1,), budgets=BUDGETS)
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in scored))
    found = [(row, seed, folder.relative_to(tmp_path).as_posix()) for row, seed, folder in final_students(tmp_path)]
    # kd+ce stopped at 25,600 tokens: its folder holds no final student yet
    assert found == [("start", 0, "student"), ("ce", 0, "runs/ce-seed0"), ("pd", 1, f"runs/pd-seed1-b{max(BUDGETS)}")]


def test_a_seed_still_running_is_left_out_of_the_data_efficiency():
    # seed 1 of KD + CE stopped at 51,200 tokens: only seed 0, which reached the end, is measured
    text = fresh_table(records("ce", CE) + records("kd+ce", KD, seeds=(0,))
                       + records("kd+ce", KD, seeds=(1,), budgets=(25_600, 51_200)))
    assert ("Data efficiency, `kd+ce`: reaches CE's final held-out perplexity (25.00 after 409,600 tokens) with "
            "204,800 tokens, **0.50×** CE's (seed 0).") in text
