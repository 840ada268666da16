"""Cross-tokenizer items written once and read from their store: the dataset's items exactly, every sequence's
coverage, one store per key, a damaged or partial store written again."""

from __future__ import annotations

import json

import pytest
import torch

from destila.cache.reader import TopKCache
from destila.crosstok.coverage import coverage_report
from destila.crosstok.dataset import CrossTokenizerCache
from destila.crosstok.store import StoredItems, index_path, store_key, stored_items


def _assert_same_items(data, items, count=None):
    """``items`` hold ``data``'s items (the first ``count`` compared, all by default)."""
    assert len(items) == len(data)
    for index in range(len(data) if count is None else count):
        want, got = data[index], items[index]
        assert want.keys() == got.keys()
        for key in want:
            assert got[key].dtype == want[key].dtype, key
            assert torch.equal(got[key], want[key]), (index, key)


@pytest.mark.parametrize("cache_name,tokenizer_name,uld", [("chat_spans_cache", "space_mark_tokenizer", False),
                                                            ("chat_spans_cache", "space_mark_tokenizer", True),
                                                            ("text_spans_cache", "byte_level_student_tokenizer", False)])
def test_stored_items_are_the_datasets(cache_name, tokenizer_name, uld, request, tmp_path):
    data = CrossTokenizerCache(request.getfixturevalue(cache_name), request.getfixturevalue(tokenizer_name),
                               map_folder=tmp_path, uld=uld)
    items = stored_items(data)  # written beside the vocabulary map
    assert index_path(tmp_path, store_key(data)).is_file()
    _assert_same_items(data, items)
    # the coverage of every sequence, summed while writing, is the report's over all of them
    assert items.coverage == coverage_report(data, max_sequences=None)
    # read again from the store (no alignment): the same items; through a DataLoader worker too
    again = stored_items(data)
    _assert_same_items(data, again)
    loader = torch.utils.data.DataLoader(again, batch_size=None, num_workers=1)
    for index, item in enumerate(loader):
        assert torch.equal(item["topk_logprobs"], data[index]["topk_logprobs"])


def test_the_key_follows_what_the_items_depend_on(text_spans_cache, byte_level_student_tokenizer,
                                                  space_mark_tokenizer, tmp_path):
    cache = TopKCache(text_spans_cache)
    base = store_key(CrossTokenizerCache(cache, byte_level_student_tokenizer))
    assert store_key(CrossTokenizerCache(cache, byte_level_student_tokenizer)) == base
    others = {store_key(CrossTokenizerCache(cache, space_mark_tokenizer)),
              store_key(CrossTokenizerCache(cache, byte_level_student_tokenizer, uld=True)),
              store_key(CrossTokenizerCache(cache, byte_level_student_tokenizer, dtype=torch.float64))}
    assert base not in others and len(others) == 3


def test_a_damaged_or_partial_store_is_written_again(text_spans_cache, byte_level_student_tokenizer, tmp_path,
                                                     caplog):
    data = CrossTokenizerCache(text_spans_cache, byte_level_student_tokenizer, map_folder=tmp_path)
    items = stored_items(data)
    index = items.index_path
    shard = index.parent / items.index["shards"][0]["name"]
    shard.write_bytes(shard.read_bytes()[:100])  # a truncated shard
    with caplog.at_level("WARNING", logger="destila.crosstok"):
        _assert_same_items(data, stored_items(data), count=2)
    assert "cannot be read" in caplog.text and "writing them again" in caplog.text
    # a build killed before its index: the shards are there, no index; the next call writes the store
    index.unlink()
    _assert_same_items(data, stored_items(data), count=2)
    # an index of another layout version is refused by the reader, and replaced
    record = json.loads(index.read_text())
    index.write_text(json.dumps({**record, "version": 0}))
    with pytest.raises(ValueError, match="store version 0"):
        StoredItems(index)
    _assert_same_items(data, stored_items(data), count=2)


def test_a_dataset_without_a_folder_needs_one(text_spans_cache, byte_level_student_tokenizer, tmp_path):
    data = CrossTokenizerCache(text_spans_cache, byte_level_student_tokenizer)
    with pytest.raises(ValueError, match="give a folder"):
        stored_items(data)
    _assert_same_items(data, stored_items(data, tmp_path / "items"), count=2)
