"""The folder a run keeps its aligned items in (``--alignment-dir``) must be a folder of its own.

The store (:mod:`~destila.crosstok.store`) writes ``items-*.safetensors``,
an index and the vocabulary map into it, and removes what a killed writer
left there. A folder that belongs to something else (the cache itself, the
student, another model or cache) would get files mixed into it that its own
readers do not expect, and a cleanup there would touch what is not the
store's. So such a folder is refused before anything loads.

Naive equivalent: ``assert folder not in (cache, student)``, which misses a
folder that is another cache's or another model's.
"""

from __future__ import annotations

from pathlib import Path

# Files that say a folder belongs to a cache, an export of one, or a model (transformers, PEFT).
_OWNERS = {"manifest.json": "a cache", "destila_cache.json": "an export of a cache", "config.json": "a model",
           "adapter_config.json": "an adapter"}


def alignment_dir_fault(folder, *, cache=None, student=None) -> str | None:
    """What is wrong with ``folder`` as an alignment folder, else None (see the module docstring)."""
    path = Path(folder).expanduser()
    real = path.resolve()
    for name, given in (("the cache", cache), ("the student", student)):
        if given is not None and _is_local(given) and Path(given).expanduser().resolve() == real:
            return f"{path} is {name}'s own folder"
    for marker, owner in _OWNERS.items():
        if (path / marker).is_file():
            return f"{path} holds {marker}, so it is {owner}'s folder"
    return None


def check_alignment_dir(folder, *, cache=None, student=None) -> None:
    """Raise ``ValueError`` in one line when :func:`alignment_dir_fault` finds a fault."""
    fault = alignment_dir_fault(folder, cache=cache, student=student)
    if fault is not None:
        raise ValueError(f"alignment_dir: {fault}; aligned items go to a folder of their own (or leave "
                         "--alignment-dir out: the run's alignment/ folder)")


def _is_local(source) -> bool:
    return isinstance(source, (str, Path)) and Path(source).expanduser().exists()
