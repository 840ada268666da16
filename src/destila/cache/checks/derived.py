"""Manifest fields ``destila cache verify`` can compute again from the cache itself, compared with what is written.

A field a reader trusts but nothing checks can be edited without a trace.
These are the ones the cache's own files determine:

- ``tokenizer_fingerprint``, ``tokenizer_size``, ``eos_token_id``: from the
  tokenizer in ``tokenizer/`` (loaded as a student would load it; a
  ``tokenizer/`` swapped for another tokenizer, its file list updated in the
  manifest, is caught here and by ``train``);
- ``compact``: the layout the compact encoding derives from ``vocab_size``;
- ``ids_fingerprint``: the SHA-256 of every sequence's input ids, position
  ids and loss mask (and byte spans, in a cache built with them), in order,
  computed as the build computed it
  (:attr:`destila.data.PackedSource.fingerprint`), from the stored rows.

The other content fields (``targets`` with K, kind and temperature,
``data_fingerprint``, the teacher's fingerprints) cannot be recomputed
without the teacher and the data; the manifest's ``identity``
(:mod:`destila.cache.checks.identity`) covers them.
"""

from __future__ import annotations

import hashlib

import numpy as np

from destila.cache.encodings import encoding_of
from destila.cache.format import TOKENIZER_DIR

_BATCH = 256  # rows per digest update, as PackedSource.fingerprint hashes them


def tokenizer_faults_against(manifest, tokenizer) -> list[str]:
    """Where the loaded cache ``tokenizer`` contradicts the manifest (fingerprint, size, EOS id)."""
    from destila.models import tokenizer_fingerprint  # heavy: transformers

    faults = []
    found = tokenizer_fingerprint(tokenizer)
    if found != manifest.tokenizer_fingerprint:
        faults.append(f"{TOKENIZER_DIR}/: holds another tokenizer than the one the cache was built with (fingerprint "
                      f"{found}, the manifest's {manifest.tokenizer_fingerprint}); token ids would mean something "
                      "else: rebuild the cache")
    if len(tokenizer) != manifest.tokenizer_size:
        faults.append(f"tokenizer_size is {manifest.tokenizer_size}, but the tokenizer in {TOKENIZER_DIR}/ has "
                      f"{len(tokenizer)} tokens")
    if tokenizer.eos_token_id != manifest.eos_token_id:
        faults.append(f"eos_token_id is {manifest.eos_token_id}, but the tokenizer in {TOKENIZER_DIR}/ ends "
                      f"documents with {tokenizer.eos_token_id}")
    return faults


def check_cache_tokenizer(path, manifest, tokenizer) -> None:
    """Raise ``ValueError`` naming the cache when its loaded ``tokenizer`` is not the one it was built with."""
    faults = tokenizer_faults_against(manifest, tokenizer)
    if faults:
        raise ValueError(f"cache: {path}: {faults[0]}")


def cache_tokenizer_faults(path, manifest) -> list[str]:
    """:func:`tokenizer_faults_against` the tokenizer loaded from ``path/tokenizer`` (never its remote code)."""
    from transformers import AutoTokenizer  # heavy

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path / TOKENIZER_DIR))
    except Exception as err:  # a zoo of types (OSError, ValueError, KeyError, tokenizers' own): a fault, named
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return [f"{TOKENIZER_DIR}/: cannot be loaded ({first[:200]})"]
    return tokenizer_faults_against(manifest, tokenizer)


def layout_fault(manifest) -> str | None:
    """What is wrong when ``compact`` is not the layout the encoding derives from ``vocab_size``, else None."""
    try:
        expected = encoding_of(manifest.encoding).layout_record(manifest.vocab_size)
    except ValueError as err:
        return str(err)
    if manifest.compact != expected:
        return (f"compact is {manifest.compact}, but a {manifest.encoding} cache over a vocabulary of "
                f"{manifest.vocab_size} has {expected}")
    return None


class IdsFingerprint:
    """``ids_fingerprint`` recomputed from the stored rows, fed in sequence order (:meth:`add`).

    Rows arriving out of order (shards written by a resumed build with
    another shard size, say) or a cache without a recorded packing leave the
    field unchecked: :meth:`result` says why.
    """

    def __init__(self, manifest):
        self.manifest = manifest
        packing = (manifest.data or {}).get("packing")
        self.skipped = None if packing else "the manifest records no packing"
        self.digest = hashlib.sha256(f"{packing}/{manifest.seq_len}/{manifest.sequences}".encode())
        self.expected, self.rows = 0, []

    def add(self, sequence: int, stored: dict) -> None:
        if self.skipped:
            return
        if sequence != self.expected:
            self.skipped = "its shards do not hold the sequences in order"
            return
        self.expected += 1
        self.rows.append(stored)
        if len(self.rows) == _BATCH:
            self._flush()

    def _flush(self) -> None:
        keys = [("input_ids", np.int64), ("position_ids", np.int64), ("loss_mask", bool)]
        if self.manifest.spans:  # byte spans are part of the sequences of a cache built with them
            keys += [("span_start", np.int64), ("span_end", np.int64)]
        for key, dtype in keys:
            self.digest.update(np.stack([np.asarray(r[key], dtype=dtype) for r in self.rows]).tobytes())
        self.rows = []

    def result(self) -> tuple[str | None, str | None]:
        """``(fault, why unchecked)``: at most one of them is not None."""
        if self.skipped is None and self.expected != self.manifest.sequences:
            self.skipped = "not every sequence was read"
        if self.skipped:
            return None, self.skipped
        if self.rows:
            self._flush()
        found = self.digest.hexdigest()[:16]
        if found != self.manifest.ids_fingerprint:
            return (f"ids_fingerprint is {self.manifest.ids_fingerprint}, but the stored sequences give {found}: "
                    "the field was edited, or the shards hold other sequences"), None
        return None, None
