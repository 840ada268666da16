"""Byte spans: where each token of a document sits in the document's UTF-8 bytes.

A student with another tokenizer is aligned to the teacher by byte offsets,
so every teacher token needs its ``[start, end)`` in the text it was cut
from (the rendered text, for conversations). Two steps:

- :func:`token_bytes_table`: the bytes each id stands for, undoing the
  tokenizer's own spelling of them: byte-level BPE writes one printable
  character per byte (``Ġ`` a space, ``Ċ`` a newline, GPT-2's table);
  SentencePiece-style tokenizers write ``▁`` for a space and ``<0xNN>`` for
  a byte they fall back to; added tokens (``<|im_start|>``) are their text.
- :func:`byte_spans`: walk the document's bytes with the tokens' bytes.
  Token j covers the next ``len(bytes_j)`` bytes when they are its bytes;
  a ``▁``-tokenizer's token may start with a space the tokenizer added
  itself (``▁Hello`` at the start of ``Hello``), which then covers nothing;
  a special token absent from the text (the EOS appended to a document)
  covers the empty span where it stands. Any other mismatch means the
  tokenizer does not spell the text back (a normaliser lower-cased it, an
  ``<unk>`` replaced it), and spans are refused.

Naive equivalent for a tokenizer that spells its text back exactly::

    ends = numpy.cumsum([len(table[i]) for i in ids]); starts = ends - lengths
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

import numpy as np

SPACE_MARK = "\u2581"  # ▁, SentencePiece's space
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")
# Text every tokenizer that aligns must spell back: multi-byte UTF-8 (2, 3 and 4 bytes), whitespace runs, tabs,
# newlines, a leading space and a word at the very start.
PROBE_TEXT = "Größe  of\tthe 数据 —  ok 🙂\n\n    def f(x):\n\treturn x  \n end"


class SpanError(ValueError):
    """A tokenizer whose tokens are not pieces of the text's bytes."""


@lru_cache(maxsize=256)
def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-to-character table, inverted: printable character → byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def _spelling(tokenizer) -> tuple[str, bool]:
    """``(style, byte_fallback)``: ``"byte_level"``, ``"space_mark"`` (▁) or ``"plain"``, from the
    tokenizer's pipeline (``tokenizer.json``)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise SpanError(f"tokenizer: {type(tokenizer).__name__} is a slow (Python) tokenizer; byte spans need a fast "
                        "one (the tokenizers library, tokenizer.json); load it with AutoTokenizer(..., use_fast=True)")
    pipeline = json.loads(backend.to_str())
    model = pipeline.get("model") or {}
    if model.get("type") == "WordPiece":
        raise SpanError("tokenizer: a WordPiece tokenizer (## continuations, BERT-style) does not spell its text back "
                        "byte for byte; byte spans need a byte-level BPE or a SentencePiece-style (▁) tokenizer")
    parts = json.dumps([pipeline.get(k) for k in ("normalizer", "pre_tokenizer", "decoder")], ensure_ascii=False)
    if '"ByteLevel"' in parts:
        return "byte_level", False
    return ("space_mark" if SPACE_MARK in parts else "plain"), bool(model.get("byte_fallback"))


def token_bytes_table(tokenizer) -> list[bytes]:
    """The bytes of every id ``0 … len(tokenizer) − 1`` (``b""`` for an id the vocabulary leaves out).

    Raises :class:`SpanError` (one line) for a slow tokenizer, a WordPiece
    one, or a byte-level piece holding a character outside GPT-2's table.
    """
    style, byte_fallback = _spelling(tokenizer)
    added = {int(i): token.content for i, token in getattr(tokenizer, "added_tokens_decoder", {}).items()}
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    decoder = _byte_level_decoder() if style == "byte_level" else None
    table = []
    for index, piece in enumerate(pieces):
        if index in added:
            table.append(added[index].encode("utf-8"))
        elif piece is None:
            table.append(b"")
        elif decoder is not None:
            try:
                table.append(bytes(decoder[c] for c in piece))
            except KeyError:
                raise SpanError(f"tokenizer: byte-level token {index} {piece!r} holds a character outside the "
                                "byte-level alphabet; the tokenizer cannot be read as bytes") from None
        elif byte_fallback and (match := _BYTE_FALLBACK.fullmatch(piece)):
            table.append(bytes([int(match.group(1), 16)]))
        else:
            table.append(piece.replace(SPACE_MARK, " ").encode("utf-8") if style == "space_mark"
                         else piece.encode("utf-8"))
    return table


class Speller:
    """One tokenizer's bytes table and the facts :func:`byte_spans` needs, built once per tokenizer."""

    def __init__(self, tokenizer):
        self.name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        self.table = token_bytes_table(tokenizer)
        self.lengths = np.fromiter((len(b) for b in self.table), dtype=np.int64, count=len(self.table))
        self.space_mark = _spelling(tokenizer)[0] == "space_mark"
        self.special = set(int(i) for i in getattr(tokenizer, "all_special_ids", []))
        self.special |= {int(i) for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items() if t.special}

    def spans(self, text: str | bytes, ids) -> tuple[np.ndarray, np.ndarray]:
        """:func:`byte_spans` with this tokenizer."""
        return byte_spans(text, ids, self)


