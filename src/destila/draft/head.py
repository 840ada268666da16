"""A draft head over the teacher's most frequent tokens: a cheaper draft whose output stays exact.

A cut student keeps the teacher's output head, ``[V, H]`` (49,152 × 576 for
SmolLM2): one decoding step of a 2-layer draft spends most of its time
there. The draft's proposals only need to be *likely*, not complete: the
teacher checks every one and writes its own token where a proposal is
wrong, so a draft that can propose only the ``N`` tokens the teacher writes
most often (FR-Spec, Zhao et al. 2025) changes the acceptance a little and
the text not at all. :class:`NarrowHead` computes those ``N`` logits and
leaves the rest at ``-inf``::

    logits = torch.full((..., V), -inf); logits[..., ids] = h @ W[ids].T   # naive equivalent

The token ranking is stored beside the draft as ``draft_vocab.json``
(``{"token_ids": [most frequent first], "counted_tokens": n}``), so the
saved draft stays a plain Hugging Face model and any ``N`` can be chosen
when it is used.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import torch

from destila.io import write_atomic

VOCAB_FILE = "draft_vocab.json"


def frequent_tokens(sequences, vocab_size: int) -> dict:
    """Every token id of ``range(vocab_size)``, most frequent in ``sequences`` (lists of ids) first.

    Ids never seen follow in id order, so any prefix length is valid.
    """
    counts = Counter()
    for ids in sequences:
        counts.update(ids)
    seen = [token for token, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if 0 <= token < vocab_size]
    unseen = sorted(set(range(vocab_size)) - set(seen))
    return {"token_ids": seen + unseen, "counted_tokens": sum(counts.values())}


def write_ranking(folder: str | Path, ranking: dict) -> Path:
    path = Path(folder) / VOCAB_FILE
    write_atomic(path, json.dumps(ranking))
    return path


def read_ranking(folder: str | Path) -> list[int]:
    path = Path(folder) / VOCAB_FILE
    if not path.is_file():
        raise FileNotFoundError(f"draft_vocab: {path} not found; it is written by `destila recipe draft`, or leave "
                                "--draft-vocab out to use the draft's whole head")
    try:
        ids = json.loads(path.read_text(encoding="utf-8"))["token_ids"]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"draft_vocab: {path} is not a token ranking ({err}); expected "
                         '{"token_ids": [...]} as `destila recipe draft` writes it') from None
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise ValueError(f"draft_vocab: {path}: token_ids must be a list of integers")
    return ids


class NarrowHead(torch.nn.Module):
    """``[..., H] → [..., V]`` logits of only the tokens ``ids`` (``-inf`` elsewhere); bias kept if present."""

    swappable_linear = True  # destila.generation.small_matmul may swap ``linear`` for a faster way to the product
    linear = staticmethod(torch.nn.functional.linear)

    def __init__(self, head: torch.nn.Linear, ids: list[int]):
        super().__init__()
        self.vocab_size = head.weight.shape[0]
        index = torch.tensor(ids, dtype=torch.long, device=head.weight.device)
        self.register_buffer("ids", index, persistent=False)
        self.register_buffer("weight", head.weight.detach()[index].clone(), persistent=False)
        bias = None if head.bias is None else head.bias.detach()[index].clone()
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        narrow = self.linear(hidden, self.weight, self.bias)
        logits = hidden.new_full((*hidden.shape[:-1], self.vocab_size), float("-inf"))
        return logits.index_copy_(-1, self.ids, narrow)


def narrow_head(model, ids: list[int], size: int) -> None:
    """Give ``model`` (a draft, in place) a head over ``ids[:size]``; refuses ids outside its vocabulary."""
    head = model.get_output_embeddings()
    vocab = head.weight.shape[0]
    if size > len(ids):
        raise ValueError(f"draft_vocab: expected at most {len(ids)} (the tokens ranked), found {size}")
    chosen = ids[:size]
    if min(chosen) < 0 or max(chosen) >= vocab:
        raise ValueError(f"draft_vocab: the ranking holds token ids outside the draft's vocabulary of {vocab}")
    model.set_output_embeddings(NarrowHead(head, chosen))
