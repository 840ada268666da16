"""Refuse a local multiple-choice task whose answers are not among its choices, before any model runs.

The harness scores such a question as wrong and only logs "Label index was
not in within range of available choices", so a task file whose
``doc_to_target`` gives a text that is not one of ``doc_to_choice`` (or an
index past the last choice) reports an accuracy of 0 that reads like a
result. The harness's own rule, checked here question by question: an
answer is a choice's index (``0 <= answer < len(choices)``), the text of
one of the choices, or a list of such indices.

Naive equivalent, per local task::

    for doc in task.eval_docs:
        answer, choices = task.doc_to_target(doc), task.doc_to_choice(doc)
        assert answer in range(len(choices)) or answer in choices
"""

from __future__ import annotations


def answer_fault(answer, choices: list) -> str | None:
    """Why ``answer`` names none of ``choices`` under the harness's rule; None when it names one."""
    answers = answer if isinstance(answer, list) else [answer]
    for one in answers:
        if isinstance(one, bool) or not isinstance(one, (int, str)):
            return f"the answer {one!r} is neither a choice's index nor its text"
        if isinstance(one, int) and not 0 <= one < len(choices):
            return f"the answer index {one} is outside its {len(choices)} choices"
        if isinstance(one, str) and one not in choices:
            return f"the answer {one!r} is not one of its choices {choices!r}"
    return None


def check_answers(names: list[str], manager) -> None:
    """Raise ``ValueError`` (one line) at the first question of a multiple-choice task in ``names`` whose answer
    names none of its choices, with how many of the task's questions are wrong that way."""
    if not names:
        return
    for task in manager.load(names)["tasks"].values():  # every leaf task, groups expanded
        if getattr(task, "OUTPUT_TYPE", None) != "multiple_choice" or getattr(task, "multiple_input", False):
            continue
        faults = [(number, fault) for number, doc in enumerate(task.eval_docs)
                  if (fault := answer_fault(task.doc_to_target(doc), task.doc_to_choice(doc)))]
        if faults:
            number, fault = faults[0]
            raise ValueError(
                f"--tasks: task {task.config.task}: question {number}: {fault} ({len(faults)} of "
                f"{len(task.eval_docs)} questions are like it; the harness would score them as wrong); make "
                "doc_to_target give a choice's index (from 0) or its exact text")