def byte_spans(text: str | bytes, ids, speller: Speller) -> tuple[np.ndarray, np.ndarray]:
    """``(start [n], end [n])`` int64: the bytes of ``text`` each of the ``n`` tokens ``ids`` covers.

    Consecutive tokens are contiguous (``start[j] = end[j-1]``), the first
    starts at 0 and the last ends at ``len(text bytes)``. Raises
    :class:`SpanError` naming the first token that is not the next piece of
    the text (see the module docstring).
    """
    raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if len(ids) and (ids.min() < 0 or ids.max() >= len(speller.table)):
        raise SpanError(f"tokenizer: id {int(ids.max())} is outside its vocabulary of {len(speller.table)}")
    lengths = speller.lengths[ids]
    if int(lengths.sum()) == len(raw) and b"".join(speller.table[i] for i in ids) == raw:
        ends = np.cumsum(lengths)
        return ends - lengths, ends
    starts, ends, at = np.empty(len(ids), np.int64), np.empty(len(ids), np.int64), 0
    for j, token in enumerate(ids.tolist()):
        piece = speller.table[token]
        if raw.startswith(piece, at) and piece:
            width = len(piece)
        elif speller.space_mark and piece[:1] == b" " and raw.startswith(piece[1:], at):
            width = len(piece) - 1  # the space the tokenizer wrote before a word: not in the text
        elif token in speller.special or not piece:
            width = 0  # a special token the text does not hold (the EOS after a document)
        else:
            found = raw[at : at + max(len(piece), 8)]
            raise SpanError(f"tokenizer: {speller.name} does not spell the text back: token {j} (id {token}, bytes "
                            f"{piece!r}) stands where the text holds {found!r} (byte {at}); byte spans need a tokenizer "
                            "without a normaliser that changes the text (lower-casing, unknown-token replacement)")
        starts[j], ends[j] = at, at + width
        at += width
    if at != len(raw):
        raise SpanError(f"tokenizer: {speller.name}'s tokens cover {at} of the text's {len(raw)} bytes (the rest is "
                        f"{raw[at:at + 16]!r}…); the tokenizer drops text, so byte spans cannot be made")
    return starts, ends


def check_spells_bytes(tokenizer, role: str = "tokenizer") -> Speller:
    """A :class:`Speller` for ``tokenizer`` once it has spelt :data:`PROBE_TEXT` back byte for byte.

    Raises ``ValueError`` (one line, naming ``role``) when it cannot.
    """
    try:
        speller = Speller(tokenizer)
        ids = tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"]
        byte_spans(PROBE_TEXT, ids, speller)
    except SpanError as err:
        raise ValueError(f"{role}: cannot be read as bytes ({str(err).removeprefix('tokenizer: ')})") from None
    return speller
