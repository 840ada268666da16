"""The layer rule of docs/development.md, checked on the source: no upward import, no import circle.

The graph is read from the source with ``ast`` (nothing is imported): an
edge ``a → b`` for every ``import destila.b`` / ``from destila.b import x``
in module ``a``, inside functions too (a lazy import is still an import). The
layers are the ``text`` block under "## Architecture" of docs/development.md,
lowest last, so the map and the code are checked against each other. The
checkout's other package, ``benchmarks/``, is read the same way: it may
import destila, destila never imports it, and no circle runs through either.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "destila"
BENCHMARKS = ROOT / "benchmarks"
MAP = ROOT / "docs" / "development.md"


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(*packages: Path) -> dict[str, dict[str, int]]:
    """``{module: {imported module: first line}}`` for every module under the package folders ``packages``
    (edges only between them).

    ``from destila.a import b`` points at ``destila.a.b`` when that is a module, else at ``destila.a``;
    ``from . import x`` is read from the importing module's package.
    """
    modules = {module_name(p, src): p for src in packages for p in src.rglob("*.py")}
    roots = {src.name for src in packages}

    def known(name: str) -> str:
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for name, path in modules.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or node.level):
                base = name if path.name == "__init__.py" else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = ".".join(part for part in (base if node.level else "", node.module or "") if part)
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] in roots:
                    edges.setdefault(known(target), node.lineno)
        edges.pop(name, None)
        graph[name] = edges
    return graph


def layers(map_text: str) -> dict[str, int]:
    """``{top-level name: rank}`` from the architecture block (one row per line, the highest first)."""
    block = map_text.split("## Architecture", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    rows = [re.findall(r"(?:^|\s)([a-z_]+)(?:/|\.py)(?=\s|$)", line) for line in block.strip().splitlines()]
    rows = [row for row in rows if row]
    return {name: len(rows) - i for i, row in enumerate(rows) for name in row}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def upward_imports(graph: dict, rank: dict[str, int]) -> list[str]:
    """One line per import of a higher layer. The root package (``__version__``, its lazy public names)
    sits in the bottom row and ``__main__`` above ``cli``; a top-level name the map does not list is reported."""
    rank = {**rank, "": min(rank.values()), "__main__": max(rank.values()) + 1}
    found = []
    for module, edges in sorted(graph.items()):
        for target, line in edges.items():
            mine, theirs = _layer(module), _layer(target)
            missing = [name for name in (mine, theirs) if name not in rank]
            if missing:
                found.append(f"{module}: {missing[0]} is in no layer of docs/development.md")
            elif rank[theirs] > rank[mine]:
                found.append(f"{module}:{line} imports {target}, a higher layer ({theirs} over {mine})")
    return found


def circles(graph: dict) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_module_imports_a_higher_layer_or_closes_a_circle():
    graph = import_graph(SRC)
    assert len(graph) > 100  # the whole package was read
    assert upward_imports(graph, layers(MAP.read_text(encoding="utf-8"))) == []
    assert circles(graph) == []


def test_benchmarks_may_import_destila_but_never_the_other_way_and_nothing_closes_a_circle():
    graph = import_graph(SRC, BENCHMARKS)
    assert sum(name.startswith("benchmarks.") for name in graph) > 20  # benchmarks/ was read
    assert any(target.startswith("destila.") for name, edges in graph.items() if name.startswith("benchmarks.")
               for target in edges)
    assert backward_imports(graph) == []
    assert circles(graph) == []


def backward_imports(graph: dict) -> list[str]:
    """One line per import of ``benchmarks`` by a module of ``destila``."""
    return [f"{module}:{line} imports {target}" for module, edges in sorted(graph.items()) if module.startswith("destila")
            for target, line in edges.items() if target.split(".")[0] == "benchmarks"]


def test_every_package_is_on_the_map():
    rank = layers(MAP.read_text(encoding="utf-8"))
    top = {p.name if p.is_dir() else p.stem for p in SRC.iterdir()
           if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and not p.name.startswith("__"))}
    assert top - set(rank) == set()


def test_a_planted_upward_import_and_a_planted_circle_are_found(tmp_path):
    copy = tmp_path / "destila"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    rank = layers(MAP.read_text(encoding="utf-8"))
    assert upward_imports(import_graph(copy), rank) == [] and circles(import_graph(copy)) == []

    loading = copy / "models" / "loading.py"
    original = loading.read_text()
    loading.write_text(original + "\n\ndef _late():\n    from destila.training import trainer\n")
    found = upward_imports(import_graph(copy), rank)
    assert len(found) == 1 and found[0].startswith("destila.models.loading:") and "destila.training.trainer" in found[0]
    loading.write_text(original)

    constants = copy / "constants.py"
    constants.write_text(constants.read_text() + "\nimport destila.io.permissions\n")
    permissions = copy / "io" / "permissions.py"
    permissions.write_text(permissions.read_text() + "\nfrom destila.constants import IGNORE_INDEX\n")
    assert circles(import_graph(copy)) == [["destila.constants", "destila.io.permissions"]]


def test_a_planted_benchmark_import_and_a_planted_benchmark_circle_are_found(tmp_path):
    src, benchmarks = tmp_path / "destila", tmp_path / "benchmarks"
    shutil.copytree(SRC, src, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(BENCHMARKS, benchmarks, ignore=shutil.ignore_patterns("__pycache__", "results", "gpu"))
    assert backward_imports(import_graph(src, benchmarks)) == [] and circles(import_graph(src, benchmarks)) == []

    report = src / "demo" / "report.py"
    report.write_text(report.read_text() + "\n\ndef _late():\n    from benchmarks import make_docs\n")
    found = backward_imports(import_graph(src, benchmarks))
    assert len(found) == 1 and found[0].startswith("destila.demo.report:") and "benchmarks.make_docs" in found[0]

    efficiency = benchmarks / "data_efficiency.py"
    efficiency.write_text(efficiency.read_text() + "\n\ndef _late():\n    from . import quality_fresh\n")
    assert circles(import_graph(src, benchmarks)) == [["benchmarks.data_efficiency", "benchmarks.quality_fresh"]]
