"""The checks of one row's values: cheap ones every reader runs on what it decodes, and every rule ``verify`` applies.

- :func:`target_value_fault`: the targets a reader just decoded are finite
  log-probabilities ≤ 0, ids within the vocabulary (what a damaged or edited
  cache breaks first), so neither statistics nor a loss are computed from them.
- :func:`row_faults`: one stored row checked by its kind and encoding (ids
  distinct, log-probs ordered, the mass summing to 1, ...), into a
  :class:`VerifyReport`; a cache's verification and an export's share it,
  the row's document bounds among them (:mod:`~.documents`).

Naive equivalent: decode every row and compare it with a fresh teacher pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from destila.cache.checks.documents import document_fault
from destila.cache.encodings import encoding_of
from destila.cache.kinds import kind_of
from destila.constants import IGNORE_INDEX

_SLACK = 1e-3  # log-probs are ≤ 0 up to float rounding of "top logit − logsumexp"


def target_value_fault(item: dict, vocab_size: int) -> str | None:
    """What is wrong with a dense item's targets (``topk_ids``, ``topk_logprobs``, ``tail_logmass``), else None.

    Padding (-inf log-probs of sampled or short rows) is allowed; NaN, +inf,
    log-probs above 0 and ids outside ``[0, vocab_size)`` are not.
    """
    lp, ids, tail = item.get("topk_logprobs"), item.get("topk_ids"), item.get("tail_logmass")
    if lp is not None and lp.numel():
        lp = lp.float()
        if torch.isnan(lp).any() or torch.isposinf(lp).any():
            bad = int((torch.isnan(lp) | torch.isposinf(lp)).sum())
            return f"{bad} top-K log-probs are NaN or +inf"
        if lp.max() > _SLACK:
            return f"top-K log-probs above 0 (max {lp.max().item():.3g}), which no probability has"
    if tail is not None and tail.numel():
        tail = tail.float()
        if torch.isnan(tail).any() or torch.isposinf(tail).any() or tail.max() > _SLACK:
            return "tail log-masses that are NaN, +inf or above 0"
    if ids is not None and ids.numel() and (ids.min() < 0 or ids.max() >= vocab_size):
        return f"top-K ids outside the vocabulary [0, {vocab_size})"
    inputs = item.get("input_ids")
    if inputs is not None and inputs.numel() and (inputs.min() < 0 or inputs.max() >= vocab_size):
        return f"input ids outside the vocabulary [0, {vocab_size})"
    return _position_fault(item)


def _position_fault(item: dict) -> str | None:
    """Negative position ids, or a trained position with a -inf top-K log-prob beside a rest that has mass."""
    positions = item.get("position_ids")
    if positions is not None and positions.numel() and positions.min() < 0:
        return f"negative position ids (min {int(positions.min())}); positions count from 0 in each document"
    lp, tail, labels = item.get("topk_logprobs"), item.get("tail_logmass"), item.get("labels")
    if lp is None or labels is None or not lp.numel():
        return None
    trained = labels != IGNORE_INDEX
    lp = lp[trained]
    # -inf is padding (sampled rows, a vocabulary with masked logits) only where nothing outside has mass either
    empty = torch.isneginf(lp[:, 0])
    if tail is not None:
        empty |= torch.isneginf(lp).any(dim=-1) & torch.isfinite(tail[trained])
    if empty.any():
        return (f"{int(empty.sum())} trained positions with a top-K log-prob of -inf while the rest of the "
                "vocabulary has probability (a target no teacher gives)")
    return None


@dataclass
class VerifyReport:
    """Result of :func:`~destila.cache.checks.verify.verify_cache`, a cache's or an export's; ``ok`` when complete
    and without faults."""

    path: Path
    complete: bool
    sequences: int
    stored_sequences: int
    shards_checked: int = 0
    faults: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    max_mass_error: float = 0.0
    unit: str = "shards"  # what shards_checked counts: shards, or an export's files

    @property
    def ok(self) -> bool:
        return self.complete and not self.faults


def row_faults(stored: dict, manifest, report: VerifyReport, encoding=None) -> list[str]:
    """What is wrong with one stored row (``encoding``: whose order and rounding rules apply; default the manifest's)."""
    vocab, faults = manifest.vocab_size, []
    inputs, hidden = stored["input_ids"], stored.get("hidden")
    if hidden is not None and not torch.isfinite(hidden).all():
        faults.append(f"{int((~torch.isfinite(hidden)).sum())} non-finite stored teacher hidden-state values")
    if inputs.min() < 0 or inputs.max() >= vocab:
        faults.append(f"input_ids outside [0, {vocab})")
    positions = stored.get("position_ids")
    if positions is not None and positions.size and positions.min() < 0:
        faults.append(f"negative position_ids (min {int(positions.min())})")
    elif positions is not None:  # runs from 0, and a loss mask inside them (checks/documents.py)
        fault = document_fault(positions, stored["loss_mask"], [0, len(positions)])
        if fault is not None:
            faults.append(fault[1])
    kind = kind_of(manifest.target_kind)
    return faults + kind.check_row(stored, manifest, encoding or encoding_of(manifest.encoding), report)
