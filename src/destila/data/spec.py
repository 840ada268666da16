"""`DataSpec`: the one declaration of what data to read and how to turn it into training sequences.

``cache build``, online ``train`` and ``eval`` take the same flags, generated
from these fields (name, type, default, choices, help); Python users build
the object directly::

    spec = DataSpec("chat.jsonl", messages_field="messages", seq_len=1024)
    spec.format    # "messages"
    spec.loss_on   # "assistant" (the default for conversations)
    DataSpec(["a document", "another"], seq_len=64)   # documents given in Python (small data, tests)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from destila.ranges import check_int_at_least, check_optional_int_at_least

FORMATS = ("text", "messages", "prompt_completion")
"""The data formats a source is read as (``DataSpec.format``); a target kind is another thing (``TargetSpec.kind``)."""
TEXTS = "<texts>"
"""How documents given in Python are named where a source name would stand (manifests, logs)."""
LOSS_ON = ("all", "assistant", "completion")
PACKING = ("bfd", "documents", "none")
DEFAULT_LOSS_ON = {"text": "all", "messages": "assistant", "prompt_completion": "completion"}
# Conversations and pairs are packed whole (a half conversation would be scored without its question).
DEFAULT_PACKING = {"text": "documents", "messages": "bfd", "prompt_completion": "bfd"}


# Each data format and the spec fields naming the source columns it reads.
_FORMAT_FIELDS = {"text": ("text_field",), "messages": ("messages_field",),
                "prompt_completion": ("prompt_field", "completion_field")}
# Every spec field that names a source column, whatever the format.
COLUMN_FIELDS = tuple(name for names in _FORMAT_FIELDS.values() for name in names)


@dataclass(frozen=True)
class DataSpec:
    """Where the documents come from, which fields hold them, what is trained, and how rows are cut."""

    source: str | tuple[str, ...] = field(
        metadata={"help": "'pydoc', 'stdlib' (--split train or test), a .txt/.jsonl/.json/.parquet/.csv file, a "
                  "folder of them, a folder saved by datasets, or a datasets hub name (needs network); from Python "
                  "also a list of documents"},
    )
    text_field: str = field(default="text", metadata={"help": "field holding plain text"})
    messages_field: str | None = field(
        default=None,
        metadata={"help": "field holding conversations (a list of {role, content}); rendered with the "
                  "teacher tokenizer's chat template"},
    )
    prompt_field: str | None = field(default=None, metadata={"help": "field holding the prompt of prompt/completion pairs"})
    completion_field: str | None = field(
        default=None, metadata={"help": "field holding the completion of prompt/completion pairs"}
    )
    split: str = field(default="train", metadata={"help": "split to read (stdlib: train, or test for the held-out modules)"})
    subset: str | None = field(default=None, metadata={"help": "configuration (subset) of a datasets hub name"})
    streaming: bool = field(
        default=False,
        metadata={"help": "read the source as a stream (datasets streaming), for corpora larger than memory or disk"},
    )
    loss_on: str | None = field(
        default=None,
        metadata={"help": "positions trained: all, assistant (conversations) or completion (pairs); "
                  "default: assistant for conversations, completion for pairs, all for text",
                  "choices": LOSS_ON},
    )
    packing: str | None = field(
        default=None,
        metadata={"help": "bfd (whole documents into rows, best-fit decreasing, never split; a document longer "
                  "than --seq-len is truncated), documents (concatenate and cut every --seq-len tokens; each "
                  "document attends only to itself) or none (one document per row, truncated or padded); "
                  "default: bfd for conversations and pairs, documents for text", "choices": PACKING},
    )
    seq_len: int = field(default=512, metadata={"help": "tokens per sequence"})
    max_tokens: int | None = field(default=None, metadata={"help": "stop after this many tokens (whole sequences)"})
    # How the documents are tokenised, not what they become: left out of describe(), so of store keys and manifests.
    num_proc: int = field(
        default=1,
        metadata={"help": "processes tokenising the whole corpus (datasets map; a stream or a --max-tokens budget "
                  "is read in order by one)", "metavar": "N", "content": False},
    )

    def __post_init__(self):
        if isinstance(self.source, (list, tuple)):
            if not all(isinstance(text, str) for text in self.source):
                raise ValueError("source: a list given in Python holds documents; expected strings only")
            object.__setattr__(self, "source", tuple(self.source))
        else:
            object.__setattr__(self, "source", str(self.source))
        if (self.prompt_field is None) != (self.completion_field is None):
            raise ValueError(
                f"prompt_field/completion_field: give both or neither, found prompt_field={self.prompt_field!r} "
                f"and completion_field={self.completion_field!r}"
            )
        if self.messages_field is not None and self.prompt_field is not None:
            raise ValueError(
                "messages_field and prompt_field/completion_field: a source holds conversations or prompt/completion "
                "pairs, not both; pass one format"
            )
        if self.loss_on is None:
            object.__setattr__(self, "loss_on", DEFAULT_LOSS_ON[self.format])
        if self.loss_on not in LOSS_ON:
            raise ValueError(f"loss_on: expected one of {', '.join(LOSS_ON)}, found {self.loss_on!r}")
        wanted = {"assistant": "messages", "completion": "prompt_completion"}.get(self.loss_on)
        if wanted is not None and wanted != self.format:
            flag = "--messages-field" if wanted == "messages" else "--prompt-field and --completion-field"
            raise ValueError(f"loss_on: {self.loss_on!r} needs {flag}; this source is read as {self.format}; "
                             "pass --loss-on all or the fields")
        if self.packing is None:
            object.__setattr__(self, "packing", DEFAULT_PACKING[self.format])
        if self.packing not in PACKING:
            raise ValueError(f"packing: expected one of {', '.join(PACKING)}, found {self.packing!r}")
        check_int_at_least("seq_len", self.seq_len, 2, "a row holds at least one input and one label")
        check_optional_int_at_least("max_tokens", self.max_tokens, 1)
        if self.max_tokens is not None and self.max_tokens < self.seq_len:
            raise ValueError(
                f"max_tokens: {self.max_tokens} is less than one sequence of {self.seq_len} tokens; raise "
                "--max-tokens or lower --seq-len"
            )
        if self.num_proc < 1:
            raise ValueError(f"num_proc: expected at least 1 process, found {self.num_proc}; pass --num-proc 1 or more")
        if self.num_proc > 1 and (self.streaming or self.max_tokens is not None):
            how, given = (("a stream is tokenised as it is read", "--streaming") if self.streaming else
                          ("with a budget the documents are tokenised in order until it is met", "--max-tokens"))
            raise ValueError(f"num_proc: {self.num_proc} processes tokenise a whole corpus, but {how}, by one "
                             f"process; drop --num-proc or {given}")

    @property
    def format(self) -> str:
        """``text``, ``messages`` or ``prompt_completion``, from the fields given."""
        if self.messages_field is not None:
            return "messages"
        if self.prompt_field is not None:
            return "prompt_completion"
        return "text"

    @property
    def columns(self) -> tuple[str, ...]:
        """The source fields this spec reads."""
        return tuple(getattr(self, name) for name in _FORMAT_FIELDS[self.format])

    @property
    def column_fields(self) -> tuple[str, ...]:
        """The names of the spec fields this spec reads its columns from (``("messages_field",)``)."""
        return _FORMAT_FIELDS[self.format]

    @property
    def documents(self) -> tuple[str, ...] | None:
        """The documents given in Python (``source`` a list), or None for a named source."""
        return self.source if isinstance(self.source, tuple) else None

    @property
    def max_sequences(self) -> int | None:
        return None if self.max_tokens is None else self.max_tokens // self.seq_len

    def replace(self, **changes) -> "DataSpec":
        return replace(self, **changes)

    def describe(self) -> dict:
        """The fields that decide the sequences, as a plain dict (for manifests, store keys and logs); documents
        given in Python are ``"<texts>"`` there (their store is keyed by their content)."""
        described = {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("content", True)}
        if self.documents is not None:
            described["source"] = TEXTS
        return described


@dataclass(frozen=True)
class GivenRows:
    """Rows given in Python (``rows``: a ``datasets.Dataset`` or a list of dicts) with the :class:`DataSpec`
    ``options`` that cut them (``seq_len=``, ``max_tokens=``, ``packing=``, ...); their format is read from
    their columns (:func:`~destila.data.from_dataset.spec_for`). What a cache build holds where a named source
    would be a :class:`DataSpec`."""

    rows: object
    options: dict = field(default_factory=dict)


def as_data(data, **options) -> DataSpec | GivenRows:
    """``data`` with ``options`` as the one object a spec keeps: rows given in Python as :class:`GivenRows`,
    anything else as :func:`as_data_spec` makes it.

    Naive equivalent: ``GivenRows(data, options) if rows_given(data) else as_data_spec(data, **options)``.
    """
    if isinstance(data, GivenRows):
        return GivenRows(data.rows, {**data.options, **options})
    if rows_given(data):  # cut into rows of DataSpec's default length unless told otherwise, as a named source is
        return GivenRows(data, {"seq_len": DataSpec.__dataclass_fields__["seq_len"].default, **options})
    return as_data_spec(data, **options)


def rows_given(data) -> bool:
    """Rows given in Python: a ``datasets.Dataset``, or a list of dicts (text, messages, prompt/completion), bare
    or as :class:`GivenRows`; they are read by their columns (:func:`~destila.data.sequences.as_sequences`), not
    through a :class:`DataSpec`."""
    if isinstance(data, GivenRows):
        return True
    datasets = sys.modules.get("datasets")  # checked without importing datasets when it is not loaded
    if datasets is not None and isinstance(data, (datasets.Dataset, datasets.IterableDataset)):
        return True
    return isinstance(data, (list, tuple)) and bool(data) and all(isinstance(row, dict) for row in data)


def as_data_spec(data, **options) -> DataSpec:
    """The :class:`DataSpec` of ``data`` (a spec, its fields as a dict, a source name or path, or a list of
    documents) with ``options``: the one way user data becomes a spec, in every spec that takes data.

    Beside a ``DataSpec`` an option must repeat the spec's value: two
    different row lengths for one run are refused, not chosen between.
    Naive equivalent: ``data if isinstance(data, DataSpec) else DataSpec(data, **options)``.
    """
    if isinstance(data, dict):  # its fields, as dataclasses.asdict gives them (a spec shipped to a worker)
        data = DataSpec(**data)
    if isinstance(data, DataSpec):
        differ = {k: (getattr(data, k), v) for k, v in options.items() if getattr(data, k) != v}
        if differ:
            raise ValueError("data: the DataSpec and the options given beside it disagree on " + ", ".join(
                f"{k} ({a!r} vs {b!r})" for k, (a, b) in differ.items()) + "; give the same values to both")
        return data
    if isinstance(data, (str, Path, list, tuple)):
        return DataSpec(str(data) if isinstance(data, Path) else data, **options)
    raise ValueError(f"data: expected a DataSpec, a source name or path, a list of documents or a datasets.Dataset, "
                     f"found {type(data).__name__}")
