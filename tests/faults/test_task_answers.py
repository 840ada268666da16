"""A local multiple-choice task whose answers are not among its choices is refused, not scored as 0 accuracy."""

import json

import pytest
from fault_helpers import destila_in_process, error_line, student  # noqa: F401

from destila.eval.task_answers import answer_fault


def _task(tmp_path, answers: list) -> str:
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"context": "a b", "choices": ["x", "y"], "answer": a}) + "\n"
                            for a in answers))
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


def test_the_harness_rule_for_answers():
    assert answer_fault(1, ["x", "y"]) is None and answer_fault("y", ["x", "y"]) is None
    assert answer_fault([0, 1], ["x", "y"]) is None
    assert "outside" in answer_fault(-1, ["x", "y"]) and "outside" in answer_fault([0, 5], ["x", "y"])
    assert "neither" in answer_fault(1.0, ["x", "y"]) and "neither" in answer_fault(True, ["x", "y"])
