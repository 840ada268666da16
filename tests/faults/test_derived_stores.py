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
