"""Target kinds: what the teacher stores per trained position. One module per kind, one object each.

A kind owns everything that depends on it: the teacher-head step that
computes its targets, its tensors in a plain shard and its block in a compact
one, how a stored row turns into the reader's dense item, its columns as
dataset rows (``row_columns``, ``cache export``), its row checks for
``cache verify`` and its line in ``cache inspect``. The manifest names one
kind (``targets.kind``); code elsewhere asks :func:`kind_of` for its object
and never compares kind names.

==========  ================================================================
``topk``    :mod:`destila.cache.kinds.topk`: K ids, their log-probs, the exact rest mass
``sampled`` :mod:`destila.cache.kinds.sampled`: S draws stored as distinct ids with counts
==========  ================================================================
"""

from __future__ import annotations

from dataclasses import asdict, fields

from destila.cache.kinds.sampled import SAMPLED
from destila.cache.kinds.topk import TOPK
from destila.targets.spec import TARGET_KINDS

KINDS = {kind.name: kind for kind in (TOPK, SAMPLED)}
assert tuple(KINDS) == TARGET_KINDS, "TargetSpec's kind names (the --targets choices) and the cache's kinds must match"


def kind_of(name: str):
    """The kind object called ``name`` (a manifest's ``targets.kind``)."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"targets.kind: expected one of {', '.join(KINDS)}, found {name!r}") from None


def target_width(targets) -> int:
    """Entries per position a reader returns for a :class:`~destila.targets.spec.TargetSpec`: K for top-K, S (the
    most distinct ids) for sampled: the value of its kind's first field."""
    return getattr(targets, kind_of(targets.kind).fields[0])


def target_content(targets) -> dict:
    """The fields of a :class:`~destila.targets.spec.TargetSpec` that change stored values: not
    ``head_chunk_rows``, nor the fields of the other kinds."""
    others = {name for kind in KINDS.values() for name in kind.fields} - set(kind_of(targets.kind).fields)
    return {name: value for name, value in asdict(targets).items()
            if name != "head_chunk_rows" and name not in others}


def check_target_fields(targets) -> None:
    """Refuse a :class:`~destila.targets.spec.TargetSpec` that sets a field of another kind than its own
    (``--targets sampled --top-k 5``): its targets would ignore it. A field at its default is not told apart."""
    defaults = {f.name: f.default for f in fields(targets)}
    own = kind_of(targets.kind)
    for kind in KINDS.values():
        stray = [name for name in kind.fields if kind is not own and name not in own.fields
                 and getattr(targets, name) != defaults[name]]
        if stray:
            flags = " and ".join(f"--{name.replace('_', '-')}" for name in stray)
            raise ValueError(f"{stray[0]}: {flags} applies to --targets {kind.name}, not {own.name}, whose targets "
                             f"would ignore it; drop {flags} or pass --targets {kind.name}")
