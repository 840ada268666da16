"""Rows in Axolotl's knowledge-distillation columns, read as a cache's stored rows.

Axolotl's KD datasets hold, per tokenised example, ``input_ids [L]`` (and
``labels``, ``attention_mask``), and per position ``target_token_ids``,
``target_logprobs`` and ``target_mask`` ``[L][K]``; its loss compares the
student's logits at t with the targets at t, so ``target_*[t]`` is the
teacher's distribution of the token t+1, which is what a destila cache stores
at t. What maps, and what is assumed:

- a position is trained where its ``target_mask`` has a non-zero entry;
  entries whose mask is 0 (or whose log-prob is ``-inf``) carry no mass;
- ``position_ids``, when present, keep packed documents apart; otherwise
  the row is one document;
- the rows carry no rest mass: it is taken as ``1 − Σ exp(target_logprobs)``
  per position, in float64 (exact when the log-probs are normalised over the
  full vocabulary, as a server's top-K log-probs are; 0 when they were
  renormalised over the top-K, and the bucket loss then trains as
  ``--tail renorm`` would). Positions whose mass exceeds 1 are refused;
- the temperature is taken as 1.0 and the vocabulary and tokenizer as the
  student's (Axolotl's rows record neither).

Naive equivalent for one position::

    trained = any(target_mask[t]); p = [exp(l) for l, m in zip(target_logprobs[t], target_mask[t]) if m]
    tail = log(1 - sum(p)) if sum(p) < 1 else -inf
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from destila.cache.dataset_rows import RowFormatError, _values

COLUMNS = ("input_ids", "target_token_ids", "target_logprobs", "target_mask")
_EMPTY_REST = 1e-6  # a rest mass below this is read as none: the log-probs sum to 1 up to their rounding
_OVERFULL = 1e-3  # a position whose probabilities sum beyond 1 + this is not a distribution


def is_axolotl(columns) -> bool:
    return set(COLUMNS) <= set(columns or ())


def _nested(column) -> tuple[np.ndarray, np.ndarray]:
    """``(values, per-position lengths)`` of a one-row ``list<list<…>>`` column."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    inner = array.flatten()
    return inner.flatten().to_numpy(zero_copy_only=False), inner.value_lengths().fill_null(0).to_numpy(
        zero_copy_only=False)


def stored_row(table: pa.Table, width: int) -> dict:
    """The stored row (top-K kind) of a one-row table in Axolotl's columns; ``width`` is K."""
    input_ids = _values(table.column("input_ids"), np.int64)
    length = len(input_ids)
    pieces = {name: _nested(table.column(name)) for name in ("target_token_ids", "target_logprobs", "target_mask")}
    for name, (_, lengths) in pieces.items():
        if len(lengths) != length:
            raise RowFormatError(f"{name} has {len(lengths)} positions, input_ids {length}")
        if np.any((lengths != width) & (lengths != 0)):
            found = int(lengths[(lengths != width) & (lengths != 0)][0])
            raise RowFormatError(f"{name} holds {found} entries at a position, the other rows {width}; every position "
                                 "must hold the same K entries")
    full = pieces["target_mask"][1] == width
    dense = {name: np.zeros((length, width), dtype=np.float64) for name in pieces}
    for name, (values, lengths) in pieces.items():
        dense[name][lengths == width] = values.astype(np.float64).reshape(-1, width)
    mask = full & (dense["target_mask"] != 0).any(axis=1)
    mask[-1] = False  # the last position has no next token to learn
    if "position_ids" in table.column_names:
        positions = _values(table.column("position_ids"), np.int64)
    else:
        positions = np.arange(length, dtype=np.int64)
    logprobs = np.where(dense["target_mask"] != 0, dense["target_logprobs"], -math.inf)[mask]
    with np.errstate(divide="ignore", under="ignore"):
        mass = np.exp(logprobs).sum(axis=1)
    if np.any(mass > 1 + _OVERFULL):
        at = int(np.flatnonzero(mask)[np.argmax(mass > 1 + _OVERFULL)])
        raise RowFormatError(f"target_logprobs at position {at} sum to a probability of {mass.max():.4f} > 1; "
                             "expected log-probabilities")
    rest = 1.0 - mass
    with np.errstate(divide="ignore"):
        tail = np.where(rest > _EMPTY_REST, np.log(np.maximum(rest, _EMPTY_REST)), -math.inf)
    return {"input_ids": input_ids, "position_ids": positions, "loss_mask": mask,
            "ids": dense["target_token_ids"][mask].astype(np.int64), "logprobs": logprobs.astype(np.float32),
            "tail": tail.astype(np.float32)}


def rest_note(mean_rest: float, rows: int) -> str:
    """The line that says what was assumed about the rest mass, with what the first rows showed."""
    shown = (f"mean rest {mean_rest:.4f} over the first {rows} rows" if rows else "no row read yet")
    verdict = (" (the log-probs look renormalised over the top-K: training then matches --tail renorm)"
               if rows and mean_rest < 1e-4 else "")
    return ("Axolotl columns: target_*[t] taken as the teacher's distribution of token t+1, trained where "
            "target_mask is set; no rest-mass column, so the rest is taken as 1 − Σ exp(target_logprobs) per "
            f"position ({shown}{verdict}); temperature taken as 1.0; vocabulary and tokenizer taken as the student's")
