"""destila's own harness tasks: offline, built from text every CPython ships.

``BUILT_IN_TASKS`` maps a name usable in ``destila eval --tasks`` to the
function that writes the task (YAML + data) and returns its YAML's path.
"""

from destila.eval.tasks.pydoc_cloze import build_pydoc_cloze, cloze_questions, held_out_topics

BUILT_IN_TASKS = {"pydoc_cloze": build_pydoc_cloze}

__all__ = ["BUILT_IN_TASKS", "build_pydoc_cloze", "cloze_questions", "held_out_topics"]
