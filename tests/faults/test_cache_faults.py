"""Damage to a cache, and bad conditions while building one: each caught, with one clear line.

Each test runs the real command line on real files and asserts the exact
outcome: exit code, the one error line (no traceback), what is left on
disk, and that rerunning the same command converges to the same cache.
"""

import json
import shutil

import pytest

from fault_helpers import (  # noqa: F401 (fixtures)
    build_command, copy_of, destila, destila_in_process, edit_manifest, error_line, small_cache, snapshot, tmpfs,
    wide_vocab_teacher,
)

from destila.cache import read_manifest


def test_verify_fails_when_a_shard_entry_is_removed_from_the_manifest(small_cache, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    edit_manifest(cache, lambda raw: raw["shards"].pop(1))  # "complete" stays true
    result = destila_in_process("cache", "verify", cache)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "FAULT manifest.json: marked complete but 4 of 16 sequences are in no shard (first: 4)" in result.stdout
    assert ": OK:" not in result.stdout


def test_verify_fails_when_complete_is_set_on_a_partial_cache(small_cache, tmp_path):
    cache = copy_of(small_cache, tmp_path)

    def half(raw):
        del raw["shards"][2:]
        raw["complete"] = True

    edit_manifest(cache, half)
    result = destila_in_process("cache", "verify", cache)
    assert result.returncode == 1
    assert "FAULT manifest.json: marked complete but 8 of 16 sequences are in no shard (first: 8)" in result.stdout


def swap_two_tokens(cache):
    path = cache / "tokenizer" / "tokenizer.json"
    raw = json.loads(path.read_text())
    vocab = raw["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[100:102]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    path.write_text(json.dumps(raw, ensure_ascii=False, indent=2))


@pytest.mark.slow  # four commands, a rebuild among them
def test_swapped_tokens_in_the_cache_tokenizer_fail_verify_and_train_then_a_rebuild_restores_it(
        small_cache, tiny_llama_dir, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    original = snapshot(cache / "tokenizer")
    swap_two_tokens(cache)
    verify = destila_in_process("cache", "verify", cache)
    assert verify.returncode == 1
    assert f"FAULT tokenizer/tokenizer.json: changed since the build at {cache / 'tokenizer' / 'tokenizer.json'}" \
        in verify.stdout
    train = destila_in_process("train", tiny_llama_dir, "--cache", cache, "-o", tmp_path / "out", "--max_steps", "1")
    error_line(train, "train", 2, "tokenizer/tokenizer.json: changed since the build", str(cache / "tokenizer"))
    assert not (tmp_path / "out").exists()  # nothing trained, nothing shipped
    rebuilt = destila_in_process(*build_command(tiny_llama_dir, "pydoc", cache))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert snapshot(cache / "tokenizer") == original
    assert destila_in_process("cache", "verify", cache).returncode == 0


def test_a_flipped_byte_in_the_cache_tokenizer_is_named_by_train(small_cache, tiny_llama_dir, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    path = cache / "tokenizer" / "tokenizer.json"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    train = destila_in_process("train", tiny_llama_dir, "--cache", cache, "-o", tmp_path / "out", "--max_steps", "1")
    error_line(train, "train", 2, f"tokenizer/tokenizer.json: changed since the build at {path}")


@pytest.mark.slow  # four commands, a rebuild among them
def test_a_deleted_cache_tokenizer_fails_verify_and_train_then_a_rebuild_restores_it(
        small_cache, tiny_llama_dir, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    original = snapshot(cache / "tokenizer")
    shutil.rmtree(cache / "tokenizer")
    verify = destila_in_process("cache", "verify", cache)
    assert verify.returncode == 1 and "FAULT tokenizer/: the tokenizer copied from the teacher is missing" in verify.stdout
    train = destila_in_process("train", tiny_llama_dir, "--cache", cache, "-o", tmp_path / "out", "--max_steps", "1")
    error_line(train, "train", 2, "tokenizer/: the tokenizer copied from the teacher is missing",
               "run the same `destila cache build` command again")
    assert destila_in_process(*build_command(tiny_llama_dir, "pydoc", cache)).returncode == 0
    assert snapshot(cache / "tokenizer") == original and destila_in_process("cache", "verify", cache).returncode == 0


def test_a_refused_build_leaves_nothing_in_a_foreign_folder(tiny_llama_dir, tmp_path):
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "holiday.jpg").write_bytes(b"\xff\xd8 not ours")
    result = destila_in_process(*build_command(tiny_llama_dir, "pydoc", foreign))
    error_line(result, "cache", 2, "is not empty (holiday.jpg)", "choose a new or empty folder")
    assert sorted(p.name for p in foreign.iterdir()) == ["holiday.jpg"]  # no .lock, no manifest, no temporary


def test_inspect_refuses_a_truncated_shard(small_cache, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    shard = cache / read_manifest(cache).shards[0].name
    shard.write_bytes(shard.read_bytes()[:-100])
    result = destila_in_process("cache", "inspect", cache)
    error_line(result, "cache", 2, f"at {shard}", "bytes, the manifest says")
    assert result.stdout == ""


def test_inspect_refuses_a_manifest_with_an_edited_top_k(small_cache, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    edit_manifest(cache, lambda raw: raw["targets"].update(top_k=5))
    result = destila_in_process("cache", "inspect", cache, "--json")
    # The manifest's fields no longer give the identity it recorded: refused before any shard is read.
    error_line(result, "cache", 2, "contradicts itself", "a field was edited after the build")
    assert result.stdout == ""


def test_inspect_refuses_a_shard_whose_checksum_fails(small_cache, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    shard = cache / read_manifest(cache).shards[-1].name
    data = bytearray(shard.read_bytes())
    data[-5] ^= 0x40  # same size, different bytes
    shard.write_bytes(bytes(data))
    result = destila_in_process("cache", "inspect", cache)
    error_line(result, "cache", 2, "shard checksum mismatch", f"at {shard}")
    assert result.stdout == ""


@pytest.mark.slow  # five builds: about a minute and a half on two busy cores
def test_full_disk_during_the_tokenizer_copy_then_the_same_command_succeeds_in_the_space_of_a_fresh_build(
        wide_vocab_teacher, tmpfs, tmp_path):
    disk = tmpfs.mount("3m")
    # What a fresh build needs on this file system (the teacher's tokenizer.json is ~0.2 MB of it).
    reference = disk / "reference"
    assert destila(*build_command(wide_vocab_teacher, "pydoc", reference)).returncode == 0
    need = tmpfs.used(disk)
    expected = snapshot(reference)
    shutil.rmtree(reference)
    out = disk / "cache"
    tmpfs.fill(disk, leave=64 * 1024)  # room for the manifest, not for the tokenizer
    for _ in range(2):  # retried on the full disk: each attempt fails the same way
        failed = destila(*build_command(wide_vocab_teacher, "pydoc", out))
        error_line(failed, "cache", 1, f"no space left on device at {out / 'tokenizer'}",
                   "free space there and run the same command again")
        assert not out.exists()  # a new cache refused before its first shard removes itself, staging copy and all
    # Free space: the cache folder now has exactly what a fresh build needs, plus four pages.
    (disk / "filler").unlink()
    tmpfs.fill(disk, leave=need - tmpfs.used(disk) + 4 * 4096)
    done = destila(*build_command(wide_vocab_teacher, "pydoc", out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert snapshot(out) == expected  # byte for byte the fresh build: shards, manifest, tokenizer
