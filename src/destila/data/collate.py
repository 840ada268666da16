"""The one collate and the one label shift of the project.

Every batch a model trains or is evaluated on goes through :func:`collate`.
Its ``labels`` are position-aligned, like the teacher's targets (the
distribution at t is for token t+1): ``labels[b, t]`` is the token position t
must predict (token t+1) where it is a training target, else ``IGNORE_INDEX``.
The loss, the held-out metrics and the cross-tokenizer datasets read them as
they are; only code of Hugging Face's that shifts labels itself (a model's own
cross-entropy, ``compute_metrics``) is given :func:`hf_labels` of them. Which
tokens are targets, in order:

1. ``loss_mask`` (packed sources): ``labels[t] = input_ids[t+1]`` where ``loss_mask[t]``;
2. cache items (they carry the teacher's ``topk_ids``): their ``labels`` are
   already position-aligned, like the teacher's targets, and are kept;
3. the caller's ``labels`` (Hugging Face convention: ``labels[t]`` is the
   token at t, the shift happens here): ``labels[t] = user_labels[t+1]``;
4. nothing: every next token.

In every case a position is ignored when its target is padding
(``attention_mask[t+1] == 0``) or when it is itself padding, and the last
position has no target. Items of different lengths are right-padded
(``attention_mask`` 0, pad id from ``pad_token_id``).

The issue that shaped this: ``labels=[-100,-100,7,-100,-100]``,
``attention_mask=[1,1,1,0,0]`` trains on exactly one target, the 7, at
position 1 (the model reading tokens 0..1 predicts token 2).
"""

from __future__ import annotations

import torch

from destila.constants import IGNORE_INDEX

# Fields that are per-position and padded on the right; everything else is stacked as is.
_PAD_VALUES = {"input_ids": None, "attention_mask": 0, "labels": IGNORE_INDEX, "loss_mask": False, "position_ids": 0}


def shift_labels(targets: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """``[..., T]`` token-aligned targets to position-aligned labels: ``out[..., t] = targets[..., t+1]``.

    ``valid`` (bool, same shape) marks the positions that may have a label;
    elsewhere, and at the last position, the label is ``IGNORE_INDEX``.
    Naive equivalent: ``[targets[t + 1] if t + 1 < T and valid[t] else -100 for t in range(T)]``.
    """
    labels = torch.full_like(targets, IGNORE_INDEX)
    labels[..., :-1] = targets[..., 1:]
    if valid is not None:
        labels = labels.masked_fill(~valid, IGNORE_INDEX)
    return labels


def hf_labels(aligned: torch.Tensor) -> torch.Tensor:
    """Position-aligned labels (a batch's) to the Hugging Face convention: ``out[..., t] = aligned[..., t-1]``,
    ``out[..., 0] = -100``: what code that shifts labels itself expects (``model(..., labels=)``,
    ``compute_metrics``).

    The inverse of :func:`shift_labels` (the last position never has a target). Naive equivalent:
    ``[-100] + aligned[:-1]``.
    """
    out = torch.full_like(aligned, IGNORE_INDEX)
    out[..., 1:] = aligned[..., :-1]
    return out


def next_token_labels(input_ids: torch.Tensor, loss_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Labels for ``input_ids [..., T]``: the next token where ``loss_mask`` (default everywhere), else ignored."""
    return shift_labels(input_ids, loss_mask)


def _stack(values: list[torch.Tensor], pad) -> torch.Tensor:
    length = max(v.shape[0] for v in values)
    if all(v.shape[0] == length for v in values):
        return torch.stack(values)
    out = torch.full((len(values), length, *values[0].shape[1:]), pad, dtype=values[0].dtype)
    for row, value in enumerate(values):
        out[row, : value.shape[0]] = value
    return out


def collate(items: list[dict], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Batch ``items`` (dicts of ``[T, ...]`` tensors or lists) into ``[B, T, ...]`` tensors with ``labels``.

    Returns the items' fields stacked (right-padded when lengths differ),
    position-aligned ``labels [B, T]`` (see the module docstring), and
    ``attention_mask [B, T]`` only when an item had one or padding was added:
    packed rows keep ``position_ids`` without an attention mask, which is what
    lets transformers build the per-document (block-diagonal) mask.
    """
    if not items:
        raise ValueError("collate: expected at least one item, found an empty list")
    items = [{k: torch.as_tensor(v) for k, v in item.items()} for item in items]
    lengths = [item["input_ids"].shape[0] for item in items]
    padded = len(set(lengths)) > 1
    batch = {}
    for key in items[0]:
        pad = _PAD_VALUES.get(key, 0)
        batch[key] = _stack([item[key] for item in items], pad_token_id if key == "input_ids" else pad)
    batch["input_ids"] = batch["input_ids"].long()
    if padded and "attention_mask" not in batch:
        batch["attention_mask"] = _stack([torch.ones(n, dtype=torch.long) for n in lengths], 0)
    if padded and "position_ids" in batch:
        for row, n in enumerate(lengths):  # padding continues as its own block, as in the packed source
            batch["position_ids"][row, n:] = torch.arange(batch["input_ids"].shape[1] - n)
    attention = batch.get("attention_mask")
    real = attention.bool() if attention is not None else torch.ones_like(batch["input_ids"], dtype=torch.bool)
    # A position is trainable when it is real and its target is real.
    valid = real.clone()
    valid[..., :-1] &= real[..., 1:]
    if "loss_mask" in batch:
        batch["labels"] = shift_labels(batch["input_ids"], valid & batch.pop("loss_mask").bool())
    elif "labels" in batch and "topk_ids" in batch:
        batch["labels"] = batch["labels"].long().masked_fill(~real, IGNORE_INDEX)
    elif "labels" in batch:
        user = batch["labels"].long()
        batch["labels"] = shift_labels(user, valid & (user != IGNORE_INDEX).roll(-1, dims=-1))
    else:
        batch["labels"] = shift_labels(batch["input_ids"], valid)
    return batch
