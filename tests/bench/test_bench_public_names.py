"""destila.bench reads as a library: benchmarks/ imports only its public names, and every public name exists."""

from __future__ import annotations

import ast
from pathlib import Path

import destila.bench

ROOT = Path(__file__).resolve().parents[2]


def _bench_imports(path: Path) -> list[tuple[str, str]]:
    """``(module, name)`` for every import of destila.bench or destila.eval.measure in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(("destila.bench",
                                                                                       "destila.eval.measure")):
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "*") for alias in node.names if alias.name.startswith("destila.bench")]
    return found


def test_every_public_name_resolves():
    for name in destila.bench.__all__:
        assert getattr(destila.bench, name) is not None, name


def test_benchmarks_import_only_the_public_names():
    offenders = {}
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        bad = [f"{module}:{name}" for module, name in _bench_imports(path)
               if module != "destila.bench" or name not in destila.bench.__all__]
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    assert offenders == {}


def test_the_check_would_catch_a_private_import(tmp_path):
    planted = tmp_path / "lab.py"
    planted.write_text("from destila.bench.loss import _something\nfrom destila.bench import run_isolated\n")
    assert _bench_imports(planted) == [("destila.bench.loss", "_something"), ("destila.bench", "run_isolated")]


def test_the_method_lives_in_the_harness():
    from destila.bench import harness

    assert destila.bench.time_against_floor is harness.time_against_floor
    assert destila.bench.run_isolated is harness.run_isolated
    assert "measurement method" in harness.__doc__
