"""A cache's identity, carried by its manifest and by every one of its shards.

Two caches of the same shape (same K, sequence length and shard size) have
shards that fit each other's manifests; a shard copied from one into the
other, with its manifest entry (name, size, checksum), would pass every
size, checksum and schema check, and train on another teacher's targets or
another text. So at build time the manifest records ``identity``, a
SHA-256 over the fields that define the cache's content (:data:`IDENTITY_FIELDS`:
the data and ids fingerprints, the target spec with K, kind and
temperature, the tokenizer's fingerprint, EOS id and size, the teacher's
fingerprints, ...), and every shard carries it in its safetensors metadata.
Readers check that the manifest's fields still give its ``identity``
(:func:`manifest_identity_fault`: a field edited after the build) and that
each shard carries the manifest's (:func:`shard_identity_fault`: a shard
from another cache).

A cache written before identities were recorded has ``identity: null`` and
shards without one: it stays readable, and ``destila cache verify`` warns
that a shard copied from another cache cannot be told apart there.

What this does not do: a person who rewrites every shard and the manifest
consistently has made another cache, and no check inside a cache can tell;
see docs/reliability.md (threat model).

Naive equivalent: compare every shard's targets with a fresh teacher pass.
"""

from __future__ import annotations

import hashlib
import json

# Frozen: a field added to the manifest later does not change the identity of caches already written.
IDENTITY_FIELDS = (
    "format_version", "teacher_config_hash", "teacher_weight_fingerprint", "teacher_dtype",
    "tokenizer_fingerprint", "tokenizer_size", "eos_token_id", "vocab_size", "targets", "encoding", "compact",
    "seq_len", "logprob_dtype", "text_field", "max_tokens", "data_fingerprint", "ids_fingerprint", "sequences",
    "extras",
)
SCHEME = "destila-cache-identity/1"
METADATA_KEY = "format"  # one key only: safetensors writes several in a random order (byte-identical shards)
_FORMAT_PREFIX = "destila-topk-cache/"
_IDENTITY_TAG = ";identity="


def cache_identity(manifest) -> str:
    """The SHA-256 (hex) of ``manifest``'s :data:`IDENTITY_FIELDS`, as they read back from ``manifest.json``."""
    payload = {name: getattr(manifest, name) for name in IDENTITY_FIELDS}
    payload = json.loads(json.dumps(payload))  # the values as JSON gives them back (1 and 1.0, tuples and lists)
    text = json.dumps([SCHEME, payload], sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def shard_metadata(format_version: int, identity: str | None) -> dict[str, str]:
    """The safetensors metadata of a shard: its format, and the identity of its cache when it has one."""
    value = f"{_FORMAT_PREFIX}{format_version}"
    return {METADATA_KEY: value + (f"{_IDENTITY_TAG}{identity}" if identity else "")}


def identity_of_shard(metadata: dict | None) -> str | None:
    """The cache identity a shard's metadata carries, or None (a shard written before identities)."""
    value = (metadata or {}).get(METADATA_KEY, "")
    _, tag, identity = value.partition(_IDENTITY_TAG)
    return identity if tag else None


def manifest_identity_fault(manifest) -> str | None:
    """What is wrong when the manifest's content fields no longer give the identity it recorded, else None."""
    if manifest.identity is None:
        return None
    if cache_identity(manifest) != manifest.identity:
        return ("its content fields (" + ", ".join(IDENTITY_FIELDS[4:9]) + ", ...) no longer give the identity it "
                "recorded at build time: a field was edited after the build")
    return None


def shard_identity_fault(metadata: dict | None, manifest) -> str | None:
    """What is wrong when a shard (its safetensors ``metadata``) does not belong to ``manifest``'s cache, else None."""
    if manifest.identity is None:
        return None  # a cache written before identities: nothing to compare
    found = identity_of_shard(metadata)
    if found is None:
        return "carries no cache identity, but this cache records one: the shard comes from another (older) cache"
    if found != manifest.identity:
        return (f"belongs to another cache (its identity {found[:16]}…, this cache's {manifest.identity[:16]}…): "
                "a shard copied in from a cache of another teacher, data or K")
    return None


def shard_file_identity_fault(path, manifest) -> str | None:
    """:func:`shard_identity_fault` of the shard file at ``path`` (its header only is read)."""
    if manifest.identity is None:
        return None
    from safetensors import safe_open  # the header only; heavy enough to keep out of `destila --help`

    try:
        with safe_open(str(path), framework="pt") as handle:
            return shard_identity_fault(handle.metadata(), manifest)
    except Exception as err:  # safetensors' own error type for a bad header
        return f"not a readable safetensors file ({err})"
