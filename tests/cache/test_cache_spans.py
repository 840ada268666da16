"""Caches built with byte spans: stored in both encodings, read back, resumed, checked by verify, refused when asked
for by a cross-tokenizer run on a cache without them."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from conftest import HARD_TEXTS, pydoc_texts, shard_metadata_of

from destila.cache import build_cache
from destila.cache.format import MANIFEST, read_manifest
from destila.cache.reader import TopKCache
from destila.cache.spans import decode_frame, encode_frame, span_faults
from destila.cache.checks.verify import verify_cache
from destila.data import texts_source
from destila.data.spans import Speller

DOCS = HARD_TEXTS + pydoc_texts(2)
SMALL = dict(seq_len=32, top_k=8, progress=False, shard_size=6)


@pytest.mark.parametrize("encoding", ["plain", "compact"])
def test_spans_are_stored_and_read_back(encoding, tiny_chat_llama_dir, tiny_chat_tokenizer, tmp_path):
    build_cache(str(tiny_chat_llama_dir), DOCS, tmp_path / "spans", spans=True, encoding=encoding, **SMALL)
    build_cache(str(tiny_chat_llama_dir), DOCS, tmp_path / "bare", encoding=encoding, **SMALL)
    spans, bare = TopKCache(tmp_path / "spans"), TopKCache(tmp_path / "bare")
    assert spans.manifest.spans and not bare.manifest.spans
    source = texts_source(DOCS, tiny_chat_tokenizer, seq_len=32, spans=True)
    for index in range(len(spans)):
        item, plain = spans[index], bare[index]
        assert set(item) - set(plain) == {"span_start", "span_end"}
        for key in plain:  # the targets are those of the same cache without spans
            assert torch.equal(item[key], plain[key]), key
        assert torch.equal(item["span_start"], source[index]["span_start"])
        assert torch.equal(item["span_end"], source[index]["span_end"])
    report = verify_cache(tmp_path / "spans")
    assert report.ok, report.faults


def test_spans_cost_a_few_bytes_per_position(tiny_chat_llama_dir, tmp_path):
    """The shard bytes spans add: 8 per position in plain (two int32), one zstd frame per row in compact."""
    sizes = {}
    for encoding in ("plain", "compact"):
        for spans in (False, True):
            out = tmp_path / f"{encoding}-{spans}"
            build_cache(str(tiny_chat_llama_dir), DOCS, out, spans=spans, encoding=encoding, **SMALL)
            sizes[encoding, spans] = sum(s.bytes for s in read_manifest(out).shards)
    manifest = read_manifest(tmp_path / "plain-True")
    positions, shards = manifest.tokens, len(manifest.shards)
    # plus two more tensor entries (about 140 bytes) in each shard's header
    assert 8 * positions < sizes["plain", True] - sizes["plain", False] < 8 * positions + 200 * shards
    assert 0 < sizes["compact", True] - sizes["compact", False] < 4 * positions


def test_resume_of_a_spans_build_writes_the_same_shards(tiny_chat_llama_dir, tmp_path):
    build_cache(str(tiny_chat_llama_dir), DOCS, tmp_path / "ref", spans=True, encoding="compact", **SMALL)
    build_cache(str(tiny_chat_llama_dir), DOCS, tmp_path / "c", spans=True, encoding="compact", **SMALL)
    manifest = read_manifest(tmp_path / "c")
    (tmp_path / "c" / manifest.shards[-1].name).unlink()
    manifest.shards, manifest.complete = manifest.shards[:-1], False
    (tmp_path / "c" / MANIFEST).write_text(manifest.to_json())
    report = build_cache(str(tiny_chat_llama_dir), DOCS, tmp_path / "c", spans=True, encoding="compact", **SMALL)
    assert report.complete and report.written_sequences > 0
    assert [s.sha256 for s in read_manifest(tmp_path / "c").shards] == [s.sha256 for s in read_manifest(
        tmp_path / "ref").shards]


def test_a_build_with_spans_on_a_cache_without_them_is_refused(tiny_chat_llama_dir, tmp_path):
    build_cache(str(tiny_chat_llama_dir), DOCS, tmp_path / "c", **SMALL)
    with pytest.raises(ValueError, match="different arguments") as err:
        build_cache(str(tiny_chat_llama_dir), DOCS, tmp_path / "c", spans=True, **SMALL)
    assert "spans: cache has False, this build has True" in str(err.value)


def test_verify_finds_spans_that_do_not_fit_their_tokens(tiny_chat_llama_dir, tmp_path):
    """A plain shard rewritten (with a valid checksum) with one span shifted, then one widened."""
    from safetensors.torch import load_file, save

    build_cache(str(tiny_chat_llama_dir), DOCS, tmp_path / "c", spans=True, **SMALL)
    folder = tmp_path / "c"
    manifest = read_manifest(folder)
    shard = manifest.shards[0]
    original = {k: v.clone() for k, v in load_file(str(folder / shard.name)).items()}  # not the mapped file
    metadata = shard_metadata_of(folder / shard.name)  # the cache's identity, kept

    def rewrite(change) -> list[str]:
        tensors = {k: v.clone() for k, v in original.items()}
        change(tensors)
        payload = save(tensors, metadata=metadata)
        (folder / shard.name).write_bytes(payload)
        shard.sha256, shard.bytes = hashlib.sha256(payload).hexdigest(), len(payload)
        (folder / MANIFEST).write_text(manifest.to_json())
        return verify_cache(folder).faults

    def shift(tensors):
        tensors["span_start"][1, 5] += 1

    def widen(tensors):
        tensors["span_end"][1, 5] += 1
        tensors["span_start"][1, 6:] += 1
        tensors["span_end"][1, 6:] += 1

    faults = rewrite(shift)
    assert faults and "row 1: byte span at position 5 starts at" in faults[0]
    faults = rewrite(widen)
    assert faults and "row 1: byte span at position 5 is" in faults[0] and "cannot cover" in faults[0]


def test_span_frames_round_trip_and_refuse_damage():
    start = np.array([3, 5, 5, 9, -1, -1, 0, 2], dtype=np.int64)
    end = np.array([5, 5, 9, 12, -1, -1, 2, 7], dtype=np.int64)
    frame = encode_frame(start, end)
    got = decode_frame(frame, len(start))
    assert np.array_equal(got[0], start) and np.array_equal(got[1], end)
    with pytest.raises(ValueError, match="span frame"):
        decode_frame(frame[:-3] + b"xyz", len(start))
    with pytest.raises(ValueError, match="8 spans need 64"):
        decode_frame(encode_frame(start[:4], end[:4]), len(start))


def test_span_faults_by_hand(tiny_chat_tokenizer):
    from destila.cache.spans import token_width_check

    ids = tiny_chat_tokenizer("ab cd", add_special_tokens=False)["input_ids"] + [0]
    speller = Speller(tiny_chat_tokenizer)
    start, end = speller.spans("ab cd", ids)
    row = {"input_ids": np.asarray(ids), "position_ids": np.arange(len(ids)), "span_start": start, "span_end": end}
    widths = token_width_check(tiny_chat_tokenizer)
    assert span_faults(row, widths) == []
    assert "is not a span" in span_faults({**row, "span_end": np.where(np.arange(len(ids)) == 1, -5, end)})[0]
    padded = {k: np.concatenate([v, [-1, -1]]) if k.startswith("span") else np.concatenate([v, [0, 1]])
              for k, v in row.items()}
    assert span_faults(padded, widths) == []  # padding: -1 for both ends
