"""Derived stores are checked like the cache they come from: the cross-tokenizer alignment store carries its
identity and each shard's SHA-256, a killed writer's staging folder is removed by the next run, and a folder that
belongs to something else is never taken as the alignment folder."""

from __future__ import annotations

import json
import struct
import sys

import pytest
import torch
from conftest import run_and_kill
from fault_helpers import destila_in_process, error_line

from destila.crosstok.dataset import CrossTokenizerCache
from destila.crosstok.store import StoredItems, stored_items


def overwrite_first(shard, tensor: str, value: float) -> None:
    """Write ``value`` over the first float32 of ``tensor`` in the safetensors file ``shard``, in place."""
    raw = shard.read_bytes()
    header_length = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + header_length])
    assert header[tensor]["dtype"] == "F32"
    start = 8 + header_length + header[tensor]["data_offsets"][0]
    with open(shard, "r+b") as handle:
        handle.seek(start)
        handle.write(struct.pack("<f", value))


def test_a_target_log_prob_changed_in_place_is_caught_when_the_store_is_opened(
        text_spans_cache, byte_level_student_tokenizer, tmp_path, caplog):
    data = CrossTokenizerCache(text_spans_cache, byte_level_student_tokenizer, map_folder=tmp_path)
    items = stored_items(data)
    shard = items.index_path.parent / items.index["shards"][0]["name"]
    overwrite_first(shard, "entry_logprobs", 5.0)
    with pytest.raises(ValueError, match="does not match its SHA-256"):
        StoredItems(items.index_path)
    with caplog.at_level("WARNING", logger="destila.crosstok"):
        again = stored_items(data)  # caught, and written again from the cache
    assert "does not match its SHA-256" in caplog.text
    assert torch.equal(again[0]["topk_logprobs"], data[0]["topk_logprobs"])
    assert again[0]["topk_logprobs"].max() <= 0


@pytest.mark.slow  # a real process, killed
def test_a_store_killed_while_written_leaves_no_folder_after_the_next_run(
        text_spans_cache, byte_level_student_tokenizer, tmp_path):
    tokenizer = tmp_path / "student-tokenizer"
    byte_level_student_tokenizer.save_pretrained(tokenizer)
    folder = tmp_path / "alignment"
    script = ("import sys; from transformers import AutoTokenizer; "
              "from destila.crosstok.dataset import CrossTokenizerCache; from destila.crosstok.store import "
              "stored_items; stored_items(CrossTokenizerCache(sys.argv[1], AutoTokenizer.from_pretrained(sys.argv[2]),"
              " map_folder=sys.argv[3]))")
    staging = lambda: folder.is_dir() and any(p.is_dir() and ".tmp-" in p.name for p in folder.iterdir())  # noqa: E731
    assert run_and_kill([sys.executable, "-c", script, str(text_spans_cache), str(tokenizer), str(folder)], staging)
    assert staging() and not list(folder.glob("items-*.json"))  # killed mid-write: a hidden folder, no index
    data = CrossTokenizerCache(text_spans_cache, byte_level_student_tokenizer, map_folder=folder)
    items = stored_items(data)
    assert torch.equal(items[0]["topk_logprobs"], data[0]["topk_logprobs"])
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []  # its staging folder is gone


@pytest.fixture(scope="module")
def other_student(tmp_path_factory, byte_level_student_tokenizer):
    """A tiny random Llama on a tokenizer that is not the cache's: its run aligns the cache into a folder."""
    from conftest import make_tiny_model

    path = tmp_path_factory.mktemp("other-student") / "student"
    model = make_tiny_model("llama", len(byte_level_student_tokenizer), layers=2)
    model.config.max_position_embeddings = 1024
    model.save_pretrained(path)
    byte_level_student_tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("which", ["cache", "student", "another cache's"])
def test_an_alignment_dir_that_belongs_to_something_else_is_refused(text_spans_cache, other_student, tmp_path,
                                                                    which):
    import shutil

    folder = {"cache": text_spans_cache, "student": other_student,
              "another cache's": shutil.copytree(text_spans_cache, tmp_path / "other")}[which]
    before = sorted(p.name for p in folder.iterdir())
    result = destila_in_process("train", other_student, "--cache", text_spans_cache, "-o", tmp_path / "out",
                                "--alignment-dir", folder, "--max_steps", "1", "--use_cpu",
                                "--per_device_train_batch_size", "2")
    error_line(result, "train", 2, "alignment_dir: ", "aligned items go to a folder of their own")
    assert sorted(p.name for p in folder.iterdir()) == before and not (tmp_path / "out").exists()


# -- the vocabulary map's store ------------------------------------------------------------------------------


def _map_index(folder):
    (index,) = folder.glob("vocab-map-*.json")
    return index


