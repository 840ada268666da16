"""A student that starts from the teacher's weights on another vocabulary: its embedding rows transplanted.

The idea of mergekit's tokensurgeon: keep every layer, and give each
student token the teacher's row of the same bytes when the teacher has one;
otherwise the mean of the teacher rows of the tokens its bytes decompose
into (the teacher's own tokenization of them, or, for bytes that are not
whole characters, the longest teacher tokens that spell them); the special
tokens with a role (EOS, BOS, pad, unknown) take the row of the teacher's
token of the same role. An untied output head gets the same treatment on its
own rows (and bias). Naive equivalent, for the input embeddings::

    for s in range(len(student)):
        t = teacher_ids_of_the_same_bytes_or_pieces(s)          # one id, or the pieces
        new_embedding[s] = old_embedding[t].mean(0)
"""

from __future__ import annotations

import torch

from destila.crosstok.vocab_map import build_vocab_map, spell_greedily, student_index

_ROLES = ("eos_token_id", "bos_token_id", "pad_token_id", "unk_token_id")


def _pieces(raw: bytes, teacher_tokenizer, teacher, index: dict[bytes, int]) -> list[int]:
    """Teacher ids whose bytes spell ``raw``: its own tokenization when it spells them back, else greedy
    longest matches; ``[]`` when some byte has no teacher token."""
    try:
        ids = teacher_tokenizer(raw.decode("utf-8"), add_special_tokens=False)["input_ids"]
        if b"".join(teacher.table[i] for i in ids) == raw:
            return list(ids)
    except UnicodeDecodeError:
        pass
    return spell_greedily(raw, index) or []


def transplant_plan(teacher_tokenizer, student_tokenizer) -> tuple[list[list[int]], dict]:
    """``(sources, counts)``: for each student id the teacher ids whose rows it averages (``[]``: the mean of all
    rows), and how many ids were ``copied`` (same bytes or role), ``composed`` (pieces) or ``mean`` (neither)."""
    vocab = build_vocab_map(teacher_tokenizer, student_tokenizer)
    index = student_index(teacher_tokenizer, vocab.teacher)  # bytes → the teacher id its tokenizer writes
    roles = {getattr(student_tokenizer, r): getattr(teacher_tokenizer, r) for r in _ROLES
             if getattr(student_tokenizer, r, None) is not None and getattr(teacher_tokenizer, r, None) is not None}
    sources, counts = [], {"copied": 0, "composed": 0, "mean": 0}
    for s, raw in enumerate(vocab.student.table):
        if s in roles:
            sources.append([roles[s]])
        elif raw in index:
            sources.append([index[raw]])
        else:
            sources.append(_pieces(raw, teacher_tokenizer, vocab.teacher, index) if raw else [])
            counts["composed" if sources[-1] else "mean"] += 1
            continue
        counts["copied"] += 1
    return sources, counts


def _rows(old: torch.Tensor, sources: list[list[int]]) -> torch.Tensor:
    """``new[s] = old[sources[s]].mean(0)`` (the mean of all rows for an empty list), in one index_add."""
    rows, cols, weights = [], [], []
    for s, ids in enumerate(sources):
        ids = ids or range(old.shape[0])
        rows += [s] * len(ids)
        cols += list(ids)
        weights += [1.0 / len(ids)] * len(ids)
    new = torch.zeros(len(sources), *old.shape[1:], dtype=torch.float64)
    picked = old.detach().double()[torch.tensor(cols)] * torch.tensor(weights, dtype=torch.float64).view(
        -1, *([1] * (old.dim() - 1)))
    new.index_add_(0, torch.tensor(rows), picked)
    return new.to(old.dtype)


def transplant_vocabulary(model, teacher_tokenizer, student_tokenizer) -> dict:
    """Give ``model`` (the teacher's architecture and vocabulary) the student tokenizer's vocabulary, in place.

    Returns the counts of :func:`transplant_plan` and the new vocabulary size;
    the config's special token ids become the student tokenizer's.
    """
    sources, counts = transplant_plan(teacher_tokenizer, student_tokenizer)
    embeddings, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = head is not None and head.weight.data_ptr() == embeddings.weight.data_ptr()
    new_in = _rows(embeddings.weight, sources)
    new_out = None if head is None or tied else _rows(head.weight, sources)
    new_bias = None if new_out is None or getattr(head, "bias", None) is None else _rows(head.bias, sources)
    model.resize_token_embeddings(len(sources), mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(new_in)
        if new_out is not None:
            model.get_output_embeddings().weight.copy_(new_out)
            if new_bias is not None:
                model.get_output_embeddings().bias.copy_(new_bias)
    set_special_ids(model, student_tokenizer)
    return {**counts, "vocab_size": len(sources), "tied_head": tied}


def set_special_ids(model, tokenizer) -> None:
    """The config's (and generation config's) EOS, BOS and pad ids: the tokenizer's."""
    for name in ("eos_token_id", "bos_token_id", "pad_token_id"):
        value = getattr(tokenizer, name, None)
        for config in (model.config, getattr(model, "generation_config", None)):
            if config is not None and hasattr(config, name):
                setattr(config, name, value)
