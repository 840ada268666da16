"""The package never imports another distillation library: the peers' adapters live in benchmarks/peers."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PEER_PACKAGES = {"trl", "torchtune", "liger_kernel"}
# Where a peer may be imported, and why: TRL's own dataset-mixture format is read by TRL's code, only when a config
# holds TRL's `datasets:` section; without trl that section is refused in one line, and nothing else needs trl.
OPTIONAL_IMPORTS = {"src/destila/training/trl_datasets.py": {"trl"}}


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_module_of_the_package_imports_a_peer():
    offenders = {}
    for path in (ROOT / "src" / "destila").rglob("*.py"):
        name = str(path.relative_to(ROOT))
        peers = _imported(path) & PEER_PACKAGES - OPTIONAL_IMPORTS.get(name, set())
        if peers:
            offenders[name] = sorted(peers)
    assert offenders == {}


def test_an_optional_peer_import_is_inside_a_function():
    """The allowed imports are made where the feature runs, so importing the package never needs the peer."""
    for name, peers in OPTIONAL_IMPORTS.items():
        tree = ast.parse((ROOT / name).read_text())
        top = {alias.name.split(".")[0] for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
               for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])}
        assert not top & peers, f"{name} imports {sorted(top & peers)} at module level"


def test_the_peer_adapters_do_import_them():
    """The check above looks in the right place: the adapters beside the package are found by it."""
    found = set().union(*(_imported(p) for p in (ROOT / "benchmarks" / "peers").glob("*.py")))
    assert PEER_PACKAGES <= found


def test_the_package_does_not_import_the_benchmarks():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "src" / "destila").rglob("*.py")
                 if "benchmarks" in _imported(p)]
    assert offenders == []
