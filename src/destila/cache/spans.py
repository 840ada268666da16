"""Byte spans in a cache built with ``--spans``: how each encoding stores them, and the checks ``verify`` makes.

Per row, ``span_start [L]`` and ``span_end [L]``: the teacher token at t
covers bytes ``[span_start[t], span_end[t])`` of its document's UTF-8 text
(the rendered text, for conversations), an empty span for a special token
the text does not hold (the EOS after a document), ``-1`` for both at
padding (see :mod:`destila.data.spans`). A student with another tokenizer is
aligned to the teacher through them (:mod:`destila.crosstok`).

- ``plain``: two tensors ``span_start``, ``span_end`` ``[R, L]`` int32.
- ``compact``: ``span_offsets [R+1]`` int64 and ``span_blocks [bytes]``
  uint8, one zstd frame per row (the target blocks are left as they are).
  With ``s = start + 1`` and ``e = end + 1`` (so padding is 0), a frame holds
  ``gap = s[t] − e[t−1]`` (``e[−1] = 0``, zigzag-coded) and ``width = e[t] − s[t]``,
  each as 4 byte planes of L values: within a document the gap is 0 and the
  width a few bytes, so a position costs about one byte.
"""

from __future__ import annotations

import numpy as np

from destila.data.spans import Speller

SPAN_TENSORS = ("span_start", "span_end")


def plain_schema(rows: int, length: int) -> dict:
    return {name: ("int32", (rows, length)) for name in SPAN_TENSORS}


def compact_schema(rows: int) -> dict:
    return {"span_offsets": ("int64", (rows + 1,)), "span_blocks": ("uint8", (None,))}


def _zigzag(values: np.ndarray) -> np.ndarray:
    return ((values << 1) ^ (values >> 63)).astype(np.uint64)


def _unzigzag(values: np.ndarray) -> np.ndarray:
    values = values.astype(np.uint64)
    return ((values >> np.uint64(1)).astype(np.int64)) ^ -((values & np.uint64(1)).astype(np.int64))


def encode_frame(start, end, level: int = 12) -> bytes:
    """One row's spans ``[L]`` as a zstd frame (see the module docstring)."""
    # zstandard: only for a cache with byte spans
    import zstandard

    s, e = np.asarray(start, np.int64) + 1, np.asarray(end, np.int64) + 1
    width = e - s
    if (width < 0).any() or (s < 0).any():
        raise AssertionError("byte spans with end < start or start < -1: a bug in the span computation")
    previous = np.concatenate([[0], e[:-1]])
    values = np.stack([_zigzag(s - previous), width.astype(np.uint64)])
    if (values >= 2**32).any():
        raise ValueError("byte spans: a document longer than 2 GiB cannot be stored")
    planes = values.astype("<u4")
    payload = np.ascontiguousarray(planes.view(np.uint8).reshape(2, len(s), 4).transpose(0, 2, 1)).tobytes()
    return zstandard.ZstdCompressor(level=level, write_checksum=True).compress(payload)


def decode_frame(frame: bytes, length: int) -> tuple[np.ndarray, np.ndarray]:
    """``(span_start, span_end)`` ``[L]`` int64 of one frame; ``ValueError`` when it does not decode to L spans."""
    # zstandard: only for a cache with byte spans
    import zstandard

    try:
        payload = zstandard.ZstdDecompressor().decompress(frame)
    except zstandard.ZstdError as err:
        raise ValueError(f"span frame: not a zstd frame ({err})") from err
    if len(payload) != 2 * 4 * length:
        raise ValueError(f"span frame: holds {len(payload)} bytes, {length} spans need {8 * length}")
    planes = np.frombuffer(payload, np.uint8).reshape(2, 4, length).transpose(0, 2, 1).copy().view("<u4")
    gap, width = _unzigzag(planes[0, :, 0]), planes[1, :, 0].astype(np.int64)
    e = np.cumsum(gap + width)  # e[t] = e[t-1] + gap[t] + width[t]
    return e - width - 1, e - 1


def span_faults(stored: dict, token_widths=None) -> list[str]:
    """What is wrong with a stored row's spans, as ``verify`` reports it (an empty list when consistent).

    Padding has ``-1`` for both ends; a text token ``0 ≤ start ≤ end``;
    within a document consecutive tokens are contiguous (``start[t] =
    end[t−1]`` where ``position_ids[t] ≠ 0``). ``token_widths(ids, widths)``,
    when given, is a function returning the positions whose width is not one
    the token's bytes allow (:meth:`destila.crosstok` readers pass the
    teacher tokenizer's).
    """
    start, end = np.asarray(stored["span_start"]), np.asarray(stored["span_end"])
    positions, faults = np.asarray(stored["position_ids"]), []
    padding = (start == -1) & (end == -1)
    bad = ~padding & ((start < 0) | (end < start))
    if bad.any():
        t = int(np.flatnonzero(bad)[0])
        faults.append(f"byte span [{int(start[t])}, {int(end[t])}) at position {t} is not a span")
        return faults
    inside = np.zeros_like(padding)
    inside[1:] = (positions[1:] != 0) & ~padding[1:] & ~padding[:-1]
    broken = inside & (np.concatenate([[0], end[:-1]]) != start)
    if broken.any():
        t = int(np.flatnonzero(broken)[0])
        faults.append(f"byte span at position {t} starts at {int(start[t])}, the token before it ends at "
                      f"{int(end[t - 1])}: a document's tokens must cover its bytes one after the other")
    if token_widths is not None and not faults:
        ids = np.asarray(stored["input_ids"])
        wrong = token_widths(ids[~padding], (end - start)[~padding])
        if len(wrong):
            t = int(np.flatnonzero(~padding)[wrong[0]])
            faults.append(f"byte span at position {t} is {int(end[t] - start[t])} bytes wide, which token "
                          f"{int(ids[t])} cannot cover")
    return faults


def token_width_check(tokenizer):
    """``token_widths(ids, widths)`` for :func:`span_faults`: the indices whose span width is not one the
    token's bytes allow (its bytes; one less for a ``▁`` the tokenizer wrote itself; 0 for a special token)."""
    speller = Speller(tokenizer)
    lengths = speller.lengths
    spaced = np.fromiter((b[:1] == b" " for b in speller.table), dtype=bool, count=len(speller.table))
    special = np.zeros(len(lengths), dtype=bool)
    special[[i for i in speller.special if i < len(lengths)]] = True

    def token_widths(ids, widths):
        ids = np.clip(ids, 0, len(lengths) - 1)
        allowed = (widths == lengths[ids]) | ((widths == 0) & (special[ids] | (lengths[ids] == 0)))
        if speller.space_mark:
            allowed |= spaced[ids] & (widths == lengths[ids] - 1)
        return np.flatnonzero(~allowed)

    return token_widths
