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
