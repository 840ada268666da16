"""A built-in task's scores for a few models, as flat records (for reports).

Above :mod:`destila.eval.harness` (it runs the task through it), beside :mod:`destila.eval.tasks` (which the
harness reads for the built-in tasks).
"""

from __future__ import annotations

from destila.eval.harness import TaskEvalSpec, evaluate_tasks
from destila.eval.tasks import next_word, pydoc_cloze

CHANCE = {pydoc_cloze.TASK_NAME: 1 / pydoc_cloze.CHOICES,
          **{name: 1 / next_word.CHOICES for name in next_word.NEXT_WORD_TASKS}}
"""The accuracy of a random guess on each built-in task."""
ABOUT = {pydoc_cloze.TASK_NAME: "a sentence of a held-out topic; which of 4 sentences comes next",
         **{name: "held-out text up to a word; which of 4 words of the same length comes next"
            for name in next_word.NEXT_WORD_TASKS}}
"""Each built-in task in a few words, for reports."""


def task_scores(task: str, models: list[str], limit: int | None = None, *, batch_size: int = 4,
                device: str = "cpu", log=print) -> list[dict]:
    """The built-in ``task`` through the harness for each model, in order.

    Returns per model ``{"model", "task", "acc", "acc_stderr", "questions",
    "chance", "about", "seconds"}`` (and ``"acc_norm"``, ``"acc_norm_stderr"`` where
    the task reports them); ``limit`` keeps the first ``limit`` questions
    (all of them by default). Needs the ``destila[eval]`` extra. Same as
    ``destila eval MODELS --tasks TASK``.
    """
    if task not in CHANCE:
        raise ValueError(f"task: expected a built-in task ({', '.join(CHANCE)}), found {task!r}")
    results = evaluate_tasks(models, TaskEvalSpec(tasks=task, limit=limit), batch_size=batch_size,
                             device=device, log=log)
    records = []
    for result in results:
        scored = result["tasks"][task]
        record = {"model": result["model"], "task": task, "questions": scored["samples"], "chance": CHANCE[task],
                  "about": ABOUT[task], "seconds": result["seconds"]}
        for metric, value in scored["metrics"].items():
            record[metric], record[f"{metric}_stderr"] = value["value"], value["stderr"]
        records.append(record)
    return records


def pydoc_cloze_scores(models: list[str], limit: int | None = None, *, batch_size: int = 4, device: str = "cpu",
                       log=print) -> list[dict]:
    """:func:`task_scores` of ``pydoc_cloze`` (``acc`` and ``acc_norm``, with their standard errors)."""
    return task_scores(pydoc_cloze.TASK_NAME, models, limit, batch_size=batch_size, device=device, log=log)
