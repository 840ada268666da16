"""The ``compact`` encoding: one zstd block per row, ids delta-coded and log-probs quantised.

Shard tensors: ``block_offsets [R+1]`` int64 and ``blocks [bytes]`` uint8;
row r is the block ``blocks[offsets[r]:offsets[r+1]]``, which decodes alone
to the row's fields and its trained positions' targets. The byte format of a
block, for each target kind, is :mod:`destila.cache.encodings.compact_blocks`
(docs/cache.md holds a reference decoder); the manifest's ``compact`` records
its :class:`~destila.cache.encodings.compact_blocks.CompactLayout`. A
cache built with ``spans`` also holds ``span_offsets [R+1]`` and
``span_blocks``: one zstd frame of byte spans per row (:mod:`destila.cache.spans`).
"""

from __future__ import annotations

import numpy as np
import torch

from destila.cache.encodings.compact_blocks import (
    BlockError,
    CompactLayout,
    decode_sampled_row,
    decode_topk_row,
    encode_sampled_row,
    encode_topk_row,
)
from destila.cache.format import row_index_schema, schema_faults
from destila.cache.kinds import KINDS, kind_of
from destila.cache.spans import compact_schema as span_schema, decode_frame, encode_frame

def layout_of(manifest) -> CompactLayout:
    """The :class:`CompactLayout` a compact cache's manifest records (``manifest.compact``)."""
    return CompactLayout(**manifest.compact)


# Each kind's block: encode(row fields, computed row, layout) → bytes; decode(block, manifest) → stored row.
_BLOCKS = {
    "topk": (
        lambda fields, r, layout: encode_topk_row(*fields, r["ids"].numpy(), r["logprobs"].numpy(), r["tail"].numpy(),
                                                  layout),
        lambda block, m: decode_topk_row(block, m.seq_len, m.top_k, layout_of(m)),
    ),
    "sampled": (
        lambda fields, r, layout: encode_sampled_row(*fields, r["ids"].numpy(), r["counts"].numpy(), layout),
        lambda block, m: decode_sampled_row(block, m.seq_len, m.top_k, layout_of(m)),
    ),
}
assert set(_BLOCKS) == set(KINDS), "every target kind needs a compact block format"


class Compact:
    name = "compact"
    stores_hidden = False  # a block holds the targets only
    keeps_logprob_dtype = False  # log-probs are quantised, then decoded exactly normalised, as float32

    @staticmethod
    def layout_record(vocab_size: int) -> dict:
        return CompactLayout.for_vocab(vocab_size).to_dict()

    @staticmethod
    def schema(manifest, rows: int, positions, blob_bytes) -> dict:
        schema = dict(block_offsets=("int64", (rows + 1,)), blocks=("uint8", (blob_bytes,)))
        if manifest.spans:
            schema.update(span_schema(rows))
        return schema

    @staticmethod
    def assemble(manifest, rows: list[dict]) -> dict:
        encode, _ = _BLOCKS[manifest.target_kind]
        layout = layout_of(manifest)
        blocks = [encode([r["input_ids"].numpy(), r["position_ids"].numpy(), r["loss_mask"].numpy()], r, layout)
                  for r in rows]
        offsets = np.concatenate([[0], np.cumsum([len(b) for b in blocks])]).astype(np.int64)
        blob = np.frombuffer(b"".join(blocks), dtype=np.uint8).copy()
        tensors = {"block_offsets": torch.from_numpy(offsets), "blocks": torch.from_numpy(blob)}
        if manifest.spans:
            frames = [encode_frame(r["span_start"].numpy(), r["span_end"].numpy(), layout.zstd_level) for r in rows]
            tensors["span_offsets"] = torch.from_numpy(
                np.concatenate([[0], np.cumsum([len(f) for f in frames])]).astype(np.int64))
            tensors["span_blocks"] = torch.from_numpy(np.frombuffer(b"".join(frames), dtype=np.uint8).copy())
        return tensors

    @staticmethod
    def open(handle, header: dict, manifest, shard) -> tuple:
        """``(offsets [R+1], faults)`` of an open shard: where each row's block starts, and how its tensors
        (``header``: ``{name: (dtype code, shape)}``) break the schema."""
        offsets = handle.get_tensor("block_offsets").numpy() if "block_offsets" in header else None
        blob = header.get("blocks", (None, [None]))[1][0]
        schema = {**row_index_schema(shard.rows), **Compact.schema(manifest, shard.rows, None, blob)}
        faults = schema_faults(header, schema)
        if not faults and (offsets[0] != 0 or offsets[-1] != blob or np.any(np.diff(offsets) < 0)):
            faults.append(f"block_offsets do not cut the {blob} bytes of blocks into {shard.rows} blocks")
        if not faults and manifest.spans:
            span_offsets, frames = handle.get_tensor("span_offsets").numpy(), header["span_blocks"][1][0]
            if span_offsets[0] != 0 or span_offsets[-1] != frames or np.any(np.diff(span_offsets) < 0):
                faults.append(f"span_offsets do not cut the {frames} bytes of span_blocks into {shard.rows} frames")
        return offsets, faults

    @staticmethod
    def stored(handle, manifest, offsets, row: int) -> dict:
        a, b = int(offsets[row]), int(offsets[row + 1])
        _, decode = _BLOCKS[manifest.target_kind]
        fields = decode(handle.get_slice("blocks")[a:b].numpy().tobytes(), manifest)
        if manifest.spans:
            offsets = handle.get_slice("span_offsets")[row : row + 2].numpy()
            frame = handle.get_slice("span_blocks")[int(offsets[0]) : int(offsets[1])].numpy().tobytes()
            try:
                fields["span_start"], fields["span_end"] = decode_frame(frame, manifest.seq_len)
            except ValueError as err:
                raise BlockError(str(err)) from err
        return fields

    @staticmethod
    def stored_entries(rows, manifest) -> int:
        kind = kind_of(manifest.target_kind)
        return sum(kind.entries(rows.stored(r)) for r in range(rows.shard.rows))

    @staticmethod
    def trained_positions(handle) -> None:
        return None  # the masks sit inside the row blocks: counting them means decoding every row

    @staticmethod
    def stored_logprob_dtype(manifest) -> None:
        return None

    @staticmethod
    def id_order_fault(ids) -> str | None:
        if ids.shape[1] > 1 and (np.diff(ids, axis=1) <= 0).any():
            return "top-K ids not strictly ascending as the compact encoding stores them"
        return None

    @staticmethod
    def logprob_order_fault(logprobs) -> None:
        return None  # stored by id; the reader sorts them


COMPACT = Compact()
