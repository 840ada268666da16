"""Refuse a local multiple-choice task the harness cannot score as written, before any model runs.

The harness scores a question whose answer is not among its choices as
wrong and only logs "Label index was not in within range of available
choices", so a task file whose ``doc_to_target`` gives a text that is not
one of ``doc_to_choice`` (or an index past the last choice) reports an
accuracy of 0 that reads like a result; a question whose ``doc_to_choice``
gives no list (``choices: 5``) or an empty one fails deep inside it. The
harness's own rule, checked here question by question: the choices are a
non-empty list of texts, and an answer is a choice's index
(``0 <= answer < len(choices)``), the text of one of the choices, or a list
of such indices.

Naive equivalent, per local task::

    for doc in task.eval_docs:
        answer, choices = task.doc_to_target(doc), task.doc_to_choice(doc)
        assert isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices)
        assert answer in range(len(choices)) or answer in choices
"""

from __future__ import annotations

_SHOWN = 60  # characters of a value quoted in a message (a choice may be a megabyte)


def cut(text: str) -> str:
    """``text`` cut to a readable length, saying how long it was."""
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}… ({len(text):,} characters)"


def shown(value) -> str:
    """``repr(value)``, cut to a readable length."""
    return cut(repr(value))


def choices_fault(choices) -> str | None:
    """Why ``choices`` (what ``doc_to_choice`` gave) are not a non-empty list of texts; None when they are."""
    if not isinstance(choices, list):
        return f"doc_to_choice gave {shown(choices)} ({type(choices).__name__}), not a list of choices"
    if not choices:
        return "doc_to_choice gave an empty list of choices"
    for number, choice in enumerate(choices):
        if not isinstance(choice, str):
            return f"choice {number} is {shown(choice)} ({type(choice).__name__}), not a text"
    return None


def answer_fault(answer, choices: list) -> str | None:
    """Why ``answer`` names none of ``choices`` under the harness's rule; None when it names one."""
    fault = choices_fault(choices)
    if fault is not None:
        return fault
    answers = answer if isinstance(answer, list) else [answer]
    for one in answers:
        if isinstance(one, bool) or not isinstance(one, (int, str)):
            return f"the answer {shown(one)} is neither a choice's index nor its text"
        if isinstance(one, int) and not 0 <= one < len(choices):
            return f"the answer index {one} is outside its {len(choices)} choices"
        if isinstance(one, str) and one not in choices:
            return f"the answer {shown(one)} is not one of its choices {shown(choices)}"
    return None


def multiple_choice(task) -> bool:
    """A task whose questions are scored by their choices (one context, several continuations)."""
    return getattr(task, "OUTPUT_TYPE", None) == "multiple_choice" and not getattr(task, "multiple_input", False)


def check_answers(tasks: list) -> None:
    """Raise ``ValueError`` (one line) at the first question of a multiple-choice task among ``tasks`` (the
    harness's loaded tasks) whose choices or answer it cannot score, with how many questions are like it."""
    for task in tasks:
        if not multiple_choice(task):
            continue
        faults = [(number, fault) for number, doc in enumerate(task.eval_docs)
                  if (fault := answer_fault(task.doc_to_target(doc), task.doc_to_choice(doc)))]
        if faults:
            number, fault = faults[0]
            raise ValueError(
                f"--tasks: task {task.config.task}: question {number}: {fault} ({len(faults)} of "
                f"{len(task.eval_docs)} questions are like it; the harness cannot score them as meant); make "
                "doc_to_choice give a list of texts and doc_to_target a choice's index (from 0) or its exact text")
