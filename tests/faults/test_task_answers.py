"""A local multiple-choice task the harness cannot score as written is refused in one line: answers not among its
choices (not scored as 0 accuracy), no documents, choices that are no list of texts, a choice longer than the model
reads (none of them a traceback from inside the harness)."""

import json

import pytest
from fault_helpers import destila_in_process, error_line, student  # noqa: F401

from destila.eval.task_answers import answer_fault


def _task(tmp_path, answers: list, rows: list[dict] | None = None) -> str:
    data = tmp_path / "mine.jsonl"
    rows = [{"context": "a b", "choices": ["x", "y"], "answer": a} for a in answers] if rows is None else rows
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    task = tmp_path / "mine.yaml"
    task.write_text(f"task: mine\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
                    "test_split: test\noutput_type: multiple_choice\ndoc_to_text: '{{context}}'\n"
                    "doc_to_choice: '{{choices}}'\ndoc_to_target: answer\n"
                    "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n")
    return task


@pytest.mark.parametrize("answers, needle", [
    (["y", "z", "z"], "question 1: the answer 'z' is not one of its choices ['x', 'y'] (2 of 3 questions"),
    ([0, 2], "question 1: the answer index 2 is outside its 2 choices (1 of 2 questions"),
])
def test_a_task_whose_answer_is_not_a_choice_is_refused_before_any_model_runs(student, tmp_path, answers, needle):
    result = destila_in_process("eval", student, "--tasks", _task(tmp_path, answers), "--limit", "2")
    error_line(result, "eval", 2, f"--tasks: task mine: {needle}", "doc_to_target")
    assert "tasks: model 1/1" not in result.stdout  # refused before the model was loaded


GOOD = {"context": "a b", "choices": ["x", "y"], "answer": 0}


@pytest.mark.parametrize("rows, needle", [
    ([], "mine.yaml: the harness cannot build the task from its data (its data hold no documents)"),
    ([{**GOOD, "choices": []}], "mine.yaml: the harness cannot build the task from its data (its first question"),
    ([{**GOOD, "choices": 5}], "mine.yaml: the harness cannot build the task from its data (its first question"),
    ([GOOD, {**GOOD, "choices": []}], "task mine: question 1: doc_to_choice gave an empty list of choices"),
    ([GOOD, {**GOOD, "choices": 5}], "task mine: question 1: doc_to_choice gave 5 (int), not a list of choices"),
], ids=["no documents", "first empty", "first not a list", "second empty", "second not a list"])
def test_a_task_without_documents_or_choices_is_refused_in_one_line(student, tmp_path, rows, needle):
    result = destila_in_process("eval", student, "--tasks", _task(tmp_path, [], rows), "--limit", "2")
    error_line(result, "eval", 2, f"--tasks: {'' if needle.startswith('task') else tmp_path}", needle)
    assert "tasks: model 1/1" not in result.stdout  # refused before the model was loaded


def test_a_choice_longer_than_the_model_reads_is_refused_before_it_is_scored(student, tmp_path):
    rows = [GOOD, {**GOOD, "choices": ["x", "y " * 500_000]}]  # a 1 MB choice
    result = destila_in_process("eval", student, "--tasks", _task(tmp_path, [], rows), "--limit", "2")
    line = error_line(result, "eval", 2, "--tasks: task mine: question 1: choice 1 is ", "reads at most 256")
    assert len(line) < 400, line


def test_a_task_that_runs_python_says_which_file_before_it_runs(student, tmp_path):
    """The harness imports the Python file a `!function` tag names: only the docs said so, nothing at run time."""
    task = _task(tmp_path, [0, 1])
    (tmp_path / "helpers.py").write_text("def keep(dataset):\n    return dataset\n")
    task.write_text(task.read_text() + "process_docs: !function helpers.keep\n")
    result = destila_in_process("eval", student, "--tasks", task, "--limit", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    said = [line for line in result.stderr.splitlines() if "runs Python" in line]
    assert said == [f"--tasks: {task} runs Python: the harness imports {tmp_path / 'helpers.py'} for its !function "
                    "helpers.keep (a task folder is code: run task files you would run as scripts)"], result.stderr
    (tmp_path / "plain").mkdir()
    plain = destila_in_process("eval", student, "--tasks", _task(tmp_path / "plain", [0, 1]), "--limit", "2")
    assert plain.returncode == 0 and "runs Python" not in plain.stderr


def test_the_harness_rule_for_answers():
    assert answer_fault(1, ["x", "y"]) is None and answer_fault("y", ["x", "y"]) is None
    assert answer_fault([0, 1], ["x", "y"]) is None
    assert "outside" in answer_fault(-1, ["x", "y"]) and "outside" in answer_fault([0, 5], ["x", "y"])
    assert "neither" in answer_fault(1.0, ["x", "y"]) and "neither" in answer_fault(True, ["x", "y"])
    assert "not a list" in answer_fault(0, 5) and "empty list" in answer_fault(0, [])
    assert "not a text" in answer_fault(0, ["x", 3])
