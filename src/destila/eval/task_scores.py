"""The built-in cloze task's scores for a few models, as flat records (for reports).

Above :mod:`destila.eval.harness` (it runs the task through it), beside :mod:`destila.eval.tasks` (which the
harness reads for the built-in tasks).
"""

from __future__ import annotations

from destila.eval.harness import TaskEvalSpec, evaluate_tasks
from destila.eval.tasks.pydoc_cloze import CHOICES, TASK_NAME


def pydoc_cloze_scores(models: list[str], limit: int | None = None, *, batch_size: int = 4, device: str = "cpu",
                       log=print) -> list[dict]:
    """``pydoc_cloze`` through the harness for each model, in order.

    Returns per model ``{"model", "acc", "acc_stderr", "acc_norm",
    "acc_norm_stderr", "questions", "chance", "seconds"}``; ``limit`` keeps
    the first ``limit`` questions (all of them by default). Needs the
    ``destila[eval]`` extra. Same as ``destila eval MODELS --tasks pydoc_cloze``.
    """
    results = evaluate_tasks(models, TaskEvalSpec(tasks=TASK_NAME, limit=limit), batch_size=batch_size,
                             device=device, log=log)
    records = []
    for result in results:
        task = result["tasks"][TASK_NAME]
        metrics = task["metrics"]
        records.append({
            "model": result["model"],
            "acc": metrics["acc"]["value"], "acc_stderr": metrics["acc"]["stderr"],
            "acc_norm": metrics["acc_norm"]["value"], "acc_norm_stderr": metrics["acc_norm"]["stderr"],
            "questions": task["samples"], "chance": 1 / CHOICES, "seconds": result["seconds"],
        })
    return records
