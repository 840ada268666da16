"""Held-out text the built-in tasks are made from: one entry per corpus.

Each entry maps a corpus's data name to a function returning its held-out
documents, the ones training on that corpus leaves out. Every task family
built from held-out text (``<name>_next_word``) gets one task per entry, so
a new corpus needs one line here.
"""

from __future__ import annotations

import ast
import re
import warnings
from typing import Callable

from destila.data.stdlib import stdlib_texts
from destila.eval.tasks.pydoc_cloze import held_out_topics

_DEFINITIONS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def stdlib_held_out_prose() -> list[str]:
    """The prose of the ``stdlib`` corpus's held-out (``test``) modules: their docstrings (module, class and
    function), one document per module, without the paragraphs that hold doctest lines (``>>>``, ``...``).

    The corpus is source code; its prose is what a next-word question can be asked of. Indented blocks in a
    docstring (code examples) stay indented after :func:`ast.get_docstring`'s dedent, so the task's prose
    runs leave them out as they leave out pydoc's.
    """
    documents = []
    for source in stdlib_texts("test"):
        try:
            with warnings.catch_warnings():  # invalid escape sequences of old modules: not ours to report
                warnings.simplefilter("ignore")
                tree = ast.parse(source)
        except SyntaxError:  # a file of another Python's syntax (test data shipped as .py)
            continue
        docstrings = (ast.get_docstring(node) for node in ast.walk(tree) if isinstance(node, _DEFINITIONS))
        paragraphs = [paragraph for docstring in docstrings if docstring
                      for paragraph in re.split(r"\n\s*\n", docstring)
                      if not any(line.lstrip().startswith((">>>", "...")) for line in paragraph.splitlines())]
        if paragraphs:
            documents.append("\n\n".join(paragraphs))
    return documents


HELD_OUT_TEXT: dict[str, Callable[[], list[str]]] = {
    "pydoc": held_out_topics,  # every 5th of Python's documentation topics sorted by name (the demo's split)
    "stdlib": stdlib_held_out_prose,  # the docstrings of the stdlib corpus's held-out packages
}
