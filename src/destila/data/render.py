"""Documents to tokens, with the positions that are trained.

Each record becomes one document: ``input_ids`` and ``targets`` of the same
length, ``targets[j]`` True when token j is a trained prediction (the loss
at position j-1 counts). The packed source turns this into the per-position
``loss_mask`` (``loss_mask[t] = targets[t+1]`` inside one document).

- text: ``tokenizer(text) + [eos]``; every token a target.
- prompt/completion: ``tokenizer(prompt) + tokenizer(completion) + [eos]``;
  targets on the completion and its EOS (``loss_on="completion"``).
- conversations: the teacher tokenizer's chat template renders the whole
  conversation once; with ``loss_on="assistant"`` the targets are the tokens
  of each assistant turn: from the end of the generation prompt
  (``<|im_start|>assistant\\n`` in ChatML) through the turn's end marker
  (``<|im_end|>``), without the whitespace the template puts between turns.

A template with Hugging Face's ``{% generation %}`` markers says itself which
tokens are the assistant's: its mask (``return_assistant_tokens_mask``, as
TRL uses it) gives the targets, and templates that rewrite earlier turns
(reasoning templates that drop past thoughts) work too. Without markers,
assistant spans are found by rendering prefixes, which works with any
template that renders a conversation as the concatenation of its turns::

    start = len(render(messages[:i], add_generation_prompt=True))
    end   = len(render(messages[:i + 1]).rstrip())
    # token j is a target  <=>  its first character lies in [start, end)
"""

from __future__ import annotations

import re
from typing import Callable

from destila.data.budgeted import BudgetedText, text_values
from destila.data.formats import conversational_pair, is_conversation
from destila.data.record_errors import RecordError
from destila.data.spans import check_spells_bytes

# Hugging Face's assistant markers in a chat template: {% generation %} … {% endgeneration %}.
_GENERATION_MARKER = re.compile(r"\{%-?\s*generation\s*-?%\}")


def has_generation_markers(tokenizer) -> bool:
    """True when the tokenizer's chat template marks assistant tokens with ``{% generation %}``."""
    template = getattr(tokenizer, "chat_template", None)
    return isinstance(template, str) and bool(_GENERATION_MARKER.search(template))


def encoder(spec, tokenizer, spans: bool = False, token_budget: int | None = None) -> Callable[[dict], dict]:
    """A batched function ``{field: [values]} -> {"input_ids": [[int]], "targets": [[bool]]}`` for ``datasets.map``.

    ``spans=True`` adds ``span_start`` and ``span_end`` (``[[int]]``): each token's byte span in its
    document's text (the rendered text, for conversations; prompt then completion, for pairs), see
    :mod:`destila.data.spans`. ``token_budget``: the store keeps only the first this many tokens, read in
    order; plain text (without spans) is then tokenised only as far as that
    (:class:`~destila.data.budgeted.BudgetedText`), so a huge document costs the budget, not its length.
    """
    if tokenizer.eos_token_id is None:
        raise ValueError(
            f"tokenizer: {type(tokenizer).__name__} has no EOS token to end documents; set tokenizer.eos_token"
        )
    check, encode = _FORMATS[spec.format]
    check(tokenizer, spec)
    if not spans:
        if token_budget is not None and spec.format == "text":
            return BudgetedText(tokenizer, spec, token_budget)
        return lambda batch: encode(*(batch[column] for column in spec.columns), tokenizer, spec)
    speller = check_spells_bytes(tokenizer, "tokenizer (byte spans, --spans)")

    def encode_with_spans(batch):
        texts: list[str] = []
        encoded = encode(*(batch[column] for column in spec.columns), tokenizer, spec, texts)
        starts, ends = [], []
        for text, ids in zip(texts, encoded["input_ids"]):
            start, end = speller.spans(text, ids) if ids else ([], [])
            starts.append([int(v) for v in start])
            ends.append([int(v) for v in end])
        return {**encoded, "span_start": starts, "span_end": ends}

    return encode_with_spans


def _check_chat_tokenizer(tokenizer, spec) -> None:
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "tokenizer: has no chat template, so conversations cannot be rendered; use a teacher whose "
            "tokenizer has one (an instruct model), or give plain text with --text-field"
        )
    if spec.loss_on == "assistant" and not getattr(tokenizer, "is_fast", False):
        raise ValueError("tokenizer: assistant masks need a fast tokenizer (character offsets); pass --loss-on all")


