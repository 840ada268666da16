"""Held-out text the built-in tasks are made from: one entry per corpus.

Each entry maps a corpus's data name to a function returning its held-out
documents, the ones training on that corpus leaves out. Every task family
built from held-out text (``<name>_next_word``) gets one task per entry, so
a new corpus needs one line here.
"""

from __future__ import annotations

from typing import Callable

from destila.eval.tasks.pydoc_cloze import held_out_topics

HELD_OUT_TEXT: dict[str, Callable[[], list[str]]] = {
    "pydoc": held_out_topics,  # every 5th of Python's documentation topics sorted by name (the demo's split)
}
