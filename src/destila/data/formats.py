"""The data format read from the source's fields, as TRL's trainers detect it.

A spec that names no field (the default ``text_field="text"``) over a source
without a ``text`` field is read by what it holds instead: ``messages``
(conversations, loss on assistant turns) or ``prompt`` + ``completion``
(loss on completions). A source with a ``text`` field, or a spec naming its
fields, is read as given. Naive equivalent::

    columns = first_row.keys()
    if "text" not in columns and "messages" in columns: spec.messages_field = "messages"
    elif "text" not in columns and {"prompt", "completion"} <= columns: spec.prompt_field, ... = ...
"""

from __future__ import annotations

from destila.data.sources import PYDOC, _load, column_names, quiet_datasets
from destila.data.stdlib import STDLIB
from destila.data.spec import DEFAULT_LOSS_ON, DEFAULT_PACKING, DataSpec

DEFAULT_TEXT_FIELD = "text"


def detect_format(spec: DataSpec) -> DataSpec:
    """``spec`` with the fields of its source's format when it names none; else ``spec`` unchanged."""
    names_a_field = (spec.messages_field, spec.prompt_field, spec.text_field) != (None, None, DEFAULT_TEXT_FIELD)
    if names_a_field or spec.source in (PYDOC, STDLIB):
        return spec
    try:
        with quiet_datasets():
            names = set(column_names(_load(spec)) or [])
    except (OSError, ValueError):
        return spec  # the source cannot be read now: reading it for the store reports why, or a built store is reused
    if DEFAULT_TEXT_FIELD in names:
        return spec
    if "messages" in names:
        return _as_format(spec, "messages", messages_field="messages")
    if {"prompt", "completion"} <= names:
        return _as_format(spec, "prompt_completion", prompt_field="prompt", completion_field="completion")
    return spec  # the missing "text" field is reported with the fields found


def _as_format(spec: DataSpec, data_format: str, **fields) -> DataSpec:
    """``spec`` read as ``data_format``: that format's default loss positions and packing where the spec has
    plain text's."""
    keep = {name: getattr(spec, name) for name, defaults in (("loss_on", DEFAULT_LOSS_ON), ("packing", DEFAULT_PACKING))
            if getattr(spec, name) != defaults["text"]}
    return spec.replace(**fields, loss_on=keep.get("loss_on"), packing=keep.get("packing"))


def is_conversation(value) -> bool:
    """True for a list of ``{role, content}`` messages (TRL's conversational prompt or completion)."""
    return isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value)


def conversational_pair(tokenizer, prompt: list, completion: list) -> tuple[list[int], int]:
    """TRL's conversational prompt/completion: ``(ids, n)``, the token ids of the whole conversation rendered
    with the chat template, of which the first ``n`` are the prompt (with the generation prompt).

    As TRL renders it: the prompt with ``add_generation_prompt=True``, then the prompt and completion
    together; the completion is what the second adds to the first. Naive equivalent::

        head = render(prompt, add_generation_prompt=True); whole = render(prompt + completion)
        ids = tokenize(head) + tokenize(whole[len(head):])
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("tokenizer: has no chat template, so conversational prompt/completion pairs cannot be "
                         "rendered; use a teacher whose tokenizer has one, or give the pairs as text")
    if not (is_conversation(prompt) and is_conversation(completion)):
        raise ValueError("data: a conversational prompt/completion pair holds a list of {role, content} messages "
                         "in both fields; found one as text and one as messages")
    clean = lambda messages: [{k: v for k, v in m.items() if v is not None} for m in messages]  # noqa: E731
    head = tokenizer.apply_chat_template(clean(prompt), tokenize=False, add_generation_prompt=True)
    whole = tokenizer.apply_chat_template(clean(prompt) + clean(completion), tokenize=False)
    if not whole.startswith(head):
        raise ValueError("tokenizer: its chat template does not render the prompt (with the generation prompt) as "
                         "the beginning of the whole conversation, so the completion cannot be located; give the "
                         "pairs as one conversation with --messages-field")
    tokenize = lambda text: tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]  # noqa: E731
    prompt_ids = tokenize(head)
    return prompt_ids + tokenize(whole[len(head):]), len(prompt_ids)
