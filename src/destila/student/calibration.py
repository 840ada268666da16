"""Calibration text: a few thousand tokens on which a student design is measured.

They come from a cache's ``input_ids`` (the text the student will be
distilled on) or from any data source (``pydoc``, a text file, a folder, a
jsonl file). Part of the rows is held out: the layers and channels are
chosen on the rest, and the starting perplexity is measured on the held-out
rows, so the figure is not flattered by the choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from destila.cache import TopKCache
from destila.constants import IGNORE_INDEX
from destila.data import DataSpec, as_data_spec, as_sequences, collate, describe_data
from destila.ranges import check_int_at_least
from destila.models import tokenizer_fingerprint
from destila.student.spec import DEFAULT_CALIBRATION_TOKENS

DEFAULT_CALIBRATION_SEQ_LEN = 256
HELD_OUT_SHARE = 4
"""One row in this many (at least one, when there are two or more) is held out for the perplexity."""
ADVISED_TOKENS = 1024
"""Below this many calibration tokens a layer's or a channel's measured importance is mostly noise: warned of."""


@dataclass
class Calibration:
    """Token rows ``input_ids [S, L]``; ``scored [S, L]`` is True where position t has a next token to predict.

    ``position_ids [S, L]`` (or None) restart at each packed document, as in the cache.
    """

    input_ids: torch.Tensor
    scored: torch.Tensor
    position_ids: torch.Tensor | None = None
    source: str = ""

    @property
    def tokens(self) -> int:
        return int(self.input_ids.numel())

    def rows(self, index) -> "Calibration":
        pick = lambda t: None if t is None else t[index]  # noqa: E731
        return Calibration(self.input_ids[index], self.scored[index], pick(self.position_ids), self.source)

    def split(self) -> tuple["Calibration", "Calibration"]:
        """``(selection, held_out)``: the last quarter of the rows is held out; one row serves as both."""
        rows = self.input_ids.shape[0]
        if rows < 2:
            return self, self
        held = max(1, rows // HELD_OUT_SHARE)
        return self.rows(slice(0, rows - held)), self.rows(slice(rows - held, rows))

    def batches(self, tokens_per_batch: int = 2048):
        """The rows in batches of about ``tokens_per_batch`` tokens (at least one row each)."""
        rows, length = self.input_ids.shape
        step = max(1, tokens_per_batch // max(length, 1))
        for start in range(0, rows, step):
            yield self.rows(slice(start, min(start + step, rows)))

    def forward_kwargs(self) -> dict:
        kwargs = {"input_ids": self.input_ids}
        if self.position_ids is not None:
            kwargs["position_ids"] = self.position_ids
        return kwargs


def _first_rows(sequences, tokens: int, name: str) -> list[dict]:
    """The first items of ``sequences`` (a cache or packed sequences) holding about ``tokens`` tokens."""
    items, total = [], 0
    for index in range(len(sequences)):
        items.append(sequences[index])
        total += items[-1]["input_ids"].numel()
        if total >= tokens:
            break
    if not items:
        raise ValueError(f"calibration: {name} holds no full row of tokens; give more text or lower the row length")
    return items


def few_tokens_warning(calibration: Calibration) -> str | None:
    """One line saying that ``calibration`` is too small to choose on (below :data:`ADVISED_TOKENS`), or None."""
    if calibration.tokens >= ADVISED_TOKENS:
        return None
    rows = calibration.input_ids.shape[0]
    held = "none held out" if rows < 2 else f"{max(1, rows // HELD_OUT_SHARE)} held out"
    return (f"calibration: only {calibration.tokens:,} tokens ({rows} row{'s' if rows != 1 else ''}, {held}) from "
            f"{calibration.source or 'the text given'}; what is measured on so few (layers, channels, the starting "
            f"perplexity) is mostly noise: give {ADVISED_TOKENS:,} or more (--calibration-tokens, default "
            f"{DEFAULT_CALIBRATION_TOKENS:,})")


def from_cache(path, tokens: int = DEFAULT_CALIBRATION_TOKENS, tokenizer=None) -> Calibration:
    """The first rows of the cache at ``path`` holding about ``tokens`` tokens.

    ``tokenizer`` (the teacher's) is checked against the cache's: token ids
    mean nothing to a teacher with another vocabulary.
    """
    cache = TopKCache(path)
    if tokenizer is not None and cache.manifest.tokenizer_fingerprint != tokenizer_fingerprint(tokenizer):
        raise ValueError(
            f"--cache: {path} was built with another tokenizer than the teacher's; "
            "pass a cache of this teacher (or --data for plain text)"
        )
    items = _first_rows(cache, tokens, f"--cache {path}")
    return Calibration(torch.stack([item["input_ids"] for item in items]),
                       torch.stack([item["labels"] != IGNORE_INDEX for item in items]),
                       torch.stack([item["position_ids"] for item in items]), source=f"cache {path}")


def from_data(data, tokenizer, tokens: int = DEFAULT_CALIBRATION_TOKENS,
              seq_len: int = DEFAULT_CALIBRATION_SEQ_LEN, source: str = "") -> Calibration:
    """About ``tokens`` tokens of ``data`` (a :class:`~destila.data.DataSpec`, a source name or path, or a list
    of documents), packed as a cache build packs them: documents concatenated and cut into rows of ``seq_len``
    tokens (fewer when ``tokens`` is smaller), positions restarting at each document.

    Naive equivalent: ``ids = sum((tok(t).input_ids + [eos] for t in texts), [])[:tokens]`` reshaped to
    ``[-1, seq_len]`` (an incomplete last row dropped), each document attending to itself only.
    """
    check_int_at_least("calibration_tokens", tokens, 2)
    check_int_at_least("seq_len", seq_len, 2)
    spec = as_data_spec(data) if isinstance(data, DataSpec) else as_data_spec(data, packing="documents")
    length = min(seq_len, tokens)
    spec = spec.replace(seq_len=length, max_tokens=max(tokens // length, 1) * length)
    name = source or describe_data(spec)
    batch = collate(_first_rows(as_sequences(spec, tokenizer), tokens, name))
    return Calibration(batch["input_ids"], batch["labels"] != IGNORE_INDEX, batch["position_ids"],
                       source=source or f"data {name}")


def from_texts(texts: list[str], tokenizer, tokens: int = DEFAULT_CALIBRATION_TOKENS,
               seq_len: int = DEFAULT_CALIBRATION_SEQ_LEN, source: str = "") -> Calibration:
    """:func:`from_data` over documents given in Python."""
    return from_data(list(texts), tokenizer, tokens, seq_len, source=source)


def next_token_nll(model, calibration: Calibration) -> tuple[float, int]:
    """``(sum of -log p(next token), count)`` over the scored positions of ``calibration``.

    Naive equivalent: ``F.cross_entropy(model(ids).logits[scored], ids[:, 1:][scored[:, :-1]], reduction="sum")``.
    """
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in calibration.batches():
            logits = model(**batch.forward_kwargs(), use_cache=False).logits.float()
            total += nll_of_logits(logits, batch).item()
            count += int(batch.scored[:, :-1].sum())
    return total, count


def nll_of_logits(logits: torch.Tensor, batch: Calibration) -> torch.Tensor:
    """Summed next-token NLL of ``logits [S, L, V]`` at the scored positions (the last column never is)."""
    mask = batch.scored[:, :-1]
    targets = batch.input_ids[:, 1:][mask]
    return torch.nn.functional.cross_entropy(logits[:, :-1][mask], targets, reduction="sum")


def perplexity(model, calibration: Calibration) -> float:
    """exp(mean next-token NLL) of ``model`` on ``calibration``."""
    total, count = next_token_nll(model, calibration)
    return math.exp(total / max(count, 1))
