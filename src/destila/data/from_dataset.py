"""A user's ``datasets.Dataset`` as training sequences, the way TRL trainers take one.

Columns decide the format: ``messages`` (conversations, loss on assistant
turns), ``prompt`` + ``completion`` (loss on completions), ``text`` (loss on
all tokens), or ``input_ids`` (already tokenised: used as is, with any
``labels`` and ``attention_mask`` honoured by the collate)::

    train_dataset = Dataset.from_list([{"messages": [...]}, ...])
    source = dataset_source(train_dataset, tokenizer)     # a PackedSource
"""

from __future__ import annotations

import hashlib
import json

from destila.data.packed import PackedSource
from destila.data.spec import DataSpec
from destila.data.store import build_store, store_root
from destila.models import tokenizer_fingerprint

DEFAULT_SEQ_LEN = 1024


def spec_for(dataset, seq_len: int = DEFAULT_SEQ_LEN, packing: str = "none", **fields) -> DataSpec:
    """The :class:`DataSpec` for ``dataset``'s columns (``fields`` override what is inferred).

    One example per row by default, as TRL's trainers do: a handful of short
    conversations is a valid training set even when it fills no packed row."""
    columns = list(dataset.column_names or [])
    if "messages" in columns:
        inferred = {"messages_field": "messages"}
    elif "prompt" in columns and "completion" in columns:
        inferred = {"prompt_field": "prompt", "completion_field": "completion"}
    elif "text" in columns:
        inferred = {}
    else:
        inferred = None
    if inferred is None and not any(k.endswith("_field") for k in fields):
        raise ValueError(
            f"train_dataset: columns {', '.join(columns) or '(none)'}; expected 'messages', 'prompt' and "
            "'completion', 'text', or 'input_ids' (already tokenised); or pass a DataSpec naming the fields"
        )
    return DataSpec(f"<datasets.Dataset {getattr(dataset, '_fingerprint', '')}>", seq_len=seq_len, packing=packing,
                    **{**(inferred or {}), **fields})


def dataset_source(dataset, tokenizer, spec: DataSpec | None = None, *, trim: bool = True, spans: bool = False,
                   **spec_fields):
    """``dataset`` tokenised with ``tokenizer`` into a :class:`PackedSource`, or itself when it holds ``input_ids``.

    ``trim``: one example per row at its own length (the collate pads each batch); False gives rows of
    ``seq_len`` tokens, as a teacher pass stores them. ``spans``: items also carry each token's byte span
    in its document (:mod:`destila.data.spans`)."""
    if "input_ids" in (dataset.column_names or []):
        return dataset.with_format("torch")
    spec = spec or spec_for(dataset, **spec_fields)
    columns = [c for c in dataset.column_names if c not in spec.columns]
    records = dataset.remove_columns(columns) if columns else dataset
    # datasets fingerprints every Dataset by its content and history; with the
    # spec and the tokenizer it names the store.
    identity = [getattr(dataset, "_fingerprint", None), spec.describe(), tokenizer_fingerprint(tokenizer)]
    identity += ["spans"] if spans else []  # a store with byte spans is another store
    key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:20]
    store = build_store(spec, tokenizer, store_root() / f"dataset-{key}", records=records, spans=spans)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return PackedSource(store, spec, pad, trim=trim)