def _any_tokenizer(tokenizer, spec) -> None:
    """Plain text and prompt/completion pairs need nothing beyond an EOS token."""


def _tokenize(tokenizer, texts: list[str]) -> list[list[int]]:
    # verbose=False: documents longer than the model's context are expected
    # here (packing splits them), so the length warning is noise.
    return tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]


def _encode_text(values, tokenizer, spec, documents: list | None = None) -> dict:
    """``documents``, when given, receives each record's text (what byte spans are measured in)."""
    texts = text_values(values, spec)
    eos = tokenizer.eos_token_id
    ids = [tokens + [eos] if text else [] for text, tokens in zip(texts, _tokenize(tokenizer, texts))]
    if documents is not None:
        documents.extend(texts)
    return {"input_ids": ids, "targets": [[True] * len(row) for row in ids]}


def _encode_pairs(prompts, completions, tokenizer, spec, documents: list | None = None) -> dict:
    if any(isinstance(v, list) for v in (*prompts, *completions)):  # TRL's conversational prompt/completion
        return _encode_conversational_pairs(prompts, completions, tokenizer, spec, documents)
    for name, values in ((spec.prompt_field, prompts), (spec.completion_field, completions)):
        bad = next((v for v in values if v is not None and not isinstance(v, str)), None)
        if bad is not None:
            raise ValueError(
                f"data: field {name!r} holds {type(bad).__name__}, expected text; conversations go in one "
                "field passed with --messages-field"
            )
    prompts = [p or "" for p in prompts]
    completions = [c or "" for c in completions]
    eos = tokenizer.eos_token_id
    ids, targets = [], []
    for p_ids, c_ids, completion in zip(_tokenize(tokenizer, prompts), _tokenize(tokenizer, completions), completions):
        if not completion:  # nothing to learn from a pair without a completion
            ids.append([]), targets.append([])
            continue
        c_ids = c_ids + [eos]
        ids.append(p_ids + c_ids)
        trained = spec.loss_on == "all"
        targets.append([trained] * len(p_ids) + [True] * len(c_ids))
    if documents is not None:
        documents.extend(p + c if c else "" for p, c in zip(prompts, completions))
    return {"input_ids": ids, "targets": targets}


def _encode_conversational_pairs(prompts, completions, tokenizer, spec, documents: list | None = None) -> dict:
    """Pairs whose prompt and completion are lists of messages (TRL's conversational format): rendered with the
    chat template (:func:`destila.data.formats.conversational_pair`); the completion's tokens are targets.
    ``documents`` receives each pair's rendered conversation (what byte spans are measured in)."""
    ids, targets = [], []
    for prompt, completion in zip(prompts, completions):
        fault = pair_fault(prompt, completion, spec)
        if fault is not None:
            raise RecordError(f"data: {fault}")
        if not completion:  # nothing to learn from a pair without a completion
            ids.append([]), targets.append([])
            if documents is not None:
                documents.append("")
            continue
        tokens, head = conversational_pair(tokenizer, prompt or [], completion)
        ids.append(tokens)
        targets.append([spec.loss_on == "all"] * head + [True] * (len(tokens) - head))
        if documents is not None:
            documents.append(_render(tokenizer, _check_messages(prompt or [], spec.prompt_field)
                                     + _check_messages(completion, spec.completion_field)))
    return {"input_ids": ids, "targets": targets}


def pair_fault(prompt, completion, spec) -> str | None:
    """Why one prompt/completion pair cannot be rendered as TRL's conversational pair, naming the field at fault,
    or None. Data with a list in any pair is read as conversational pairs: both fields lists of messages."""
    fields = ((spec.prompt_field, prompt), (spec.completion_field, completion))
    for name, value in fields:
        if isinstance(value, list) and not is_conversation(value):
            kinds = sorted({type(m).__name__ for m in value if not (isinstance(m, dict) and "role" in m)})
            return (f"field {name!r} holds a list of {' and '.join(kinds)}, not of {{'role', 'content'}} messages; "
                    "expected text, or messages as in TRL's conversational prompt/completion; fix or remove the "
                    "record")
    lists = [name for name, value in fields if isinstance(value, list)]
    if not lists:
        return (f"this pair gives {spec.prompt_field!r} and {spec.completion_field!r} as text, while other pairs of "
                "the data give them as lists of messages; give every pair the same way")
    if len(lists) == 1:
        other, value = next((name, value) for name, value in fields if name != lists[0])
        if value is not None:
            return (f"field {lists[0]!r} holds a list of messages, but field {other!r} holds "
                    f"{'text' if isinstance(value, str) else type(value).__name__}; a conversational pair gives both "
                    "as lists of {'role', 'content'} messages (or both as text)")
    try:
        for name, value in fields:
            _check_messages(value, name)
    except RecordError as err:
        return str(err).removeprefix("data: ")
    return None


