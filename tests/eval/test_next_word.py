"""The built-in next-word tasks: their questions, the files they write, the harness's figures on them, and the
embedded teacher's score."""

import json
import math

import pytest
import yaml

from conftest import requires_real_teacher
from destila.eval.tasks import BUILT_IN_TASKS, HELD_OUT_TEXT, build_next_word, next_word_questions
from destila.eval.tasks.next_word import CHOICES, MIN_WORD_CHARS, QUESTIONS, blanks, task_name
from destila.eval.tasks.pydoc_cloze import prose_runs

TASK = "pydoc_next_word"


@pytest.mark.parametrize("corpus", ["pydoc", "stdlib"])
def test_each_question_is_the_next_word_against_three_of_the_same_length(corpus):
    documents = HELD_OUT_TEXT[corpus]()
    questions = next_word_questions(documents)
    assert len(questions) == QUESTIONS >= 500
    # The harness's standard error of a mean of 0/1 scores is at most sqrt(0.25 / (n - 1)): ≤ 2.5 points.
    assert math.sqrt(0.25 / (len(questions) - 1)) <= 0.025
    runs = [[" ".join(run) for run in prose_runs(doc)] for doc in documents]
    words = {place["word"] for place in blanks(documents)}
    for q in questions:
        true = q["choices"][q["answer"]]
        assert len(q["choices"]) == CHOICES == len(set(q["choices"]))
        assert {len(c) for c in q["choices"]} == {len(true)} and len(true) >= MIN_WORD_CHARS
        assert set(q["choices"]) <= words  # every choice is a word of the held-out text
        # The word that follows, verbatim (then a space, punctuation or the end of the run).
        assert any(f"{q['context']} {true}" in text for text in runs[q["document"]])
    answers = [q["answer"] for q in questions]
    assert min(answers.count(k) for k in range(CHOICES)) > len(questions) / CHOICES / 2  # not always one place


def test_the_same_seed_gives_the_same_questions_and_the_count_is_capped():
    documents = HELD_OUT_TEXT["pydoc"]()
    assert next_word_questions(documents, seed=1) == next_word_questions(documents, seed=1)
    assert next_word_questions(documents, seed=1) != next_word_questions(documents, seed=0)
    everything = next_word_questions(documents, questions=10**6)
    assert QUESTIONS < len(everything) <= len(blanks(documents))  # all askable blanks, in document order
    assert [q["document"] for q in everything] == sorted(q["document"] for q in everything)
    with pytest.raises(ValueError, match="no lower-case word"):
        next_word_questions(["Short. Text."])
    with pytest.raises(ValueError, match="expected at least 1 question, found 0"):
        next_word_questions(documents, questions=0)


def test_the_stdlib_task_asks_of_the_held_out_modules_docstrings_only():
    import colorsys
    import logging

    from destila.data.stdlib import is_held_out, stdlib_files

    documents = HELD_OUT_TEXT["stdlib"]()
    held_out, trained = (len(stdlib_files(split)) for split in ("test", "train"))
    assert 0 < len(documents) <= held_out < trained
    assert not any(line.lstrip().startswith(">>>") for doc in documents for line in doc.splitlines())
    text = "\n".join(documents)
    assert is_held_out("logging") and logging.__doc__.strip().splitlines()[0] in text
    assert not is_held_out("colorsys") and colorsys.__doc__.strip().splitlines()[0] not in text


def test_every_held_out_corpus_has_its_task(tmp_path):
    assert {task_name(corpus) for corpus in HELD_OUT_TEXT} == {"pydoc_next_word", "stdlib_next_word"}
    assert {task_name(corpus) for corpus in HELD_OUT_TEXT} <= set(BUILT_IN_TASKS)
    task = BUILT_IN_TASKS[TASK](tmp_path / "task")
    config = yaml.safe_load(task.read_text())
    assert config["task"] == TASK and config["output_type"] == "multiple_choice"
    assert [m["metric"] for m in config["metric_list"]] == ["acc"]  # equal lengths: acc_norm would say the same
    rows = [json.loads(line) for line in open(config["dataset_kwargs"]["data_files"]["test"])]
    assert rows == next_word_questions(HELD_OUT_TEXT["pydoc"]())
    assert sorted(p.name for p in task.parent.iterdir()) == [f"{TASK}.jsonl", f"{TASK}.yaml"]
    with pytest.raises(ValueError, match="expected a corpus among pydoc, stdlib, found 'nope'"):
        build_next_word("nope", tmp_path / "other")


@pytest.mark.slow  # the harness twice over 600 questions of a tiny model: about 30 s on 2 busy cores
def test_destila_eval_equals_lm_eval_simple_evaluate(tiny_llama_dir, tmp_path, monkeypatch, capsys):
    import lm_eval
    from lm_eval.tasks import TaskManager

    from destila.cli.main import main as cli

    monkeypatch.setenv("DESTILA_HOME", str(tmp_path / "home"))
    out = tmp_path / "tasks.json"
    with pytest.raises(SystemExit) as exit_info:
        cli(["eval", str(tiny_llama_dir), "--tasks", TASK, "--batch-size", "8", "--json", str(out)])
    assert exit_info.value.code == 0
    assert f"{TASK}: acc" in capsys.readouterr().out
    (result,) = json.loads(out.read_text())
    folder = tmp_path / "home" / "tasks" / TASK  # where --tasks wrote the task
    direct = lm_eval.simple_evaluate(
        model="hf", model_args={"pretrained": str(tiny_llama_dir), "device": "cpu"},
        tasks=[str(folder / f"{TASK}.yaml")], batch_size=8, log_samples=False,
        task_manager=TaskManager(include_defaults=False, include_path=str(folder)))
    expected, ours = direct["results"][TASK], result["tasks"][TASK]
    assert ours["metrics"]["acc"]["value"] == expected["acc,none"]
    assert ours["metrics"]["acc"]["stderr"] == expected["acc_stderr,none"]
    assert ours["samples"] == QUESTIONS and set(ours["metrics"]) == {"acc"}


@pytest.mark.slow
@pytest.mark.real_model
@requires_real_teacher
@pytest.mark.parametrize("task", [TASK, "stdlib_next_word"])
def test_the_embedded_teacher_is_clearly_above_chance_with_a_small_error_bar(task):
    from destila.eval import task_scores
    from destila.models import embedded_teacher_dir

    (score,) = task_scores(task, [str(embedded_teacher_dir())], batch_size=8)
    assert score["questions"] == QUESTIONS
    assert score["acc_stderr"] <= 0.025
    # "Clearly above" chance (1/4): more than five standard errors above it.
    assert score["acc"] - 5 * score["acc_stderr"] > score["chance"] == 0.25
