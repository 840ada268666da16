"""The ``plain`` encoding: every field a tensor of its own, readable by any safetensors reader.

Per row ``input_ids [R, L]`` int32, ``position_ids [R, L]`` int32 (restart at
0 per document), ``loss_mask [R, L]`` bool (true: the target at t is
trained); then the kind's tensors over the shard's ``P`` trained positions
(row-major), and with ``extras.hidden`` the teacher's hidden states
``teacher_hidden [P, n, D]`` float16 (:mod:`destila.cache.extras`), and
with ``spans`` the byte spans ``span_start``, ``span_end`` ``[R, L]`` int32
(:mod:`destila.cache.spans`).
Row r's targets are the positions ``offsets[r]:offsets[r+1]``, the running
count of its loss mask.
"""

from __future__ import annotations

import numpy as np
import torch

from destila.cache.format import ShardFormatError, row_index_schema, schema_faults
from destila.cache.kinds import kind_of
from destila.cache.kinds.sampled import has_repeats
from destila.cache.spans import SPAN_TENSORS, plain_schema as span_schema


class Plain:
    name = "plain"
    stores_hidden = True
    keeps_logprob_dtype = True

    @staticmethod
    def layout_record(vocab_size: int) -> None:
        return None  # nothing beyond the manifest's own fields

    @staticmethod
    def schema(manifest, rows: int, positions, blob_bytes) -> dict:
        length = manifest.seq_len
        schema = dict(input_ids=("int32", (rows, length)), position_ids=("int32", (rows, length)),
                      loss_mask=("bool", (rows, length)))
        schema.update(kind_of(manifest.target_kind).plain_schema(manifest, positions))
        hidden = (manifest.extras or {}).get("hidden")
        if hidden:
            schema["teacher_hidden"] = ("float16", (positions, len(hidden["layers"]), hidden["dim"]))
        if manifest.spans:
            schema.update(span_schema(rows, length))
        return schema

    @staticmethod
    def assemble(manifest, rows: list[dict]) -> dict:
        stack = lambda key, dtype: torch.stack([r[key] for r in rows]).to(dtype)  # noqa: E731
        tensors = {"input_ids": stack("input_ids", torch.int32), "position_ids": stack("position_ids", torch.int32),
                   "loss_mask": stack("loss_mask", torch.bool)}
        tensors.update(kind_of(manifest.target_kind).plain_tensors(rows, manifest))
        if (manifest.extras or {}).get("hidden"):
            tensors["teacher_hidden"] = torch.cat([r["hidden"] for r in rows]).to(torch.float16)
        if manifest.spans:
            tensors.update({name: stack(name, torch.int32) for name in SPAN_TENSORS})
        return tensors

    @staticmethod
    def open(handle, header: dict, manifest, shard) -> tuple:
        """``(offsets [R+1], faults)`` of an open shard: where each row's targets start, and how its tensors
        (``header``: ``{name: (dtype code, shape)}``) break the schema."""
        mask = handle.get_tensor("loss_mask") if "loss_mask" in header else None
        positions = None if mask is None else int(mask.sum())
        schema = {**row_index_schema(shard.rows), **Plain.schema(manifest, shard.rows, positions, None)}
        faults = schema_faults(header, schema)
        offsets = None if faults else np.concatenate([[0], np.cumsum(mask.sum(dim=1).numpy())])
        return offsets, faults

    @staticmethod
    def stored(handle, manifest, offsets, row: int) -> dict:
        a, b = int(offsets[row]), int(offsets[row + 1])
        get = handle.get_slice
        fields = {
            "input_ids": get("input_ids")[row].numpy().astype(np.int64),
            "position_ids": get("position_ids")[row].numpy().astype(np.int64),
            "loss_mask": get("loss_mask")[row].numpy(),
        }
        fields.update(kind_of(manifest.target_kind).plain_stored(get, a, b))
        if "teacher_hidden" in handle.keys():
            fields["hidden"] = get("teacher_hidden")[a:b]
        if manifest.spans:
            fields.update({name: get(name)[row].numpy().astype(np.int64) for name in SPAN_TENSORS})
        if int(fields["loss_mask"].sum()) != b - a:
            raise ShardFormatError(f"row {row}: loss_mask has {int(fields['loss_mask'].sum())} trained positions, "
                                   f"the shard stores {b - a}")
        return fields

    @staticmethod
    def stored_entries(rows, manifest) -> int:
        return kind_of(manifest.target_kind).plain_entries(rows.handle, manifest)

    @staticmethod
    def trained_positions(handle) -> int | None:
        """The shard's trained positions, counted from its one small ``loss_mask`` tensor (None when it has none:
        the schema check reports that)."""
        return int(handle.get_tensor("loss_mask").sum()) if "loss_mask" in handle.keys() else None

    @staticmethod
    def stored_logprob_dtype(manifest) -> str | None:
        """The dtype stored log-probs are rounded to, or None when they are exact once decoded."""
        return manifest.logprob_dtype if kind_of(manifest.target_kind).has_logprobs else None

    @staticmethod
    def id_order_fault(ids) -> str | None:
        return "a position repeats a top-K id" if has_repeats(ids) else None

    @staticmethod
    def logprob_order_fault(logprobs) -> str | None:
        if (logprobs[:, 1:] > logprobs[:, :-1]).any():
            return "top-K log-probs not sorted in descending order"
        return None


PLAIN = Plain()
