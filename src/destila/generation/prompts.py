"""Prompts for ``destila generate``: plain text or conversations, from a file or from Python.

- a ``.txt`` file: one prompt per non-empty line;
- a ``.jsonl``/``.json``/``.parquet`` file: one prompt per row, from the
  ``messages`` field (a conversation: a list of ``{"role", "content"}``) when
  the row has it, else from the ``prompt`` field (text);
- a Python list of strings or of conversations.

A conversation that ends with an assistant turn has that turn dropped: the
teacher writes it anew (sequence-level distillation of an existing chat set).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_ROW_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


@dataclass(frozen=True)
class Prompt:
    """One prompt: ``text`` (plain) or ``messages`` (a conversation ending with a user or system turn)."""

    text: str | None = None
    messages: tuple | None = None

    def conversation(self) -> list[dict]:
        """The prompt as a list of messages (a text prompt is one user turn)."""
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.text}]


def _as_conversation(value, where: str) -> tuple:
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"prompts: {where}: expected a non-empty list of messages, found {type(value).__name__}")
    messages = []
    for number, message in enumerate(value):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) \
                or not isinstance(message.get("content"), str):
            raise ValueError(
                f"prompts: {where}, message {number}: expected {{'role': str, 'content': str}}, found {message!r}"
            )
        # datasets fills keys that other rows have with None; they are not part of this message.
        messages.append({k: v for k, v in message.items() if v is not None})
    if messages[-1]["role"] == "assistant":
        messages = messages[:-1]
    if not messages:
        raise ValueError(f"prompts: {where}: the conversation holds only an assistant turn; nothing to answer")
    return tuple(messages)


def _prompt(value, where: str) -> Prompt:
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"prompts: {where}: empty prompt")
        return Prompt(text=value)
    return Prompt(messages=_as_conversation(value, where))


def load_prompts(source, *, prompt_field: str = "prompt", messages_field: str = "messages") -> list[Prompt]:
    """The prompts of ``source`` in file order; see the module docstring for what is accepted."""
    if isinstance(source, (list, tuple)):
        prompts = [_prompt(value, f"item {i}") for i, value in enumerate(source)]
    else:
        prompts = _load_file(Path(source).expanduser(), prompt_field, messages_field)
    if not prompts:
        raise ValueError(f"prompts: {source} holds no prompt; expected at least one")
    return prompts


def _load_file(path: Path, prompt_field: str, messages_field: str) -> list[Prompt]:
    if not path.is_file():
        raise FileNotFoundError(f"prompts: no such file: {path}; expected a .txt, .jsonl, .json or .parquet file")
    suffix = path.suffix.lower()
    if suffix == ".txt":
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            raise ValueError(f"prompts: not UTF-8 text at {path}; expected a UTF-8 .txt file, one prompt per "
                             "line; convert it") from None
        return [Prompt(text=line) for line in lines if line.strip()]
    if suffix not in _ROW_FORMATS:
        raise ValueError(f"prompts: unknown format {suffix or '(no suffix)'} for {path}; "
                         "expected .txt (one prompt per line), .jsonl, .json or .parquet")
    # datasets is heavy: only for prompts in a file of rows
    import datasets

    from destila.data.sources import quiet_datasets, unreadable  # heavy: destila.data imports torch; the spec stays light

    with quiet_datasets():
        try:
            rows = datasets.load_dataset(_ROW_FORMATS[suffix], data_files=[str(path)], split="train")
        except Exception as err:  # datasets wraps a malformed row without naming the file
            raise unreadable(_ROW_FORMATS[suffix], [str(path)], err) from err
    if messages_field in rows.column_names:
        column = messages_field
    elif prompt_field in rows.column_names:
        column = prompt_field
    else:
        raise ValueError(
            f"prompts: {path} has neither a {messages_field!r} field (conversations) nor a {prompt_field!r} field "
            f"(text); fields found: {', '.join(rows.column_names) or '(none)'}; pass --messages-field or "
            "--prompt-field with one of them"
        )
    return [_prompt(value, f"{path.name} row {i}") for i, value in enumerate(rows[column])]
