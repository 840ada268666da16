"""Held-out items for a model whose tokenizer is not the cache's, and bits per byte from a cache's byte spans.

Perplexity is per token: a model that cuts the same text into more, shorter
tokens scores a lower perplexity for the same predictions, so models with
different tokenizers are compared per byte::

    bits_per_byte = Σ −ln q(label) / (ln 2 · Σ bytes of the labels' tokens)

The bytes come from the cache's byte spans (``cache build --spans``): a
label token's span width, 0 for a special token the text does not hold (the
EOS after a document). A model with another tokenizer than the cache's reads
the cache through :class:`~destila.crosstok.dataset.CrossTokenizerCache`
(its items carry ``label_bytes`` and ``align_kind``); its KL and top-1
agreement to the teacher are measured on the aligned one-to-one rows only
(``align_kind`` 1: the teacher's next token is the model's next token, the
same bytes), where the two distributions are over the same events.

Naive equivalent of bits per byte for one text scored whole:
``nll / (math.log(2) * len(text.encode("utf-8")))``.
"""

from __future__ import annotations

from destila.cache.reader import TopKCache
from destila.constants import IGNORE_INDEX
from destila.crosstok.dataset import CrossTokenizerCache
from destila.crosstok.training import differs, refuse_without_spans
from destila.data.collate import shift_labels

ONE_TO_ONE = 1  # destila.crosstok.dataset's align_kind code


def with_label_bytes(item: dict) -> dict:
    """A spans cache item with ``label_bytes [L]``: the bytes of each row's label token (its span width; 0 where
    the row has no label). Labels are position-aligned: row t's label is token t+1."""
    if "span_start" not in item:
        return item
    width = (item["span_end"] - item["span_start"]).clamp(min=0)
    # Shifted as the labels are: row t's bytes are token t+1's (IGNORE_INDEX, clamped to 0, where no label).
    return {**item, "label_bytes": shift_labels(width, item["labels"] != IGNORE_INDEX).clamp(min=0)}


def held_out_source(source, model_path: str, tokenizer, cache_path):
    """``source`` (a cache) as the model reads it: the cache itself when the model's tokenizer is the cache's,
    else the cache in the model's tokens (a spans cache is needed; one without is refused with the line that
    rebuilds it)."""
    if not differs(source, tokenizer):
        return source
    if not isinstance(source, TopKCache):
        raise ValueError(f"eval: {model_path} has another tokenizer than the cache {cache_path}; a model with "
                         "another tokenizer is evaluated on a cache folder built with --spans, not an export")
    refuse_without_spans(source, cache_path, tokenizer, who=f"eval: {model_path}")
    return CrossTokenizerCache(source, tokenizer)
