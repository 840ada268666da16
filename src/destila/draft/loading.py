"""The teacher and the draft for a measurement: loaded alike, the draft's tokenizer compared with the teacher's."""

from __future__ import annotations


def load_pair(spec) -> tuple:
    """``(teacher, tokenizer, draft, draft_tokenizer)`` for a :class:`~destila.draft.spec.DraftEvalSpec`.

    The draft is loaded in the teacher's dtype and on its device (assisted
    generation runs both in one process); ``spec.draft_vocab`` narrows its head.
    """
    from destila.draft.head import narrow_head, read_ranking
    from destila.models import check_source, load_causal_lm, load_tokenizer

    if spec.draft is None:
        raise ValueError("--draft: expected the draft model to measure, found none")
    check_source(spec.teacher)
    check_source(spec.draft)
    tokenizer, draft_tokenizer = load_tokenizer(spec.teacher), load_tokenizer(spec.draft)
    if spec.draft_vocab is not None and tokenizer_options(tokenizer, draft_tokenizer):
        raise ValueError("--draft-vocab: the draft ranks the teacher's tokens, but its tokenizer differs from the "
                         "teacher's; leave --draft-vocab out for a draft on another tokenizer")
    ranking = read_ranking(spec.draft) if spec.draft_vocab is not None else None
    teacher = load_causal_lm(spec.teacher, device=spec.device)
    draft = load_causal_lm(spec.draft, device=spec.device, dtype=teacher.dtype)
    if ranking is not None:
        narrow_head(draft, ranking, spec.draft_vocab)
    return teacher, tokenizer, draft, draft_tokenizer


def tokenizer_options(tokenizer, draft_tokenizer) -> dict | None:
    """``None`` when both tokenizers give the same ids; else the two tokenizers, which transformers' universal
    assisted generation needs to translate the draft's proposals into the teacher's tokens."""
    if tokenizer.get_vocab() == draft_tokenizer.get_vocab():
        return None
    return {"tokenizer": tokenizer, "assistant_tokenizer": draft_tokenizer}