def test_a_vocabulary_map_changed_in_place_is_caught_and_written_again(tiny_chat_tokenizer, space_mark_tokenizer,
                                                                      tmp_path, caplog):
    from destila.crosstok.vocab_map import load_or_build, stored_map_fault

    first = load_or_build(tiny_chat_tokenizer, space_mark_tokenizer, tmp_path)
    index = json.loads(_map_index(tmp_path).read_text())
    assert index["shards"][0]["name"] == first.path.name and len(index["key"]) == 16
    raw = bytearray(first.path.read_bytes())
    raw[-1] ^= 0x01  # one byte of the last id, changed in place: the same size, another SHA-256
    first.path.write_bytes(bytes(raw))
    assert "does not match its SHA-256" in stored_map_fault(first, tmp_path)
    with caplog.at_level("WARNING", logger="destila.crosstok"):
        again = load_or_build(tiny_chat_tokenizer, space_mark_tokenizer, tmp_path)
    assert "does not match its SHA-256" in caplog.text and str(tmp_path) in caplog.text
    assert stored_map_fault(again, tmp_path) is None and first.path.read_bytes() != bytes(raw)


def test_a_vocabulary_map_whose_index_was_edited_to_fit_is_caught(tiny_chat_tokenizer, space_mark_tokenizer,
                                                                   tmp_path):
    """A map file of the pair edited and its index entry updated: the values are still checked against the
    tokenizers, so the edit is caught (and written again)."""
    import hashlib

    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    from destila.crosstok.vocab_map import load_or_build, stored_map_fault

    first = load_or_build(tiny_chat_tokenizer, space_mark_tokenizer, tmp_path)
    with safe_open(str(first.path), framework="numpy") as handle:
        metadata = handle.metadata()
    tensors = load_file(str(first.path))
    tensors["teacher_to_student"] = np.where(tensors["teacher_to_student"] >= 0, 0, -1).astype(np.int32)
    save_file(tensors, str(first.path), metadata=metadata)
    index_file = _map_index(tmp_path)
    index = json.loads(index_file.read_text())
    payload = first.path.read_bytes()
    index["shards"][0].update(bytes=len(payload), sha256=hashlib.sha256(payload).hexdigest())
    index_file.write_text(json.dumps(index))
    assert stored_map_fault(first, tmp_path) == "its values are not the tokenizers' map"
    load_or_build(tiny_chat_tokenizer, space_mark_tokenizer, tmp_path)
    assert stored_map_fault(first, tmp_path) is None


@pytest.mark.slow  # a real process, killed
def test_a_vocabulary_map_killed_while_written_leaves_nothing_that_breaks_the_next_run(
        tiny_chat_tokenizer, space_mark_tokenizer, tmp_path):
    from destila.crosstok.vocab_map import load_or_build, stored_map_fault

    teacher, student = tmp_path / "teacher-tokenizer", tmp_path / "student-tokenizer"
    tiny_chat_tokenizer.save_pretrained(teacher)
    space_mark_tokenizer.save_pretrained(student)
    folder = tmp_path / "alignment"
    # The map written over and over (a writer of one small file is in its staging folder most of the time): the
    # kill lands inside a write.
    script = ("import sys; from transformers import AutoTokenizer; from destila.crosstok.vocab_map import "
              "build_vocab_map, save_vocab_map; m = build_vocab_map(AutoTokenizer.from_pretrained(sys.argv[1]), "
              "AutoTokenizer.from_pretrained(sys.argv[2]))\nwhile True: save_vocab_map(m, sys.argv[3])")
    staging = lambda: folder.is_dir() and any(".tmp-" in p.name for p in folder.iterdir())  # noqa: E731
    assert run_and_kill([sys.executable, "-c", script, str(teacher), str(student), str(folder)], staging)
    assert staging()  # killed mid-write: a hidden staging folder is left
    vocab = load_or_build(tiny_chat_tokenizer, space_mark_tokenizer, folder)
    assert stored_map_fault(vocab, folder) is None
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # its staging folder and lock are gone


@pytest.mark.parametrize("marker", ["manifest.json", "destila_cache.json", "config.json"])
def test_a_vocabulary_map_is_never_written_into_a_folder_of_something_else(tiny_chat_tokenizer,
                                                                          space_mark_tokenizer, tmp_path, marker):
    from destila.crosstok.vocab_map import load_or_build

    (tmp_path / marker).write_text("{}")
    with pytest.raises(ValueError, match=f"vocabulary map: {tmp_path} holds {marker}"):
        load_or_build(tiny_chat_tokenizer, space_mark_tokenizer, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [marker]


def test_an_index_naming_a_file_elsewhere_is_never_followed(text_spans_cache, byte_level_student_tokenizer, tmp_path):
    """An index edited to list a file outside the store's folder: refused by name, the file never hashed."""
    data = CrossTokenizerCache(text_spans_cache, byte_level_student_tokenizer, map_folder=tmp_path / "store")
    items = stored_items(data)
    index = json.loads(items.index_path.read_text())
    index["shards"][0]["name"] = "../victim.safetensors"
    items.index_path.write_text(json.dumps(index))
    (tmp_path / "victim.safetensors").write_bytes(b"not the store's")
    with pytest.raises(ValueError, match="is not a plain file of the store's folder"):
        StoredItems(items.index_path)
