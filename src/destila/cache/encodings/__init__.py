"""Shard encodings: how a shard's rows are laid out in its safetensors file. One module per encoding.

An encoding owns the shard's tensors (:func:`shard_schema`), how computed
rows become them, how a stored row is read back, and the encoding-specific
facts the checks need (which dtype log-probs keep, how entries are ordered).
What a row's targets *are* belongs to its kind (:mod:`destila.cache.kinds`):
an encoding asks the kind for its part (``plain_*`` / ``compact_*``). The
manifest names one encoding; code elsewhere asks :func:`encoding_of` for its
object and never compares encoding names.

===========  ==================================================================
``plain``    :mod:`destila.cache.encodings.plain`: one tensor per field, readable by any safetensors reader
``compact``  :mod:`destila.cache.encodings.compact`: one zstd block per row (:mod:`.compact_blocks`)
===========  ==================================================================
"""

from __future__ import annotations

from destila.cache.encodings.compact import COMPACT
from destila.cache.encodings.plain import PLAIN
from destila.cache.format import row_index_schema

ENCODINGS = {encoding.name: encoding for encoding in (PLAIN, COMPACT)}


def encoding_of(name: str):
    """The encoding object called ``name`` (a manifest's ``encoding``)."""
    try:
        return ENCODINGS[name]
    except KeyError:
        raise ValueError(f"encoding: expected one of {', '.join(ENCODINGS)}, found {name!r}") from None


def shard_schema(manifest, rows: int, positions: int | None = None,
                 blob_bytes: int | None = None) -> dict[str, tuple[str, tuple]]:
    """``{name: (dtype, shape)}`` of every tensor of a shard with ``rows`` rows.

    ``positions`` is the shard's number of trained positions ``P`` and
    ``blob_bytes`` the length of a compact shard's ``blocks``; a ``None``
    there leaves that dimension unchecked (``None`` in the shape).
    """
    return {**row_index_schema(rows), **encoding_of(manifest.encoding).schema(manifest, rows, positions, blob_bytes)}
