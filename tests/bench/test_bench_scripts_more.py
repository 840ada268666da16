"""More benchmark scripts the docs tell a user to run, run with their defaults at tiny shapes (see
``test_bench_scripts.py``): each produces its rows, and their figures are present, finite and positive.

Here: ``data_rss.py``, ``task_stderr.py`` and ``demo_recipe.py`` (a few seconds each, on the tiny models);
``offline_vs_online.py`` and ``crosstok_quality.py`` (slow: a chain of fresh ``destila`` processes, on the tiny
teacher); ``demo_task_cost.py`` (slow, real_model: the demo's settings are those of the embedded teacher).
"""

from __future__ import annotations

import json
import math

import pytest
from conftest import requires_real_teacher, save_tiny_model


def printed_records(out: str) -> list[dict]:
    """The JSON objects a script printed, one a line (other lines skipped: progress, tables, the Trainer's logs)."""
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"')]


def positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


# --- data_rss.py -------------------------------------------------------------------------------------------------


def test_data_rss_measures_the_data_stage_at_both_corpus_sizes(tiny_llama_dir, tmp_path, monkeypatch, capsys):
    from benchmarks.data_rss import main

    # main points these at its own folders for its workers; monkeypatch puts them back after the test
    for name in ("PYTHONPATH", "HF_DATASETS_CACHE", "DESTILA_DATA_CACHE"):
        monkeypatch.setenv(name, "")
    main(["--base-mb", "1", "--grow", "2", "--max-tokens", "2048", "--teacher", str(tiny_llama_dir),
          "--folder", str(tmp_path)])
    out = capsys.readouterr().out
    small, large = printed_records(out)
    assert small["corpus_bytes"] >= 2**20 and large["corpus_bytes"] >= 2 * 2**20
    for row in (small, large):
        assert row["sequences"] == 2048 // 512  # --seq-len's default
        assert positive(row["peak_rss_bytes"]) and positive(row["seconds"]) and positive(row["store_tokens"])
    assert small["fingerprint"] == large["fingerprint"]
    assert "peak RSS" in out.splitlines()[-1]


# --- task_stderr.py ----------------------------------------------------------------------------------------------


def test_task_stderr_gives_both_standard_errors_for_each_model(tiny_llama_dir, tiny_gpt2_dir, capsys):
    from benchmarks.task_stderr import main

    main([str(tiny_llama_dir), str(tiny_gpt2_dir)])  # as docs/eval.md: the teacher, then a student
    records = printed_records(capsys.readouterr().out)
    assert [r["model"] for r in records] == [str(tiny_llama_dir), str(tiny_gpt2_dir)]
    for r in records:
        assert r["questions"] == 600 and 0 < r["sentences"] < r["questions"]
        assert 0 <= r["acc"] <= 1
        assert all(positive(r[key]) for key in ("stderr_harness", "stderr_binomial", "stderr_by_sentence"))
        assert math.isclose(r["stderr_harness"], r["stderr_binomial"], rel_tol=1e-6)  # the harness's, recomputed


# --- demo_recipe.py ----------------------------------------------------------------------------------------------


@pytest.fixture
def recipe_out(tmp_path, tiny_llama_dir, tiny_tokenizer):
    """What `student_quality.py prepare` and `student init` leave in OUT, from the tiny teacher: the training and
    held-out caches (the demo's split) and a student at the script's default place, ``OUT/students/width``."""
    from destila.cache import build_cache
    from destila.data import pydoc_texts
    from destila.demo import split_documents

    train, held = split_documents(pydoc_texts(), 5)
    for name, texts, tokens in (("cache", train, 512), ("cache-heldout", held, 256)):
        build_cache(str(tiny_llama_dir), texts, tmp_path / name, seq_len=32, max_tokens=tokens, top_k=8,
                    progress=False)
    save_tiny_model(tmp_path / "students" / "width", tiny_tokenizer, seed=1, layers=2)
    return tmp_path


