"""The teacher and the draft for a measurement: loaded alike, the draft's tokenizer compared with the teacher's."""

from __future__ import annotations


def load_teacher(spec) -> tuple:
    """``(teacher, tokenizer)`` of a :class:`~destila.draft.spec.DraftEvalSpec`."""
    # destila.models imports torch: only when a model is loaded
    from destila.models import check_source, load_causal_lm, load_tokenizer

    check_source(spec.teacher)
    return load_causal_lm(spec.teacher, device=spec.device), load_tokenizer(spec.teacher)


def load_draft(spec, teacher, tokenizer):
    """The draft, in the teacher's dtype and on its device (assisted generation runs both in
    one process); ``spec.draft_vocab`` narrows its head to that many of its ranked tokens."""
    # destila.draft.head and destila.models import torch: only when a draft is loaded
    from destila.draft.head import narrow_head, read_ranking
    from destila.models import check_source, load_causal_lm, load_tokenizer

    if spec.draft is None:
        raise ValueError("--draft: expected the draft model to measure, found none")
    check_source(spec.draft)
    draft_tokenizer = load_tokenizer(spec.draft)
    if tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        # transformers' universal assisted generation (tokenizer=, assistant_tokenizer=) fails inside its own
        # translation on ordinary prompts in this version (an empty reshape when greedy, a missing attribute when
        # sampling), so a measurement would crash part-way; refused before the draft loads instead.
        raise ValueError(f"--draft: {spec.draft}'s tokenizer differs from the teacher's; expected a draft on the "
                         "teacher's tokenizer (cut from it with `destila student init` or made by `destila recipe "
                         "draft`): transformers' assisted generation across tokenizers is not reliable enough to "
                         "measure")
    ranking = read_ranking(spec.draft) if spec.draft_vocab is not None else None
    draft = load_causal_lm(spec.draft, device=spec.device, dtype=teacher.dtype)
    if ranking is not None:
        narrow_head(draft, ranking, spec.draft_vocab)
    return draft
