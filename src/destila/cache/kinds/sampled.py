"""The ``sampled`` target kind: S draws from the teacher's distribution, stored as distinct ids with counts.

Per trained position: ``ids [S]`` and ``counts [S]`` int (the distinct drawn
ids, then padding with count 0); a reader sees the empirical distribution,
log-probs ``log(count / S)`` and an empty rest (tail ``-inf``). The draws
come from :mod:`destila.targets.sampled`.

Plain shard tensors: ``sample_ids [P, S]``, ``sample_counts [P, S]`` int32,
each position by decreasing count (ties: increasing id), padding last.
Compact block: :func:`~destila.cache.encodings.compact_blocks.encode_sampled_row`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from destila.targets.sampled import position_keys, teacher_sample


def has_repeats(ids) -> bool:
    """True when a row of ``ids [P, W]`` holds an id twice."""
    ordered = np.sort(ids, axis=1)
    return bool((ordered[:, 1:] == ordered[:, :-1]).any())


class Sampled:
    name = "sampled"
    has_logprobs = False  # counts; log-probs are derived when read
    supports_mixture = False
    stores_hidden_states = False
    ranked = False  # draws, not an order: no prefix of them is a smaller target
    fields = ("samples", "seed")  # its TargetSpec fields: the first is the entries a position holds
    row_columns = ("sample_ids", "sample_counts")  # its columns as dataset rows (cache export)
    width_letter = "S"  # how the docs name the entries a position holds

    @staticmethod
    def vocab_fault(targets, vocab: int) -> str | None:
        return None  # draws may outnumber the vocabulary: they repeat

    @staticmethod
    def check_vocab(targets, vocab: int) -> None:
        """Any S fits any vocabulary: the draws repeat ids."""

    @staticmethod
    def teacher_head(hidden, weight, bias, targets, sequences, mask, manifest) -> dict:
        """The draws at the trained positions ``hidden [P, H]`` (``mask [B, L]`` of ``sequences``): ``ids``,
        ``counts [P, S]`` (CPU), seeded per (sequence, position)."""
        rows, positions = mask.nonzero(as_tuple=True)
        keys = position_keys(targets.seed, torch.tensor(sequences)[rows].numpy(), positions.numpy())
        ids, counts = teacher_sample(hidden, weight, bias, keys, targets.samples, targets.temperature,
                                     targets.head_chunk_rows)
        return {"ids": ids.cpu(), "counts": counts.cpu()}

    # -- plain encoding ---------------------------------------------------------

    @staticmethod
    def plain_schema(manifest, positions) -> dict:
        width = manifest.top_k
        return dict(sample_ids=("int32", (positions, width)), sample_counts=("int32", (positions, width)))

    @staticmethod
    def plain_tensors(rows: list[dict], manifest) -> dict:
        ids = torch.cat([r["ids"] for r in rows]).to(torch.int64)
        counts = torch.cat([r["counts"] for r in rows]).to(torch.int64)
        # by decreasing count, ties by increasing id (the ids arrive ascending); padding (count 0) last
        order = torch.sort(-counts, dim=1, stable=True).indices
        return dict(sample_ids=ids.gather(1, order).to(torch.int32),
                    sample_counts=counts.gather(1, order).to(torch.int32))

    @staticmethod
    def plain_stored(get, a: int, b: int) -> dict:
        return dict(ids=get("sample_ids")[a:b].numpy().astype(np.int64),
                    counts=get("sample_counts")[a:b].numpy().astype(np.int64))

    @staticmethod
    def plain_entries(handle, manifest) -> int:
        return int((handle.get_tensor("sample_counts") > 0).sum())

    # -- reading, checking, summarising ----------------------------------------

    @staticmethod
    def entries(stored: dict) -> int:
        return int((stored["counts"] > 0).sum())

    @staticmethod
    def dense_targets(stored: dict, manifest) -> tuple:
        """``(ids [P, S] int64, log(count / S) [P, S] float32 (-inf at padding), tail [P] = -inf)``."""
        ids, counts = torch.from_numpy(stored["ids"]), torch.from_numpy(stored["counts"])
        logprobs = torch.where(counts > 0, counts.double().div(manifest.targets["samples"]).log(), -math.inf).float()
        return ids, logprobs, torch.full((ids.shape[0],), -math.inf)

    @staticmethod
    def check_row(stored: dict, manifest, encoding, report) -> list[str]:
        vocab, faults = manifest.vocab_size, []
        ids, counts = stored["ids"], stored["counts"]
        real = counts > 0
        if (ids[real] < 0).any() or (ids[real] >= vocab).any():
            faults.append(f"sample ids outside [0, {vocab})")
        if (counts < 0).any() or (counts.sum(axis=1) != manifest.targets["samples"]).any():
            faults.append(f"sample counts do not sum to S = {manifest.targets['samples']} at every position")
        if has_repeats(np.where(real, ids, -1 - np.arange(ids.shape[1])[None, :])):
            faults.append("a position repeats a sampled id")
        return faults

    @staticmethod
    def describe(targets: dict, vocab: int, logprob_dtype: str | None) -> str:
        return f"S={targets['samples']} draws of V={vocab:,} (seed {targets['seed']})"


SAMPLED = Sampled()