def test_demo_recipe_trains_scores_and_records_one_row(recipe_out, capsys):
    from benchmarks.demo_recipe import main
    from destila.demo.settings import DEMO_PROMPTS

    main([str(recipe_out), "--loss", "kd+ce", "--steps", "2"])
    (printed,) = printed_records(capsys.readouterr().out)
    (row,) = [json.loads(line) for line in (recipe_out / "recipe.jsonl").read_text().splitlines()]
    assert printed == row
    assert row["student"] == str(recipe_out / "students" / "width") and row["steps"] == 2
    assert row["loss"] == "kd+ce" and row["learning_rate"] == 5e-4 and row["seed"] == 0
    assert all(positive(row[key]) for key in ("perplexity", "kl_to_teacher", "tokens", "train_seconds"))
    assert 0 <= row["accuracy"] <= 1 and 0 <= row["top1_agreement"] <= 1
    assert len(row["continuations"]) == len(row["distinct_words"]) == len(DEMO_PROMPTS)
    assert not any((recipe_out / "recipe-runs").glob("*"))  # the trained model is removed once scored


# --- offline_vs_online.py ----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)  # five destila processes
def test_offline_vs_online_trains_both_students_and_compares_them(tiny_llama_dir, tmp_path):
    from benchmarks.offline_vs_online import main

    work = tmp_path / "work"
    main(["--work", str(work), "--steps", "3", "--teacher", str(tiny_llama_dir), "--layers", "2", "--seq-len", "128",
          "--max-tokens", "5120"])
    summary = json.loads((work / "summary.json").read_text())
    assert set(summary) == {"offline fused", "online dense"}
    for run in summary.values():
        assert run["steps"] == 3
        assert all(positive(run[key]) for key in ("median_step_s", "wall_s", "max_rss_bytes"))
    scores = json.loads((work / "eval.json").read_text())
    assert [r["model"].rsplit("/", 1)[-1] for r in scores] == ["offline-fused", "online-dense"]
    assert all(positive(r["kl_to_teacher"]) and positive(r["perplexity"]) and positive(r["tokens"]) for r in scores)


# --- crosstok_quality.py -----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)  # seven destila processes
def test_crosstok_quality_trains_both_arms_and_scores_them_in_bytes(tiny_llama_dir, tmp_path):
    from benchmarks.crosstok_quality import main

    out, record_file = tmp_path / "q", tmp_path / "q.jsonl"
    main(["--out", str(out), "--teacher", str(tiny_llama_dir), "--train-tokens", "2048", "--heldout-tokens", "512",
          "--seq-len", "128", "--seeds", "1", "--epochs", "1", "--json", str(record_file)])
    (record,) = [json.loads(line) for line in record_file.read_text().splitlines()]
    assert set(record["seconds"]) == {"heldout", "train", "tokenizer", "student-seed0", "run-kd+ce-seed0",
                                      "run-ce-seed0", "eval"}
    assert all(positive(seconds) for seconds in record["seconds"].values())
    assert [r["model"].rsplit("/", 1)[-1] for r in record["eval"]] == ["run-kd+ce-seed0", "run-ce-seed0"]
    for r in record["eval"]:
        assert all(positive(r[key]) for key in ("bits_per_byte", "perplexity", "kl_to_teacher", "aligned_rows"))
        assert 0 <= r["top1_agreement"] <= 1


# --- demo_task_cost.py -------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.real_model
@requires_real_teacher
@pytest.mark.timeout(1800)  # the embedded teacher's held-out pass and 600 questions on two models: about 3 minutes
def test_demo_task_cost_times_the_teacher_pass_and_both_models_task(tmp_path, capsys):
    from benchmarks.demo_task_cost import main

    main([str(tmp_path)])
    (record,) = printed_records(capsys.readouterr().out)
    assert record["task"] == "pydoc_next_word"
    assert positive(record["heldout_pass"]["tokens"])
    assert all(positive(record["heldout_pass"][key]) for key in ("cpu_seconds", "seconds"))
    for model in ("teacher", "student"):
        part = record[f"task_{model}"]
        assert part["questions"] == 600 and 0 < part["acc"] < 1 and positive(part["stderr"])
        assert positive(part["cpu_seconds"]) and positive(part["seconds"])
    assert record["task_teacher"]["acc"] > record["task_student"]["acc"]  # the untrained cut is far below