def _check_messages(messages, field: str) -> list:
    if messages is None:
        return []
    if not isinstance(messages, list) or any(not isinstance(m, dict) or "role" not in m for m in messages):
        found = type(messages).__name__ if not isinstance(messages, list) else "a list of something else"
        raise RecordError(
            f"data: field {field!r} holds {found}; expected a conversation, a list of {{'role', 'content'}} "
            "messages (use --text-field for plain text)"
        )
    kept = [{k: v for k, v in m.items() if v is not None} for m in messages]  # Arrow fills absent keys with None
    for number, message in enumerate(kept, start=1):
        content = message.get("content")
        if not isinstance(content, str):
            found = "no content" if content is None else f"content of type {type(content).__name__}"
            raise RecordError(f"data: field {field!r}, message {number} (role {message['role']!r}) has {found}; "
                              "expected its text as a string in 'content'; fix or remove the record")
    return kept


def record_fault(record: dict, spec) -> str | None:
    """What :func:`encoder` would refuse in this one record (a dict of a file's line), or None."""
    columns = {"messages": (spec.messages_field,), "prompt_completion": ()}.get(spec.format, ())
    try:
        if spec.format == "text":
            text_values([record.get(spec.text_field)], spec)
        prompt, completion = record.get(spec.prompt_field or ""), record.get(spec.completion_field or "")
        if spec.format == "prompt_completion" and (isinstance(prompt, list) or isinstance(completion, list)):
            fault = pair_fault(prompt, completion, spec)
            if fault is not None:
                return f"data: {fault}"
        for column in columns:
            _check_messages(record.get(column), column)
    except RecordError as err:
        return str(err)
    return None


def _render(tokenizer, messages, generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def assistant_spans(tokenizer, messages: list[dict]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the ``[start, end)`` character spans of its assistant turns."""
    text = _render(tokenizer, messages)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = _render(tokenizer, messages[:i], generation_prompt=True) if i else ""
        upto = _render(tokenizer, messages[: i + 1])
        if not (upto.startswith(before) and text.startswith(upto)):
            raise ValueError(
                "tokenizer: its chat template does not render a conversation as the concatenation of its turns "
                f"(turn {i} changes the text before it), so assistant positions cannot be located; mark the "
                "assistant's tokens in the template with {% generation %} … {% endgeneration %}, or pass --loss-on all"
            )
        end = len(upto.rstrip())
        spans.append((len(before), max(end, len(before))))
    return text, spans


def _encode_messages(values, tokenizer, spec, documents: list | None = None) -> dict:
    ids, targets = [], []
    for value in values:
        messages = _check_messages(value, spec.messages_field)
        if not messages:
            ids.append([]), targets.append([])
            if documents is not None:
                documents.append("")
            continue
        if spec.loss_on == "assistant" and has_generation_markers(tokenizer):
            encoded = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                                    return_assistant_tokens_mask=True)
            ids.append(list(encoded["input_ids"]))
            targets.append([bool(m) for m in encoded["assistant_masks"]])
            if documents is not None:
                documents.append(_render(tokenizer, messages))
            continue
        if spec.loss_on == "all":
            text, spans = _render(tokenizer, messages), None
        else:
            text, spans = assistant_spans(tokenizer, messages)
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=spans is not None, verbose=False)
        ids.append(list(encoded["input_ids"]))
        if documents is not None:
            documents.append(text)
        if spans is None:
            targets.append([True] * len(ids[-1]))
            continue
        targets.append([any(start <= first < end for start, end in spans) for first, _ in encoded["offset_mapping"]])
    return {"input_ids": ids, "targets": targets}


# Each data format (DataSpec.format): the check of the tokenizer, then the batched encoder of its columns.
_FORMATS = {
    "text": (_any_tokenizer, _encode_text),
    "prompt_completion": (_any_tokenizer, _encode_pairs),
    "messages": (_check_chat_tokenizer, _encode_messages),
}
