"""The package never imports another distillation library: the peers' adapters live in benchmarks/peers."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PEER_PACKAGES = {"trl", "torchtune", "liger_kernel"}


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_module_of_the_package_imports_a_peer():
    offenders = {str(p.relative_to(ROOT)): sorted(_imported(p) & PEER_PACKAGES)
                 for p in (ROOT / "src" / "destila").rglob("*.py") if _imported(p) & PEER_PACKAGES}
    assert offenders == {}


def test_the_peer_adapters_do_import_them():
    """The check above looks in the right place: the adapters beside the package are found by it."""
    found = set().union(*(_imported(p) for p in (ROOT / "benchmarks" / "peers").glob("*.py")))
    assert PEER_PACKAGES <= found


def test_the_package_does_not_import_the_benchmarks():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "src" / "destila").rglob("*.py")
                 if "benchmarks" in _imported(p)]
    assert offenders == []
