"""The in-memory reference: plain-text documents packed into ``[S, L]`` token ids, and fingerprints.

Small data only (tests, examples). :func:`pack_documents` is the naive
equivalent of the packed source's ``input_ids`` for ``packing="documents"``::

    ids = []
    for text in texts:
        ids += tokenizer(text, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    ids = ids[: (min(len(ids), max_tokens or len(ids)) // seq_len) * seq_len]
    packed = torch.tensor(ids).view(-1, seq_len)
"""

from __future__ import annotations

import hashlib

# Documents are tokenised this many at a time: large enough for the fast
# tokenizer's batching to pay off, small enough to stop early at max_tokens.
_TOKENIZE_BATCH = 256


def data_fingerprint(texts: list[str]) -> str:
    """Short hash of the documents and their order (length-prefixed, so boundaries count)."""
    digest = hashlib.sha256()
    for text in texts:
        raw = text.encode("utf-8")
        digest.update(len(raw).to_bytes(8, "little"))
        digest.update(raw)
    return digest.hexdigest()[:16]


def ids_fingerprint(packed) -> str:
    """Short hash of packed token ids ``[S, L]``: equal means the same sequences, token for token."""
    # heavy: numpy (this module's own imports are the standard library's)
    import numpy as np

    array = np.ascontiguousarray(packed.numpy() if hasattr(packed, "numpy") else packed, dtype=np.int64)
    digest = hashlib.sha256(str(array.shape).encode())
    digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def pack_documents(texts: list[str], tokenizer, seq_len: int, max_tokens: int | None = None):
    """Tokenise ``texts`` and pack them into ``LongTensor [S, seq_len]``.

    Each document's tokens (no special tokens added) are followed by the
    tokenizer's EOS token, the stream is cut into rows of ``seq_len`` and the
    incomplete last row is dropped. ``max_tokens`` caps ``S · seq_len``.
    Sequences span document boundaries, as in pre-training: the EOS token is
    the only separator.
    """
    # heavy: numpy and torch, as above
    import numpy as np
    import torch

    if seq_len < 2:
        raise ValueError(f"seq_len: expected at least 2 tokens (one input and one label), found {seq_len}")
    if max_tokens is not None and max_tokens < seq_len:
        raise ValueError(
            f"max_tokens: {max_tokens} is less than one sequence of {seq_len} tokens; raise --max-tokens "
            "or lower --seq-len"
        )
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError(
            f"tokenizer: {type(tokenizer).__name__} has no EOS token to separate documents; "
            "set tokenizer.eos_token before packing"
        )
    if not texts:
        raise ValueError("data: no documents to pack; expected at least one non-empty text")
    wanted = None if max_tokens is None else (max_tokens // seq_len) * seq_len
    pieces, total = [], 0
    for start in range(0, len(texts), _TOKENIZE_BATCH):
        # verbose=False: documents longer than the model's context are
        # expected here (packing splits them), so the length warning is noise.
        batch = tokenizer(texts[start : start + _TOKENIZE_BATCH], add_special_tokens=False, verbose=False)
        for ids in batch["input_ids"]:
            pieces.append(np.asarray(ids, dtype=np.int64))
            pieces.append(np.asarray([eos], dtype=np.int64))
            total += len(ids) + 1
        if wanted is not None and total >= wanted:
            break
    stream = np.concatenate(pieces)
    rows = len(stream) // seq_len if wanted is None else min(len(stream), wanted) // seq_len
    if rows == 0:
        raise ValueError(
            f"data: {len(stream)} tokens (EOS separators included) are fewer than one sequence of {seq_len}; "
            "lower --seq-len or give more text"
        )
    return torch.from_numpy(stream[: rows * seq_len].reshape(rows, seq_len).copy())
