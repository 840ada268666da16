"""Bits per byte: a model's held-out loss per byte of the text it scored, comparable across tokenizers.

Perplexity is per token, so two models with different tokenizers (one that
cuts the same text into fewer, longer tokens has a higher perplexity for the
same predictions) cannot be compared by it. Bits per byte divides the total
negative log-likelihood of the scored tokens by the UTF-8 bytes they spell::

    bits_per_byte = Σ −ln q(token) / (ln 2 · bytes of the scored tokens)

Naive equivalent for one text scored whole::

    nll = F.cross_entropy(logits[:-1], ids[1:], reduction="sum")
    bits_per_byte = nll / (math.log(2) * len(tokenizer.decode(ids[1:]).encode("utf-8")))

The byte count of the scored tokens comes from :func:`token_byte_lengths`,
one count per vocabulary id, summed over the scored targets
(:func:`scored_bytes`), so no text is decoded during evaluation.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache

import torch

from destila.constants import IGNORE_INDEX

_BYTE_FALLBACK = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


def bits_per_byte(nll_nats: float, byte_count: int) -> float | None:
    """Bits per UTF-8 byte of ``nll_nats`` (summed −ln q over the scored tokens) spread over ``byte_count``
    bytes; ``None`` when nothing scored spells a byte (only special tokens)."""
    if byte_count < 0:
        raise ValueError(f"byte_count: expected a count ≥ 0 of the scored text's UTF-8 bytes, found {byte_count}")
    if byte_count == 0:
        return None
    return nll_nats / (math.log(2) * byte_count)


@lru_cache(maxsize=1)
def _byte_alphabet() -> frozenset[str]:
    """The byte-level alphabet (GPT-2's): the 256 printable characters that each stand for one byte."""
    # tokenizers: only when a byte-level alphabet is needed
    from tokenizers.pre_tokenizers import ByteLevel

    return frozenset(ByteLevel.alphabet())


def _decoder_types(tokenizer) -> set[str]:
    """The types of the fast tokenizer's decoder (``ByteLevel``, ``Metaspace``, ``ByteFallback``, ...)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return set()
    decoder = json.loads(backend.to_str()).get("decoder") or {}
    parts = decoder.get("decoders") or [decoder]
    return {part.get("type") for part in parts if isinstance(part, dict)}


def token_byte_lengths(tokenizer) -> torch.Tensor:
    """``[len(tokenizer)]`` int64: the UTF-8 bytes each token id spells in decoded text.

    Byte-level BPE (GPT-2, Llama 3, SmolLM2, Qwen): one byte per character of
    the token in the byte alphabet, so the sum over a text's tokens is exactly
    the text's byte count, split UTF-8 characters included. SentencePiece
    (``▁`` for a space, ``<0xNN>`` byte fallback): ``▁`` counts as the space
    it stands for and a fallback token as one byte (the space a decoder strips
    at the start of a text is counted). Other tokenizers: the bytes of the
    token decoded alone. Special tokens (EOS, chat markers) spell no text: 0.
    """
    vocab = len(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(vocab)))
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    added = {index: token for index, token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()}
    decoders = _decoder_types(tokenizer)
    alphabet = _byte_alphabet() if "ByteLevel" in decoders else None
    lengths = torch.zeros(vocab, dtype=torch.int64)
    for index, token in enumerate(tokens):
        if token is None or index in special or getattr(added.get(index), "special", False):
            continue
        if index in added:  # a non-special added token is literal text
            lengths[index] = len(str(added[index]).encode("utf-8"))
        elif alphabet is not None:
            lengths[index] = sum(1 if char in alphabet else len(char.encode("utf-8")) for char in token)
        elif "ByteFallback" in decoders and _BYTE_FALLBACK.match(token):
            lengths[index] = 1
        elif "Metaspace" in decoders or "Replace" in decoders:
            lengths[index] = len(token.replace("\u2581", " ").encode("utf-8"))
        else:
            lengths[index] = len(tokenizer.convert_tokens_to_string([token]).encode("utf-8"))
    return lengths


def scored_bytes(labels: torch.Tensor, lengths: torch.Tensor) -> int:
    """UTF-8 bytes spelt by the scored targets: Σ ``lengths[label]`` over ``labels`` (any shape) that are not
    ``IGNORE_INDEX``. Labels past the table (a model whose head is larger than its tokenizer) count 0."""
    scored = labels[labels != IGNORE_INDEX].long()
    inside = scored[(scored >= 0) & (scored < lengths.numel())]
    return int(lengths[inside].sum())
