"""destila's own harness tasks: offline, built from text every CPython ships.

``BUILT_IN_TASKS`` maps a name usable in ``destila eval --tasks`` to the
function that writes the task (YAML + data) and returns its YAML's path:
``pydoc_cloze`` (which sentence comes next) and one ``<corpus>_next_word``
(which word comes next) per held-out corpus of
:data:`~destila.eval.tasks.sources.HELD_OUT_TEXT`.
"""

from destila.eval.tasks.next_word import NEXT_WORD_TASKS, build_next_word, next_word_questions
from destila.eval.tasks.pydoc_cloze import build_pydoc_cloze, cloze_questions, held_out_topics
from destila.eval.tasks.sources import HELD_OUT_TEXT

BUILT_IN_TASKS = {"pydoc_cloze": build_pydoc_cloze, **NEXT_WORD_TASKS}

__all__ = ["BUILT_IN_TASKS", "HELD_OUT_TEXT", "build_next_word", "build_pydoc_cloze", "cloze_questions",
           "held_out_topics", "next_word_questions"]
