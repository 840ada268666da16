"""The ``compact`` encoding: one zstd block per sequence, decodable with numpy and zstandard alone.

A block holds the targets of one sequence's ``P`` trained positions (the
positions where its ``loss_mask`` is true, in order). It is the zstd frame of
the concatenation of byte planes below; a *byte plane* of ``n`` unsigned
integers of ``w`` bytes is their ``w`` little-endian bytes stored plane by
plane (all lowest bytes, then all next bytes, …), which lets zstd see the
mostly-zero high bytes as long runs.

Top-K targets (``K`` entries per position, ``E = P·K``)::

    id deltas   E × id_bytes    ids sorted ascending per position; the first id of a position as is,
                                 then the difference to the previous id (≥ 1)
    levels      E × 2           round(sqrt(p) · sqrt_levels), p = exp(log-prob), clipped to [0, 65535]
    tail        P × 4           the tail log-mass, float32 bit pattern (exact)

Sampled targets (``n_p`` distinct ids at position p, ``E = Σ n_p``)::

    counts n    P × 2           distinct ids per position
    id deltas   E × id_bytes    as above, per position
    draws       E × 2           how many of the S draws gave each id

Decoding a top-K level: ``p̂ = (level / sqrt_levels)²``, with level 0 read as
a quarter step (``(0.25 / sqrt_levels)²``, so every log-prob stays finite);
then the K log-probs are shifted together so their mass is exactly
``1 − exp(tail)``: ``ℓ̂ = log p̂ + log1p(−exp(tail)) − logsumexp(log p̂)``.
Rounding ``sqrt(p)`` to a uniform grid gives every entry the same expected
contribution to the KL, ``≈ step²/6`` nats (``ε_ℓ ≈ 2·Δ√p / √p``), so the
position's KL error is ``≈ K·step²/6``: 6.4e-5 nats at K = 100, 512 levels.

Every block starts with its row: ``input_ids`` (L × id_bytes), ``position_ids`` (L × 4) and
``loss_mask`` (L bytes, 0 or 1), so a block decodes alone. docs/cache.md holds a 30-line
numpy + zstandard reference decoder of the same format.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

_MAX_LEVEL = 65535


@dataclass(frozen=True)
class CompactLayout:
    """Parameters of a compact cache, recorded in its manifest (``compact``)."""

    id_bytes: int = field(metadata={"help": "Bytes per id delta (enough for vocab − 1)."})
    sqrt_levels: int = field(default=512, metadata={
        "help": "Quantisation steps of sqrt(p) over [0, 1]; KL error per position ≈ K / (6 · sqrt_levels²)."})
    zstd_level: int = field(default=12, metadata={"help": "zstd compression level of each block."})

    def __post_init__(self) -> None:
        if self.id_bytes not in (1, 2, 3, 4):
            raise ValueError(f"compact id_bytes: expected 1 to 4, found {self.id_bytes!r}")
        if not 1 <= self.sqrt_levels <= _MAX_LEVEL:
            raise ValueError(f"compact sqrt_levels: expected 1 to {_MAX_LEVEL}, found {self.sqrt_levels!r}")
        if not 1 <= self.zstd_level <= 22:
            raise ValueError(f"compact zstd_level: expected 1 to 22, found {self.zstd_level!r}")

    @classmethod
    def for_vocab(cls, vocab_size: int, **overrides) -> CompactLayout:
        return cls(id_bytes=max(1, (int(vocab_size - 1).bit_length() + 7) // 8), **overrides)

    def to_dict(self) -> dict:
        return asdict(self)


class BlockError(ValueError):
    """A compact block that does not decode to what its shard says it holds."""


def _planes(values: np.ndarray, width: int) -> bytes:
    """``values`` (non-negative, < 2^(8·width)) as ``width`` little-endian byte planes."""
    as_bytes = np.ascontiguousarray(values, dtype="<u4").view(np.uint8).reshape(-1, 4)
    return np.ascontiguousarray(as_bytes[:, :width].T).tobytes()


def _from_planes(buffer: bytes, offset: int, count: int, width: int) -> tuple[np.ndarray, int]:
    """``count`` uint32 values from ``width`` byte planes at ``offset``; returns them and the next offset."""
    end = offset + count * width
    if end > len(buffer):
        raise BlockError(f"block too short: needs {end} bytes, holds {len(buffer)}")
    planes = np.frombuffer(buffer, np.uint8, count * width, offset).reshape(width, count)
    wide = np.zeros((count, 4), np.uint8)
    wide[:, :width] = planes.T
    return wide.view("<u4").reshape(count), end


def _compress(payload: bytes, level: int) -> bytes:
    # zstandard: only for the compact encoding's blocks
    import zstandard

    # The frame checksum (4 bytes) makes a damaged block fail to decode, even where no SHA-256 is checked.
    return zstandard.ZstdCompressor(level=level, write_checksum=True).compress(payload)


def _decompress(block: bytes) -> bytes:
    # zstandard: only for the compact encoding's blocks
    import zstandard

    try:
        return zstandard.ZstdDecompressor().decompress(block)
    except zstandard.ZstdError as err:
        raise BlockError(f"not a zstd frame ({err})") from err


def _deltas(sorted_ids: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Flat ascending-per-position ids → first id of each position, then differences."""
    deltas = np.diff(sorted_ids, prepend=0)
    deltas[starts] = sorted_ids[starts]
    return deltas


