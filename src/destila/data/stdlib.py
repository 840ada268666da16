"""The ``stdlib`` corpus: the Python standard library's own source, present in every CPython, offline.

Each document is one module's source file, as it is on disk: code with its
docstrings and comments (text the embedded teacher, trained on Python code,
knows well; the docstrings alone would be the prose ``pydoc`` already holds).
About 2.6 million SmolLM2 tokens on CPython 3.11 (docs/data.md gives the count
and the command that measures it).

What is read: every ``.py`` file under ``sysconfig.get_paths()["stdlib"]``
except test code (any folder named ``test``, ``tests`` or ``idle_test``),
``site-packages``, ``pydoc_data`` (the ``pydoc`` corpus, kept apart so the two
never overlap) and ``encodings`` (mostly generated code-page tables).

The held-out split is fixed by top-level package, so a package's modules are
never on both sides: a module is held out when the first 8 hex digits of the
SHA-256 of its top-level name (``email`` for ``email.mime.text``), read as an
integer, are divisible by :data:`HELDOUT_EVERY`. Within a split, documents
are ordered by the SHA-256 of the dotted module name, so any prefix (a
``--max-tokens`` budget) is an even sample of modules rather than those whose
names start with ``a``. Both rules depend on names only: a module keeps its
side and its rank on every Python version that has it.

Naive equivalent::

    files = [p for p in Path(stdlib).rglob("*.py") if not excluded(p)]
    held_out = [f for f in files if int(sha256(top_level(f)).hexdigest()[:8], 16) % 10 == 0]
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from pathlib import Path

STDLIB = "stdlib"
"""The data name that stands for the standard library's source (this module)."""

SPLITS = ("train", "test")
HELDOUT_EVERY = 10
# Folders never read: test code, installed packages, the pydoc corpus, generated codec tables.
EXCLUDED_FOLDERS = frozenset(("test", "tests", "idle_test", "site-packages", "pydoc_data", "encodings", "__pycache__"))


def stdlib_root() -> Path:
    """The folder of the running interpreter's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def module_name(path: Path, root: Path) -> str:
    """``email.mime.text`` for ``root/email/mime/text.py``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _hash(name: str) -> int:
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)


def is_held_out(module: str) -> bool:
    """Whether ``module`` (a dotted name) belongs to the held-out (``test``) split: by its top-level name."""
    return _hash(module.split(".")[0]) % HELDOUT_EVERY == 0


def stdlib_files(split: str = "train", root: Path | None = None) -> list[tuple[str, Path]]:
    """``(module name, path)`` of ``split``'s modules, in the split's fixed order (by hash of the name)."""
    if split not in SPLITS:
        raise ValueError(f"data: {STDLIB} has the splits {' and '.join(SPLITS)} (held out by module), not "
                         f"{split!r}; pass --split train or --split test")
    root = stdlib_root() if root is None else root
    files = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d not in EXCLUDED_FOLDERS)  # never descend into them
        files += [Path(folder) / name for name in names if name.endswith(".py")]
    named = [(module_name(path, root), path) for path in files]
    wanted = split == "test"
    chosen = [(name, path) for name, path in named if is_held_out(name) == wanted]
    return sorted(chosen, key=lambda item: (hashlib.sha256(item[0].encode()).hexdigest(), item[0]))


def read_module(path: Path) -> str:
    """A module's source as text (the few stdlib files with bytes that are not UTF-8 keep them as escapes)."""
    return path.read_bytes().decode("utf-8", errors="backslashreplace")


def stdlib_texts(split: str = "train") -> list[str]:
    """The source of ``split``'s modules, in the split's order (small uses; the token store streams them)."""
    return [read_module(path) for _, path in stdlib_files(split)]


def stdlib_identity(split: str) -> list:
    """What identifies the corpus without reading it: the library's folder, its files' count and total size."""
    files = stdlib_files(split)
    return [STDLIB, split, str(stdlib_root()), len(files), sum(path.stat().st_size for _, path in files)]


def stdlib_records(text_field: str = "text", split: str = "train"):
    """A ``datasets.Dataset`` of ``{text_field: source}`` rows, written to Arrow a module at a time."""
    # datasets is heavy: only when the stdlib corpus is read
    import datasets

    files = stdlib_files(split)

    def rows(paths, sizes):
        for path in paths:
            text = read_module(Path(path))
            if text.strip():  # a few package __init__.py files are empty
                yield {text_field: text}

    # gen_kwargs are part of datasets' cache fingerprint: another folder, file list or file size is another dataset.
    paths = [str(path) for _, path in files]
    sizes = [Path(path).stat().st_size for path in paths]
    return datasets.Dataset.from_generator(rows, gen_kwargs={"paths": paths, "sizes": sizes},
                                           features=datasets.Features({text_field: datasets.Value("string")}))
