"""The built-in cloze task: its questions, the files it writes, and the embedded teacher's score on it."""

import json

import pytest
import yaml

from conftest import requires_real_teacher
from destila.eval.tasks import build_pydoc_cloze, cloze_questions, held_out_topics
from destila.eval.tasks.pydoc_cloze import CHOICES, prose_runs


def test_each_question_has_its_true_next_sentence_and_three_from_other_topics():
    documents = held_out_topics()
    questions = cloze_questions(documents)
    assert len(questions) > 100
    runs = [prose_runs(doc) for doc in documents]
    for q in questions:
        assert len(q["choices"]) == CHOICES == len(set(q["choices"]))
        true = q["choices"][q["answer"]]
        own = [" ".join(run) for run in runs[q["topic"]]]
        assert any(q["context"] + " " + true in text for text in own)  # the sentence that follows, verbatim
        for choice in q["choices"]:
            if choice != true:
                assert not any(choice in text for text in own)  # a distractor never comes from the same topic
    answers = [q["answer"] for q in questions]
    assert min(answers.count(k) for k in range(CHOICES)) > 15  # the true one is not always in the same place


def test_the_held_out_topics_are_every_fifth_sorted_topic():
    from pydoc_data.topics import topics

    names = sorted(topics)
    assert held_out_topics() == [topics[n] for n in names[4::5]]
    assert cloze_questions(held_out_topics(), seed=1) != cloze_questions(held_out_topics(), seed=0)
    assert cloze_questions(held_out_topics(), seed=1) == cloze_questions(held_out_topics(), seed=1)


def test_build_writes_a_harness_task_folder(tmp_path):
    task = build_pydoc_cloze(tmp_path / "task")
    config = yaml.safe_load(task.read_text())
    data = config["dataset_kwargs"]["data_files"]["test"]
    assert config["task"] == "pydoc_cloze" and config["output_type"] == "multiple_choice"
    rows = [json.loads(line) for line in open(data)]
    assert rows == cloze_questions(held_out_topics())
    assert sorted(p.name for p in task.parent.iterdir()) == ["pydoc_cloze.jsonl", "pydoc_cloze.yaml"]


def test_a_task_folder_that_cannot_be_written_is_named_with_what_to_do():
    # /proc refuses new folders even to root: the OS error must name the user's folder and DESTILA_HOME.
    with pytest.raises(OSError) as raised:
        build_pydoc_cloze("/proc/destila-task/pydoc")
    assert "at /proc/destila-task/pydoc, where the built-in task is written" in str(raised.value)
    assert "DESTILA_HOME" in str(raised.value) and ".tmp" not in str(raised.value)


@pytest.mark.slow
@pytest.mark.real_model
@requires_real_teacher
def test_the_embedded_teacher_is_clearly_above_chance():
    from destila.eval import pydoc_cloze_scores
    from destila.models import embedded_teacher_dir

    (score,) = pydoc_cloze_scores([str(embedded_teacher_dir())])
    assert score["questions"] == len(cloze_questions(held_out_topics()))
    # Chance is 1/4; "clearly above" is more than three standard errors above it. acc_norm (per byte) is the
    # figure to judge: plain acc sums the log-likelihood over the choice and so favours short distractors.
    assert score["acc_norm"] - 3 * score["acc_norm_stderr"] > score["chance"] == 0.25
