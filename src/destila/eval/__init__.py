"""Evaluation: quality, speed and size of models side by side (imports losses, targets, measure; never training)."""

from destila.eval.run import DEFAULT_PROMPT, evaluate_model, evaluate_models
from destila.eval.tables import comparison_rows, markdown_table, render_table

__all__ = ["DEFAULT_PROMPT", "comparison_rows", "evaluate_model", "evaluate_models", "markdown_table",
           "render_table"]
