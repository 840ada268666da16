"""One call from a data spec and a tokenizer to the packed source every consumer reads.

    source = packed_source(DataSpec("chat.jsonl", messages_field="messages"), tokenizer)
    len(source), source[i]["input_ids"], source.fingerprint

The cache writer, online training and eval all call this. Under several
processes the first one tokenises into the store while the others wait
(``main_first``), then every process memory-maps the same files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tempfile
from pathlib import Path

from destila.data.formats import detect_format
from destila.data.packed import PackedSource
from destila.data.spec import TEXTS, DataSpec
from destila.data.store import STORE_VERSION, build_store, store_key, store_root
from destila.models import tokenizer_fingerprint


def packed_source(
    spec: DataSpec,
    tokenizer,
    *,
    store_dir: str | Path | None = None,
    main_first=None,
    spans: bool = False,
) -> PackedSource:
    """The :class:`PackedSource` of ``spec`` tokenised by ``tokenizer``.

    ``store_dir`` defaults to ``store_root()/<key>``, the key hashing the spec,
    the tokenizer and the source files' names, sizes and mtimes, so a second
    run over unchanged data reuses the store. ``main_first`` is a context
    manager factory that runs its body on the main process first (accelerate's
    ``PartialState().main_process_first``); None for one process. ``spans``:
    items also carry each token's byte span in its document (``span_start``,
    ``span_end``; see :class:`PackedSource`).
    """
    spec = detect_format(spec)  # text, messages or prompt/completion, from the source's fields when none is named
    folder = (Path(store_dir) if store_dir is not None
              else store_root() / store_key(spec, tokenizer_fingerprint(tokenizer), spans))
    with (main_first or contextlib.nullcontext)():
        store = build_store(spec, tokenizer, folder, spans=spans)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return PackedSource(store, spec, pad)


def texts_source(texts: list[str], tokenizer, spec: DataSpec | None = None, *, spans: bool = False,
                 **spec_fields) -> PackedSource:
    """A packed source over documents given in Python (small data); stored under a key of their content."""
    # datasets is heavy: only for texts given in Python
    import datasets

    texts = [t for t in texts if t]
    if not texts:
        raise ValueError("data: no documents to pack; expected at least one non-empty text")
    digest = hashlib.sha256()
    for text in texts:
        raw = text.encode("utf-8")
        digest.update(len(raw).to_bytes(8, "little") + raw)
    spec = spec or DataSpec(TEXTS, **spec_fields)
    described = {k: v for k, v in spec.describe().items() if k != "source"}
    # The store's format version is part of the key, as in store_key: a store an older destila wrote is never
    # reopened, another is built beside it.
    identity = [digest.hexdigest(), described, tokenizer_fingerprint(tokenizer), STORE_VERSION] + (
        ["spans"] if spans else [])
    identity = json.dumps(identity, sort_keys=True, default=str)
    folder = store_root() / f"texts-{hashlib.sha256(identity.encode()).hexdigest()[:20]}"
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "texts"
        if not folder.is_dir():  # build_store reuses a finished store without reading the source
            datasets.Dataset.from_dict({spec.text_field: texts}).save_to_disk(str(saved))
        source = packed_source(spec.replace(source=str(saved)), tokenizer, store_dir=folder, spans=spans)
    # Describe the documents as given, not by the temporary folder they passed through: a manifest
    # recording this spec must not change from one build of the same documents to the next.
    source.spec = spec
    return source
