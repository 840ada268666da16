"""The codec promise, read from the source: only ``cache/kinds`` and ``cache/encodings`` know kinds and encodings.

Everywhere else code asks :func:`~destila.cache.kinds.kind_of` or
:func:`~destila.cache.encodings.encoding_of` for the object and calls it. So
outside those two packages no comparison (``==``, ``!=``, ``in``, ``not in``)
may have a kind's or an encoding's name as a literal operand, and no shard's
tensors may be probed by name (``"loss_mask" in handle.keys()``) to tell the
encoding.
"""

from __future__ import annotations

import ast
from pathlib import Path

from destila.cache.encodings import ENCODINGS
from destila.cache.kinds import KINDS

SRC = Path(__file__).resolve().parents[2] / "src" / "destila"
CODECS = (SRC / "cache" / "kinds", SRC / "cache" / "encodings")
NAMES = set(KINDS) | set(ENCODINGS)


def _literals(node) -> set[str]:
    """The string constants of a comparison operand (a tuple, list or set of them counts)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {v for element in node.elts for v in _literals(element)}
    return set()


def _probes_keys(node) -> bool:
    """``... in X.keys()`` where X is a shard's safetensors handle."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "keys"
            and "handle" in ast.unparse(node.func.value))


def codec_branches(src: Path, names=NAMES, codecs=CODECS) -> list[str]:
    """``path:line: code`` for each comparison outside ``codecs`` that names a kind or encoding, or probes a
    shard's tensor names."""
    found = []
    for path in sorted(src.rglob("*.py")):
        if any(folder in path.parents for folder in codecs):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            named = set().union(*map(_literals, operands)) & names
            if named or any(_probes_keys(op) for op in node.comparators):
                found.append(f"{path.relative_to(src)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_code_outside_the_codecs_compares_a_kind_or_encoding_name():
    assert NAMES >= {"topk", "sampled", "plain", "compact"}
    assert codec_branches(SRC) == []


def test_a_planted_name_comparison_and_key_probe_are_found(tmp_path):
    planted = tmp_path / "destila" / "cache"
    planted.mkdir(parents=True)
    (planted / "spec.py").write_text(
        "def f(spec, m, handle):\n"
        "    if spec.targets.kind != 'topk':\n"
        "        return m.encoding in ('plain',)\n"
        "    return 'loss_mask' in handle.keys()\n"
        "KIND = 'topk'  # naming a kind is fine; comparing with it is not\n"
    )
    codecs = (tmp_path / "destila" / "cache" / "kinds", tmp_path / "destila" / "cache" / "encodings")
    found = codec_branches(tmp_path / "destila", codecs=codecs)
    assert sorted(line.split(":")[1] for line in found) == ["2", "3", "4"], found
