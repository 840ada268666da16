"""Local harness tasks built before any model runs, and their choices measured against each model's length.

The harness builds a task from its data and tries its first question at
once; a task whose data hold no documents, or whose first question's
choices are not a list of texts, fails there with whatever its code raises
(``StopIteration``, ``IndexError``, ``TypeError``). A choice longer than a
model reads fails later, on an assertion, once the model has run. Both are
turned into one line naming the task, before anything is scored.

Naive equivalent::

    tasks = TaskManager(include_path=FOLDERS).load(LOCAL_TASKS)["tasks"].values()
    for doc in task.eval_docs:
        assert all(len(model.tok_encode(task.config.target_delimiter + c)) <= model.max_length
                   for c in task.doc_to_choice(doc))
"""

from __future__ import annotations

from destila.eval.task_answers import choices_fault, cut, multiple_choice

_FIX = ("make its data hold one document per line, doc_to_choice give a non-empty list of texts and doc_to_target "
        "a choice's index (from 0) or its text (docs/eval.md shows the format)")
# Tokens a text of n UTF-8 bytes can encode to, at most n + this: every token of a byte-level or byte-fallback
# tokenizer covers a byte or more, plus a beginning-of-text token and a word-start mark.
_TOKENS_BEYOND_BYTES = 4


def load_local_tasks(names: list[str], manager) -> list:
    """The leaf tasks (groups expanded) of ``names`` as the harness builds them; a task it cannot build from its
    data is refused in one line that names it (``ValueError``)."""
    tasks = []
    for name in names:
        try:
            tasks += list(manager.load([name])["tasks"].values())
        except Exception as err:  # the harness's code on the user's data: whatever it raises is about them
            raise ValueError(f"--tasks: {name}: the harness cannot build the task from its data "
                             f"({_what_failed(err)}); {_FIX}") from err
    return tasks


def _what_failed(err: Exception) -> str:
    if isinstance(err, StopIteration) or "out of range for dataset of size 0" in str(err):
        return "its data hold no documents"
    return f"its first question fails: {type(err).__name__}: {cut(str(err)) or '(no message)'}"


def check_choice_lengths(tasks: list, wrapped, model: str) -> None:
    """Refuse (``ValueError``, one line) a choice of a multiple-choice task in ``tasks`` longer than the harness's
    model ``wrapped`` (its ``HFLM``) reads: the harness asserts each scored continuation fits ``max_length``."""
    limit = int(wrapped.max_length)
    for task in tasks:
        if not multiple_choice(task):
            continue
        delimiter = task.config.target_delimiter or ""
        for number, doc in enumerate(task.eval_docs):
            choices = task.doc_to_choice(doc)
            if choices_fault(choices) is not None:
                continue  # refused already by check_answers
            for index, choice in enumerate(choices):
                text = delimiter + choice
                if len(text.encode("utf-8")) + _TOKENS_BEYOND_BYTES <= limit:
                    continue  # fits without encoding it
                length = len(wrapped.tok_encode(text))
                if length > limit:
                    raise ValueError(
                        f"--tasks: task {task.config.task}: question {number}: choice {index} is {length:,} tokens "
                        f"long ({len(choice):,} characters), and {model} reads at most {limit:,}; shorten the "
                        "task's choices or leave the question out")
