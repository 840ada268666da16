"""An export's identity: one SHA-256 over its record, so a field edited after the export is caught on open.

The record (``destila_cache.json``, and the dataset card's description)
holds what a reader trusts: the cache's manifest (its targets with K, kind
and temperature, the teacher's and tokenizer's fingerprints, the cache's own
identity), the kind, width and dtype of the rows, the content fingerprint,
and every Parquet file's name, row count, size and SHA-256. ``destila cache
export`` records ``identity``, the SHA-256 of all of it
(:func:`export_identity`). Readers compare (:func:`record_identity_fault`):
a temperature changed to 2.0 in the record and the card, or a file's entry
updated to fit a file edited after the export, no longer gives the recorded
identity. Since the files' checksums are part of it, a file that matches its
entry is the exported file.

As with a cache's identity (:mod:`~destila.cache.checks.identity`), whoever
rewrites the files and the whole record consistently, identity included,
has made another export, and no check inside it can tell. An export written
before identities were recorded has none: it stays readable, and ``verify``
warns.

Naive equivalent: ``sha256(json.dumps(record without "identity", sort_keys=True))``.
"""

from __future__ import annotations

import hashlib
import json

SCHEME = "destila-export-identity/1"
FIELD = "identity"


def export_identity(record: dict) -> str:
    """The SHA-256 (hex) of ``record`` without its ``identity``, as its fields read back from JSON."""
    payload = json.loads(json.dumps({key: value for key, value in record.items() if key != FIELD}))
    text = json.dumps([SCHEME, payload], sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def record_identity_fault(record: dict) -> str | None:
    """What is wrong when ``record``'s fields no longer give the identity it recorded, else None (also for a record
    written before identities: :func:`has_identity` tells them apart)."""
    if not has_identity(record):
        return None
    found = export_identity(record)
    if found != record[FIELD]:
        return (f"its fields (the cache's manifest, the files' entries, the content fingerprint, ...) no longer give "
                f"the identity it recorded at export ({record[FIELD][:16]}…, now {found[:16]}…): a field was edited "
                "after the export")
    return None


def has_identity(record: dict) -> bool:
    return isinstance(record.get(FIELD), str)
