"""One data entry: as_sequences gives, for every form of user data, the sequences the underlying readers give."""

import datasets
import pytest
from conftest import pydoc_texts

from destila.data import DataSpec, as_sequences, dataset_source, describe_data, packed_source, texts_source
from destila.data.from_dataset import spec_for


def test_every_form_of_data_gives_the_readers_sequences(tiny_tokenizer, tmp_path):
    texts = pydoc_texts(3)
    path = tmp_path / "docs.jsonl"
    datasets.Dataset.from_dict({"text": texts}).to_json(str(path))

    by_name = as_sequences(str(path), tiny_tokenizer, seq_len=32)
    assert by_name.fingerprint == packed_source(DataSpec(str(path), seq_len=32), tiny_tokenizer).fingerprint
    assert as_sequences(DataSpec(str(path), seq_len=32), tiny_tokenizer).fingerprint == by_name.fingerprint

    given = as_sequences(texts, tiny_tokenizer, seq_len=32, max_tokens=32 * 4)
    assert given.fingerprint == texts_source(texts, tiny_tokenizer, seq_len=32, max_tokens=32 * 4).fingerprint
    assert given.spec.source == "<texts>" and len(given) == 4  # recorded as before: not the documents themselves
    spec = DataSpec(texts, seq_len=32, max_tokens=32 * 4)
    assert spec.documents == tuple(texts) and spec.describe()["source"] == "<texts>"
    assert as_sequences(spec, tiny_tokenizer).fingerprint == given.fingerprint

    # Rows given in Python are read by their columns and packed as a file of them would be (rows of seq_len).
    table = datasets.Dataset.from_dict({"text": texts})
    rows = dataset_source(table, tiny_tokenizer, spec_for(table, seq_len=32, packing=None), trim=False)
    assert as_sequences(table, tiny_tokenizer, seq_len=32).fingerprint == rows.fingerprint
    as_dicts = as_sequences([{"text": text} for text in texts], tiny_tokenizer, seq_len=32)
    assert as_dicts.store.fingerprint == rows.store.fingerprint and len(as_dicts) == len(rows)
    with pytest.raises(ValueError, match=r"rows already tokenised \(input_ids\)"):
        as_sequences(datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]]}), tiny_tokenizer, seq_len=32)


def test_a_spec_and_other_options_beside_it_must_agree(tiny_tokenizer):
    with pytest.raises(ValueError, match=r"disagree on seq_len \(32 vs 64\)"):
        as_sequences(DataSpec("pydoc", seq_len=32), tiny_tokenizer, seq_len=64)
    with pytest.raises(ValueError, match="expected a DataSpec, a source name or path, a list of documents"):
        as_sequences(42, tiny_tokenizer)
    with pytest.raises(ValueError, match="holds documents; expected strings only"):
        DataSpec(["a", 3])


def test_the_manifest_names_where_the_data_came_from():
    assert describe_data("pydoc") == "pydoc" and describe_data(DataSpec("pydoc")) == "pydoc"
    assert describe_data(["a", "b"]) == describe_data(DataSpec(["a", "b"])) == "<2 documents given in Python>"
    rows = [{"prompt": "p", "completion": "c"}] * 3
    assert describe_data(rows) == "<3 prompt_completion rows given in Python>"
