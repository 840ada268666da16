"""Plain text under a token budget: tokenise only as much of each document as the budget can still use.

With ``--max-tokens N`` the token store keeps the first N tokens of the
corpus. A ``.txt`` file is one document, so a 50 MB file of short lines was
tokenised whole (about 12 M tokens, 7 GB of Python lists and offsets) to keep
1024 of them. Here, once the documents read so far leave ``r`` tokens of the
budget, a longer document is tokenised by prefixes: ``text[:c]`` and
``text[:2c]`` (``c`` starting at 8 characters per wanted token, growing 4× until
enough), and the tokens the two agree on are the document's own first tokens
(a cut changes only the tokens around it, so a token both prefixes give is
one the whole document gives too). Its first ``r`` of those are stored; a
document that ends inside the prefix is tokenised whole, as without a budget.

Documents after the budget is met come back empty: the store stops reading
before them (:func:`destila.data.store._write` counts the same way).

Naive equivalent::

    ids = tokenizer(text)["input_ids"] + [eos]      # the whole document, then the store keeps what it needs
"""

from __future__ import annotations

from destila.data.record_errors import RecordError

_CHARS_PER_TOKEN = 8  # a first guess above what tokenizers average on text (about 4 characters per token)


def text_values(values, spec) -> list[str]:
    """The documents of a text field's ``values``: ``""`` for a missing or non-string one (left out, counted).

    A list is refused instead (:class:`RecordError`, named with its line by the reader): a text field holding
    lists is almost always a conversation read as text, and leaving it out would drop the data without a word."""
    texts = []
    for value in values:
        if isinstance(value, list):
            raise RecordError(
                f"data: field {spec.text_field!r} holds a list (a conversation?), not text; pass "
                f"--messages-field {spec.text_field} for conversations, or fix or remove the record"
            )
        texts.append(value if isinstance(value, str) else "")
    return texts


class BudgetedText:
    """A batched ``datasets.map`` function for plain text under a budget of ``budget`` tokens (one pass, in order)."""

    def __init__(self, tokenizer, spec, budget: int):
        self.tokenizer, self.spec, self.budget = tokenizer, spec, budget
        self.eos = tokenizer.eos_token_id
        self.produced = 0

    def __call__(self, batch: dict) -> dict:
        ids = []
        for text in text_values(batch[self.spec.text_field], self.spec):
            left = self.budget - self.produced
            if left <= 0 or not text:
                ids.append([])  # past the budget (never read), or an empty record (counted by the store)
                continue
            ids.append(self._first_tokens(text, left))
            self.produced += len(ids[-1])
        return {"input_ids": ids, "targets": [[True] * len(row) for row in ids]}

    def _tokenize(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]

    def _first_tokens(self, text: str, wanted: int) -> list[int]:
        """The document's first ``wanted`` tokens (or all of them and EOS, when it is shorter)."""
        chars = _CHARS_PER_TOKEN * wanted + 64
        while 2 * chars < len(text):
            first, second = self._tokenize(text[:chars]), self._tokenize(text[: 2 * chars])
            stable = next((i for i, (a, b) in enumerate(zip(first, second)) if a != b), min(len(first), len(second)))
            if stable >= wanted:
                return second[:wanted]
            chars *= 4
        return self._tokenize(text) + [self.eos]
