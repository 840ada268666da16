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
from destila.data.from_dataset import dataset_source, spec_for
from destila.data.sources import in_memory_records


def load_source(data, tokenizer, seq_len: int, max_tokens: int | None, text_field: str, main_first=None,
                spans: bool = False):
    """``(source, description, data_fingerprint)`` for the writer: the packed source of ``data``, a
    human-readable name of where it came from, and a hash of the tokenised documents.

    ``data``: a :class:`~destila.data.DataSpec` (its ``seq_len``, ``max_tokens`` and ``text_field`` must
    agree with the build's), a source name read as plain text, a list of documents, or rows given in
    Python (a ``datasets.Dataset`` or a list of dicts: text, messages or prompt/completion, read by
    their columns as :func:`destila.data.from_dataset.spec_for` does, packed as a file of them would be). ``main_first``: a
    context manager factory under which rank 0 tokenises before the others map its store. ``spans``: the
    items carry each token's byte span in its document (:mod:`destila.data.spans`).
    """
    if isinstance(data, DataSpec):
        build = {"seq_len": seq_len, "max_tokens": max_tokens, "text_field": text_field}
        differ = {k: (getattr(data, k), v) for k, v in build.items() if getattr(data, k) != v}
        if differ:
            raise ValueError("data: the DataSpec and the build disagree on " + ", ".join(
                f"{k} ({a!r} vs {b!r})" for k, (a, b) in differ.items()) + "; give the same values to both")
        source, description = packed_source(data, tokenizer, main_first=main_first, spans=spans), data.source
    elif (records := in_memory_records(data)) is not None:  # a datasets.Dataset, or a list of dicts
        if "input_ids" in (records.column_names or []):
            raise ValueError("data: rows already tokenised (input_ids) carry no text for the teacher's loss masks; "
                             "give text, messages or prompt/completion rows")
        spec = spec_for(records, seq_len=seq_len, packing=None, max_tokens=max_tokens,
                        **({"text_field": text_field} if text_field != "text" else {}))
        source = dataset_source(records, tokenizer, spec, trim=False, spans=spans)
        description = f"<{len(records)} {spec.kind} rows given in Python>"
    elif isinstance(data, (str, Path)):
        spec = DataSpec(str(data), text_field=text_field, seq_len=seq_len, max_tokens=max_tokens)
        source, description = packed_source(spec, tokenizer, main_first=main_first, spans=spans), str(data)
    else:
        source = texts_source(list(data), tokenizer, seq_len=seq_len, max_tokens=max_tokens, spans=spans)
        description = f"<{len(data)} documents given in Python>"
    return source, description, source.store.fingerprint
