"""The docs hold together: every relative link resolves, the README stays short, generated tables are current."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 300

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the target stops at whitespace or ")" (an optional "title" may follow).
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_INLINE_CODE = re.compile(r"(`+).*?\1")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code removed (links there are not links)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        lines.append("" if fenced else _INLINE_CODE.sub("", line))
    return lines


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays, its target goes
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, with GitHub's -1, -2 suffixes for repeated headings."""
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if not match:
            continue
        slug = github_anchor(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(doc: Path, root: Path) -> list[str]:
    """``"doc:line: target (why)"`` for each relative link of ``doc`` that does not resolve inside ``root``."""
    problems = []
    for number, line in enumerate(prose_lines(doc.read_text(encoding="utf-8")), start=1):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            where = f"{doc.relative_to(root)}:{number}: {target}"
            file_part, _, fragment = target.partition("#")
            resolved = (doc.parent / file_part).resolve() if file_part else doc
            if root.resolve() not in (resolved, *resolved.parents):
                problems.append(f"{where} (points outside the repository)")
            elif not resolved.exists():
                problems.append(f"{where} (no such file)")
            elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                problems.append(f"{where} (no heading with anchor #{fragment} in {resolved.name})")
    return problems


def docs_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_relative_link_resolves():
    problems = [problem for doc in docs_files() for problem in broken_links(doc, ROOT)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference material into docs/"


def test_the_docs_exist():
    names = {path.name for path in (ROOT / "docs").glob("*.md")}
    assert {"cache.md", "loss.md", "training.md", "eval.md", "benchmarks.md", "gpu.md",
            "development.md"} <= names


def test_link_checker_finds_broken_files_and_anchors(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Title\n\n## The loss: `fused` (default)\n\n## Repeat\n\n## Repeat\n")
    doc = tmp_path / "README.md"
    doc.write_text(
        "# Top\n\n"
        "[ok](docs/a.md) [ok](docs/a.md#the-loss-fused-default) [ok](docs/a.md#repeat-1) [ok](#top)\n"
        "[missing file](docs/b.md) [missing anchor](docs/a.md#nothing) [outside](../x.md) [self](#nope)\n"
        "`[in code](docs/none.md)` [web](https://example.org/x.md)\n"
        "```\n[in a block](docs/none.md)\n```\n")
    problems = broken_links(doc, tmp_path)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "docs/b.md (no such file)",
        "docs/a.md#nothing (no heading with anchor #nothing in a.md)",
        "../x.md (points outside the repository)",
        "#nope (no heading with anchor #nope in README.md)",
    ]


# ---------------------------------------------------------------- generated tables

def _make_docs():
    """benchmarks/make_docs.py as a module (a script, not part of the package)."""
    name = "destila_benchmarks_make_docs"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "make_docs.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the file runs
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_generated_tables_are_up_to_date():
    """Running benchmarks/make_docs.py would leave every doc unchanged."""
    stale = [str(path.relative_to(ROOT)) for path, text in _make_docs().render_docs().items()
             if path.read_text(encoding="utf-8") != text]
    assert not stale, f"run `python benchmarks/make_docs.py`: stale generated tables in {stale}"


def _copy_of_the_docs(tmp_path: Path, make_docs) -> None:
    for doc in {table.doc for table in make_docs.TABLES.values()}:
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / doc, tmp_path / doc)
    shutil.copytree(ROOT / make_docs.RESULTS, tmp_path / make_docs.RESULTS)


def test_a_hand_edited_table_is_restored_from_the_results(tmp_path):
    make_docs = _make_docs()
    _copy_of_the_docs(tmp_path, make_docs)
    doc = tmp_path / "docs" / "benchmarks.md"
    original = doc.read_text(encoding="utf-8")
    start = original.index("<!-- table:loss-cpu -->")
    row = original.index("| 16384 |", start)
    edited = original[:row] + "| 16384 | 0.01 |" + original[original.index("\n", row):]
    doc.write_text(edited, encoding="utf-8")
    assert make_docs.render_docs(tmp_path)[doc] == original


def test_markers_and_registry_must_agree(tmp_path):
    make_docs = _make_docs()
    _copy_of_the_docs(tmp_path, make_docs)
    doc = tmp_path / "docs" / "benchmarks.md"
    text = doc.read_text(encoding="utf-8")
    doc.write_text(text.replace("<!-- table:e2e-cpu -->", "<!-- moved -->"), encoding="utf-8")
    with pytest.raises(ValueError, match="e2e-cpu"):
        make_docs.render_docs(tmp_path)
    doc.write_text(text + "\n<!-- table:no-such-table -->\n<!-- /table:no-such-table -->\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no-such-table"):
        make_docs.render_docs(tmp_path)


def _table_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of each row of the first table under ``heading`` (a ``## `` line)."""
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [re.split(r"(?<!\\)\|", line.strip("|"))[0:2] for line in rows[1:]]  # the header line left out


def cli_verbs() -> list[tuple[str, str | None]]:
    """``(command, verb)`` for every verb of every command the real parser has (``verb`` None: it has none)."""
    import argparse

    from destila.cli import main as cli_main

    def verbs(parser) -> dict:
        return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})

    return [(name, verb) for name, sub in verbs(cli_main.build_parser()).items() for verb in (list(verbs(sub)) or [None])]


def missing_verbs(readme: str, found: list[tuple[str, str | None]]) -> list[str]:
    commands = [cells[0] for cells in _table_rows(readme, "Commands")]
    return [f"destila {name}" + (f" {verb}" if verb else "") for name, verb in found
            if not any(f"destila {name}" in cell and (verb is None or re.search(rf"(?<![\w-]){verb}(?![\w-])", cell))
                       for cell in commands)]


def test_every_command_and_verb_is_in_the_readme_table():
    found = cli_verbs()
    assert ("student", "tokenizer") in found and ("train", None) in found  # the parser was read
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert missing_verbs(readme, found) == []
    assert missing_verbs(readme, [*found, ("student", "graft")]) == ["destila student graft"]  # a new verb is caught


def test_every_docs_page_is_in_the_readme_index():
    rows = _table_rows((ROOT / "README.md").read_text(encoding="utf-8"), "Documentation")
    listed = {m for cells in rows for m in re.findall(r"\]\((docs/[\w-]+\.md)\)", cells[0])}
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert len(pages) > 10 and pages - listed == set()
