"""The import rule of docs/development.md, checked on the source: imports sit at the top of a file, unless the import is
heavy or optional, and then a comment says so.

Read with ``ast`` and ``tokenize`` (nothing is imported): every ``import`` / ``from … import`` inside a function of
``src/destila`` needs a comment on its own line(s), or a comment line directly above the first import of its run of
consecutive import lines (one comment covers the run).
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "destila"
IMPORTS = (ast.Import, ast.ImportFrom)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def uncommented_lazy_imports(source: str) -> list[int]:
    """The line of every import inside a function of ``source`` that no comment explains."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    comments = {token.start[0] for token in tokens if token.type == tokenize.COMMENT}
    lines = source.splitlines()

    def comment_line(number: int) -> bool:
        return number >= 1 and lines[number - 1].lstrip().startswith("#")

    found = set()
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, FUNCTIONS):
            continue
        for node in ast.walk(function):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if not isinstance(block, list):
                    continue
                first = None  # the first import of the run the statement belongs to
                for i, statement in enumerate(block):
                    if not isinstance(statement, IMPORTS):
                        first = None
                        continue
                    previous = block[i - 1] if i else None
                    if first is None or previous.end_lineno != statement.lineno - 1:
                        first = statement
                    own = any(n in comments for n in range(statement.lineno, statement.end_lineno + 1))
                    if not own and not comment_line(first.lineno - 1):
                        found.add(statement.lineno)
    return sorted(found)


def test_every_import_inside_a_function_says_why_it_is_not_at_the_top():
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 100  # the whole package was read
    found = [f"{path.relative_to(SRC.parent.parent)}:{line}" for path in files
             for line in uncommented_lazy_imports(path.read_text(encoding="utf-8"))]
    assert found == [], "move these imports to the top, or say why they are heavy or optional:\n" + "\n".join(found)


PLANTED = '''
import json


def load(path):
    import yaml

    return yaml.safe_load(path)


def table(rows):
    # rich is heavy: only when a table is printed
    from rich.console import Console
    from rich.table import Table

    import csv

    return Console, Table, csv


def plot():
    import matplotlib  # heavy: only when a plot is drawn

    return matplotlib
'''


def test_a_planted_uncommented_import_is_found_and_a_commented_one_is_not():
    found = uncommented_lazy_imports(PLANTED)
    lines = PLANTED.splitlines()
    assert [lines[n - 1].strip() for n in found] == ["import yaml", "import csv"]

    commented = PLANTED.replace("    import yaml", "    # pyyaml: only when a file is read\n    import yaml")
    commented = commented.replace("    import csv", "    import csv  # stdlib, but kept here to test a second run")
    assert uncommented_lazy_imports(commented) == []
    assert uncommented_lazy_imports("import yaml\n\n\ndef f():\n    return yaml\n") == []  # top-level imports are fine
