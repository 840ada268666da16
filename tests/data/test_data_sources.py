"""Text sources, packing and fingerprints (destila.data)."""

import json

import pytest
import torch

from destila.data import data_fingerprint, ids_fingerprint, load_texts, pack_documents, pydoc_texts


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_pydoc_is_always_there_and_deterministic():
    texts = load_texts("pydoc")
    assert len(texts) > 50 and sum(map(len, texts)) > 100_000
    assert texts == load_texts("pydoc") == pydoc_texts()


def test_txt_is_one_document_per_file(tmp_path):
    (tmp_path / "a.txt").write_text("line one\nline two\n")
    assert load_texts(tmp_path / "a.txt") == ["line one\nline two\n"]


def test_jsonl_with_default_and_custom_field(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "x", "body": "b1"}, {"text": "y", "body": "b2"}])
    assert load_texts(path) == ["x", "y"]
    assert load_texts(path, text_field="body") == ["b1", "b2"]


def test_missing_field_names_the_fields_found(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"content": "x", "id": 1}])
    with pytest.raises(ValueError, match=r"no field 'text'; fields found: content, id"):
        load_texts(path)


def test_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["p", "q", ""]}), tmp_path / "d.parquet")
    assert load_texts(tmp_path / "d.parquet") == ["p", "q"]  # empty documents are dropped


def test_folder_reads_every_supported_file_in_sorted_order(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "b.txt").write_text("from b")
    write_jsonl(tmp_path / "a.jsonl", [{"text": "a1"}, {"text": "a2"}])
    write_jsonl(tmp_path / "sub" / "c.jsonl", [{"text": "c1"}])
    (tmp_path / "notes.md").write_text("ignored")
    assert load_texts(tmp_path) == ["a1", "a2", "from b", "c1"]


def test_folder_saved_by_datasets(tmp_path):
    from datasets import Dataset

    Dataset.from_dict({"text": ["s1", "s2"]}).save_to_disk(str(tmp_path / "saved"))
    assert load_texts(tmp_path / "saved") == ["s1", "s2"]


def test_missing_path_and_unknown_format_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        load_texts(tmp_path / "nope.jsonl")
    (tmp_path / "d.xml").write_text("<a/>")
    with pytest.raises(ValueError, match=r"unknown format \.xml"):
        load_texts(tmp_path / "d.xml")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="datasets.load_dataset could not read it"):
        load_texts(tmp_path / "empty")


def test_empty_data_is_refused(tmp_path):
    (tmp_path / "e.txt").write_text("")
    with pytest.raises(ValueError, match="holds no text"):
        load_texts(tmp_path / "e.txt")
    path = write_jsonl(tmp_path / "e.jsonl", [{"text": ""}, {"text": ""}])
    with pytest.raises(ValueError, match="holds no text"):
        load_texts(path)


def test_packing_equals_the_naive_loop(tiny_tokenizer):
    texts = pydoc_texts()[:12]
    seq_len = 37
    ids = []
    for text in texts:
        ids += tiny_tokenizer(text, add_special_tokens=False).input_ids + [tiny_tokenizer.eos_token_id]
    expected = torch.tensor(ids[: len(ids) // seq_len * seq_len]).view(-1, seq_len)
    packed = pack_documents(texts, tiny_tokenizer, seq_len)
    assert packed.dtype == torch.int64
    assert torch.equal(packed, expected)


def test_max_tokens_caps_whole_sequences(tiny_tokenizer):
    texts = pydoc_texts()[:30]
    full = pack_documents(texts, tiny_tokenizer, 64)
    capped = pack_documents(texts, tiny_tokenizer, 64, max_tokens=64 * 5 + 10)
    assert capped.shape == (5, 64)
    assert torch.equal(capped, full[:5])


def test_too_little_text_is_a_clear_error(tiny_tokenizer):
    with pytest.raises(ValueError, match="fewer than one sequence of 4096"):
        pack_documents(["short text"], tiny_tokenizer, 4096)
    with pytest.raises(ValueError, match="less than one sequence"):
        pack_documents(["short text"], tiny_tokenizer, 64, max_tokens=10)
    with pytest.raises(ValueError, match="no documents"):
        pack_documents([], tiny_tokenizer, 64)


def test_fingerprints_see_document_boundaries_and_tokens():
    assert data_fingerprint(["ab", "c"]) != data_fingerprint(["a", "bc"])
    assert data_fingerprint(["ab", "c"]) == data_fingerprint(["ab", "c"])
    a = torch.arange(12).view(3, 4)
    assert ids_fingerprint(a) == ids_fingerprint(a.clone())
    assert ids_fingerprint(a) != ids_fingerprint(a.view(4, 3))
