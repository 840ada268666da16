"""Data in: sources (text, conversations, prompt/completion), loss masks, a token store, packed sequences, collate.

    from destila.data import DataSpec, as_sequences, collate
    spec = DataSpec("chat.jsonl", messages_field="messages", seq_len=1024)   # loss on assistant turns
    source = as_sequences(spec, tokenizer)         # source[i]: input_ids, position_ids, loss_mask [L]
    batch = collate([source[0], source[1]])        # + labels [B, L]: at t the token t+1, where trained

:func:`as_sequences` is the one way user data enters: cache build, training and eval all call it.
"""

from destila.data.collate import collate, hf_labels, next_token_labels, shift_labels
from destila.data.from_dataset import dataset_source
from destila.data.loader import packed_source, texts_source
from destila.data.naive import data_fingerprint, ids_fingerprint, pack_documents
from destila.data.packed import PackedSource
from destila.data.sequences import as_sequences, describe_data
from destila.data.spec import GivenRows, as_data, as_data_spec
from destila.data.sources import PYDOC, load_records, load_texts, pydoc_texts
from destila.data.spec import FORMATS, LOSS_ON, PACKING, DataSpec
from destila.data.split import split_indices
from destila.data.stdlib import STDLIB, stdlib_texts
from destila.data.store import TokenStore, build_store

__all__ = [
    "DataSpec", "GivenRows", "as_data", "as_data_spec", "as_sequences", "dataset_source", "describe_data", "hf_labels", "FORMATS", "LOSS_ON", "PACKING", "PYDOC", "PackedSource", "TokenStore", "build_store", "collate",
    "data_fingerprint", "ids_fingerprint", "load_records", "load_texts", "next_token_labels", "pack_documents",
    "packed_source", "pydoc_texts", "shift_labels", "split_indices", "STDLIB", "stdlib_texts", "texts_source",
]
