"""What the teacher pass iterates over: packed sequences with position ids and a loss mask.

A *packed source* has ``len(source)`` sequences of one length ``L``;
``source[i]`` is ``{"input_ids": LongTensor[L], "position_ids": LongTensor[L],
"loss_mask": BoolTensor[L]}`` (``loss_mask[t]``: the target at t, the token
t+1, is trained) and ``source.fingerprint`` changes whenever any of them does.

:func:`load_source` is the writer's one entry point for data: the
:class:`destila.data.PackedSource` of a :class:`destila.data.DataSpec` (text,
conversations or prompt/completion; documents kept apart by restarting
position ids), tokenised once into the memory-mapped token store.
"""

from __future__ import annotations

from pathlib import Path

from destila.data import DataSpec, packed_source, texts_source


def load_source(data, tokenizer, seq_len: int, max_tokens: int | None, text_field: str, main_first=None):
    """``(source, description, data_fingerprint)`` for the writer: the packed source of ``data``, a
    human-readable name of where it came from, and a hash of the tokenised documents.

    ``data``: a :class:`~destila.data.DataSpec` (its ``seq_len``, ``max_tokens`` and ``text_field`` must
    agree with the build's), a source name read as plain text, or a list of documents. ``main_first``: a
    context manager factory under which rank 0 tokenises before the others map its store.
    """
    if isinstance(data, DataSpec):
        build = {"seq_len": seq_len, "max_tokens": max_tokens, "text_field": text_field}
        differ = {k: (getattr(data, k), v) for k, v in build.items() if getattr(data, k) != v}
        if differ:
            raise ValueError("data: the DataSpec and the build disagree on " + ", ".join(
                f"{k} ({a!r} vs {b!r})" for k, (a, b) in differ.items()) + "; give the same values to both")
        source, description = packed_source(data, tokenizer, main_first=main_first), data.source
    elif isinstance(data, (str, Path)):
        spec = DataSpec(str(data), text_field=text_field, seq_len=seq_len, max_tokens=max_tokens)
        source, description = packed_source(spec, tokenizer, main_first=main_first), str(data)
    else:
        source = texts_source(list(data), tokenizer, seq_len=seq_len, max_tokens=max_tokens)
        description = f"<{len(data)} documents given in Python>"
    return source, description, source.store.fingerprint