def _undelta(deltas: np.ndarray, counts: np.ndarray) -> np.ndarray:
    total = np.cumsum(deltas, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    before = total[starts] - deltas[starts]  # running sum up to the position's first entry
    return total - np.repeat(before, counts)


def _row_payload(input_ids, position_ids, loss_mask, layout: CompactLayout) -> bytes:
    return (_planes(np.asarray(input_ids, dtype=np.int64), layout.id_bytes)
            + _planes(np.asarray(position_ids, dtype=np.int64), 4)
            + np.asarray(loss_mask, dtype=np.uint8).tobytes())


def _row_fields(raw: bytes, seq_len: int, layout: CompactLayout):
    input_ids, at = _from_planes(raw, 0, seq_len, layout.id_bytes)
    position_ids, at = _from_planes(raw, at, seq_len, 4)
    if at + seq_len > len(raw):
        raise BlockError(f"block too short for {seq_len} positions")
    loss_mask = np.frombuffer(raw, np.uint8, seq_len, at)
    if loss_mask.max(initial=0) > 1:
        raise BlockError("loss_mask holds values other than 0 and 1")
    return input_ids.astype(np.int64), position_ids.astype(np.int64), loss_mask.astype(bool), at + seq_len


def encode_topk_row(input_ids, position_ids, loss_mask, ids, logprobs, tail, layout: CompactLayout) -> bytes:
    """One block: the row's ``[L]`` fields, then its ``P`` positions' ``ids [P, K]``, ``logprobs [P, K]``
    (float32/64, any order) and ``tail [P]`` float32."""
    ids = np.asarray(ids, dtype=np.int64)
    positions, k = ids.shape
    order = np.argsort(ids, axis=1, kind="stable")
    ids = np.take_along_axis(ids, order, 1).reshape(-1)
    lp = np.take_along_axis(np.asarray(logprobs, dtype=np.float64), order, 1).reshape(-1)
    levels = np.clip(np.rint(np.exp(0.5 * lp) * layout.sqrt_levels), 0, _MAX_LEVEL)
    starts = np.arange(positions, dtype=np.int64) * k
    payload = (_row_payload(input_ids, position_ids, loss_mask, layout)
               + _planes(_deltas(ids, starts), layout.id_bytes) + _planes(levels, 2)
               + _planes(np.ascontiguousarray(tail, dtype="<f4").view("<u4"), 4))
    return _compress(payload, layout.zstd_level)


def decode_topk_row(block: bytes, seq_len: int, k: int, layout: CompactLayout) -> dict:
    """The fields of one top-K block: ``input_ids``, ``position_ids`` ``[L]`` int64, ``loss_mask [L]`` bool,
    and for its ``P = loss_mask.sum()`` positions ``ids [P, K]`` int64 (ascending), ``logprobs [P, K]``
    float32, ``tail [P]`` float32."""
    raw = _decompress(block)
    input_ids, position_ids, loss_mask, at = _row_fields(raw, seq_len, layout)
    positions = int(loss_mask.sum())
    count = positions * k
    deltas, at = _from_planes(raw, at, count, layout.id_bytes)
    levels, at = _from_planes(raw, at, count, 2)
    tail_bits, at = _from_planes(raw, at, positions, 4)
    if at != len(raw):
        raise BlockError(f"block holds {len(raw)} bytes, {positions} positions × K={k} need {at}")
    ids = _undelta(deltas.astype(np.int64), np.full(positions, k, np.int64)).reshape(positions, k)
    tail = tail_bits.view("<f4").astype(np.float32)
    root = np.where(levels > 0, levels, 0.25).reshape(positions, k) / layout.sqrt_levels
    top = np.log(np.sum(root * root, axis=1))
    with np.errstate(divide="ignore"):
        head = np.log1p(-np.exp(tail.astype(np.float64)))  # log of the mass the top-K holds
    logprobs = (2.0 * np.log(root) + (head - top)[:, None]).astype(np.float32)
    return dict(input_ids=input_ids, position_ids=position_ids, loss_mask=loss_mask, ids=ids, logprobs=logprobs,
                tail=tail)


def encode_sampled_row(input_ids, position_ids, loss_mask, ids, counts, layout: CompactLayout) -> bytes:
    """One block: the row's ``[L]`` fields, then its ``P`` positions' padded ``ids [P, S]`` and
    ``counts [P, S]`` (count 0 marks padding)."""
    ids, counts = np.asarray(ids, dtype=np.int64), np.asarray(counts, dtype=np.int64)
    real = counts > 0
    order = np.argsort(np.where(real, ids, np.iinfo(np.int64).max), axis=1, kind="stable")  # padding last
    ids, counts, real = (np.take_along_axis(a, order, 1) for a in (ids, counts, real))
    per_position = real.sum(axis=1)
    flat_ids, flat_counts = ids[real], counts[real]
    starts = np.concatenate([[0], np.cumsum(per_position)[:-1]]).astype(np.int64)
    deltas = _deltas(flat_ids, starts) if len(flat_ids) else flat_ids
    payload = (_row_payload(input_ids, position_ids, loss_mask, layout) + _planes(per_position, 2)
               + _planes(deltas, layout.id_bytes) + _planes(flat_counts, 2))
    return _compress(payload, layout.zstd_level)


def decode_sampled_row(block: bytes, seq_len: int, samples: int, layout: CompactLayout) -> dict:
    """The fields of one sampled block: as :func:`decode_topk_row` with ``ids [P, S]`` (each position's distinct
    ids ascending, then padding 0) and ``counts [P, S]`` int64 (0 at padding) instead of log-probs and tail."""
    raw = _decompress(block)
    input_ids, position_ids, loss_mask, at = _row_fields(raw, seq_len, layout)
    positions = int(loss_mask.sum())
    per_position, at = _from_planes(raw, at, positions, 2)
    per_position = per_position.astype(np.int64)
    if per_position.max(initial=0) > samples:
        raise BlockError(f"a position holds {per_position.max()} distinct ids, more than the {samples} draws")
    total = int(per_position.sum())
    deltas, at = _from_planes(raw, at, total, layout.id_bytes)
    counts, at = _from_planes(raw, at, total, 2)
    if at != len(raw):
        raise BlockError(f"block holds {len(raw)} bytes, its {total} entries need {at}")
    slot = np.arange(samples)[None, :] < per_position[:, None]
    ids = np.zeros((positions, samples), np.int64)
    out_counts = np.zeros((positions, samples), np.int64)
    ids[slot] = _undelta(deltas.astype(np.int64), per_position)
    out_counts[slot] = counts
    return dict(input_ids=input_ids, position_ids=position_ids, loss_mask=loss_mask, ids=ids, counts=out_counts)
