"""Evaluation: quality, speed and size of models side by side (imports losses, targets, measure; never training),
and task accuracy through lm-evaluation-harness (the optional extra ``destila[eval]``)."""

from destila.eval.harness import TaskEvalSpec, evaluate_tasks
from destila.eval.run import evaluate_model, evaluate_models
from destila.eval.spec import DEFAULT_PROMPT, EvalSpec
from destila.eval.tables import comparison_rows, markdown_table, render_table
from destila.eval.task_scores import pydoc_cloze_scores, task_scores
from destila.eval.task_table import markdown_task_table, render_task_table, task_rows

__all__ = ["DEFAULT_PROMPT", "EvalSpec", "TaskEvalSpec", "comparison_rows", "evaluate_model", "evaluate_models",
           "evaluate_tasks", "markdown_table", "markdown_task_table", "pydoc_cloze_scores", "render_table",
           "render_task_table", "task_rows", "task_scores"]
