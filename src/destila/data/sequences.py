"""User data in, packed sequences out: the one function cache build, training and eval call.

    source = as_sequences("chat.jsonl", tokenizer, messages_field="messages", seq_len=1024)
    source = as_sequences(DataSpec("pydoc", seq_len=256), tokenizer)
    source = as_sequences(["a document", "another"], tokenizer, seq_len=64)
    len(source), source[i]["input_ids"], source.fingerprint

Whatever the user gave (a :class:`~destila.data.DataSpec`, a source name or
path, documents as a list of strings, rows as a ``datasets.Dataset`` or a list of dicts), the result is
a :class:`~destila.data.PackedSource` over the memory-mapped token store:
``source[i]`` holds ``input_ids``, ``position_ids`` and ``loss_mask`` ``[L]``.
The pieces behind it (:func:`~destila.data.loader.packed_source`,
:func:`~destila.data.loader.texts_source`,
:func:`~destila.data.from_dataset.dataset_source`) stay public for tests and
tools; code that takes user data calls this.

Naive equivalent::

    spec = data if isinstance(data, DataSpec) else DataSpec(data, **options)
    documents = [tokenizer(text).input_ids for text in load_texts(spec.source)]
    rows = pack(documents, spec.seq_len)
"""

from __future__ import annotations

from destila.data.from_dataset import dataset_source, spec_for
from destila.data.loader import packed_source, texts_source
from destila.data.packed import PackedSource
from destila.data.sources import in_memory_records
from destila.data.spec import TEXTS, DataSpec, GivenRows, as_data_spec, rows_given


def as_sequences(data, tokenizer, *, main_first=None, spans: bool = False, **options) -> PackedSource:
    """The packed sequences of ``data`` tokenised by ``tokenizer``.

    ``data``: a :class:`DataSpec`; a source name or path (``"pydoc"``, a
    file, a folder, a datasets hub name) or a list of documents (strings),
    read with ``options`` as the spec's other fields (``seq_len=``,
    ``max_tokens=``, ``text_field=``, ...; see :func:`as_data_spec`); or rows
    given in Python (a ``datasets.Dataset`` or a list of dicts: text,
    messages or prompt/completion, read by their columns as
    :func:`~destila.data.from_dataset.spec_for` does, TRL's conversational
    pairs among them), packed as a file of them would be. ``main_first``: a
    context manager factory under which the main process tokenises before
    the others map its store (``torchrun``). ``spans``: the items carry each
    token's byte span in its document (:mod:`destila.data.spans`).
    """
    if rows_given(data):
        if isinstance(data, GivenRows):
            data, options = data.rows, {**data.options, **options}
        records = in_memory_records(data)
        if "input_ids" in (records.column_names or []):
            raise ValueError("data: rows already tokenised (input_ids) carry no text for the teacher's loss masks; "
                             "give text, messages or prompt/completion rows")
        if options.get("text_field") == "text":  # the default: the rows' columns decide
            options = {k: v for k, v in options.items() if k != "text_field"}
        spec = spec_for(records, **{"packing": None, **options})
        return dataset_source(records, tokenizer, spec, trim=False, spans=spans)
    spec = as_data_spec(data, **options)
    if spec.documents is not None:
        return texts_source(list(spec.documents), tokenizer, spec.replace(source=TEXTS), spans=spans)
    return packed_source(spec, tokenizer, main_first=main_first, spans=spans)


def describe_data(data, source: PackedSource | None = None) -> str:
    """Where ``data`` came from, in words, as a cache manifest records it (``data_source``); ``source``:
    :func:`as_sequences`'s result for it, whose spec names the format of rows given in Python (read from their
    columns when left out)."""
    if rows_given(data):
        data = data.rows if isinstance(data, GivenRows) else data
        if source is None:
            return f"<{len(data)} {spec_for(in_memory_records(data)).format} rows given in Python>"
        return f"<{len(data)} {source.spec.format} rows given in Python>"
    documents = data.documents if isinstance(data, DataSpec) else data if isinstance(data, (list, tuple)) else None
    if documents is not None:
        return f"<{len(documents)} documents given in Python>"
    if isinstance(data, DataSpec):
        return data.source
    return str(data)
