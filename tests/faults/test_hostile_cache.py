"""A cache is data someone else may have written: it never makes destila read, hash or adopt a file outside its
folder, write through a link planted in it, or train on a shard or tokenizer that belongs to another cache.

Each test plants the name or link, runs the real command line (in process), and checks the one error line and
that a victim file outside the cache is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest
from conftest import train_tiny_tokenizer
from fault_helpers import (  # noqa: F401 (fixtures)
    CACHE_ARGS, build_command, copy_of, destila_in_process, edit_manifest, error_line, small_cache,
)

from destila.cache import read_manifest
from destila.cache.format import sha256_file
from destila.cache.tokenizer_files import file_digests


def victim_beside(tmp_path, content: bytes = b"the user's own file\n"):
    victim = tmp_path / "outside" / "victim.txt"
    victim.parent.mkdir(exist_ok=True)
    victim.write_bytes(content)
    return victim


def train(cache, student, tmp_path, *extra):
    return destila_in_process("train", student, "--cache", cache, "-o", tmp_path / "out", "--max_steps", "1",
                              "--use_cpu", *extra)


@pytest.mark.parametrize("name", ["../outside/shard-0000000004.safetensors", "ABSOLUTE", "shard-0000000004.safetensors/..",
                                  "../../../../etc/passwd"])
def test_a_shard_named_outside_the_cache_is_refused_before_any_file_is_read(small_cache, tiny_llama_dir, tmp_path,
                                                                           name):
    cache = copy_of(small_cache, tmp_path)
    real = cache / "shard-0000000004.safetensors"
    outside = tmp_path / "outside" / "shard-0000000004.safetensors"
    outside.parent.mkdir()
    shutil.move(real, outside)  # the real bytes, its real size and checksum, outside the folder
    name = str(outside) if name == "ABSOLUTE" else name

    def rename(raw):
        raw["shards"][1]["name"] = name

    edit_manifest(cache, rename)
    verify = destila_in_process("cache", "verify", cache)
    error_line(verify, "cache", 2, "is not a plain shard-NNNNNNNNNN.safetensors file name inside the cache folder")
    error_line(train(cache, tiny_llama_dir, tmp_path), "train", 2, "is not a plain shard-")
    assert not (tmp_path / "out").exists()


def test_a_shard_that_is_a_link_out_of_the_cache_is_refused(small_cache, tiny_llama_dir, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    shard = cache / "shard-0000000004.safetensors"
    outside = tmp_path / "outside.safetensors"
    shutil.move(shard, outside)
    shard.symlink_to(outside)  # same bytes: size and checksum agree
    verify = destila_in_process("cache", "verify", cache)
    assert verify.returncode == 1 and "Traceback" not in verify.stderr
    assert (f"FAULT shard-0000000004.safetensors: a symbolic link to {outside}, outside the cache folder"
            in verify.stdout)
    error_line(train(cache, tiny_llama_dir, tmp_path), "train", 2, "a symbolic link to", "outside the cache folder")
    error_line(destila_in_process("cache", "inspect", cache), "cache", 2, "outside the cache folder")
    # A link that stays inside the folder is harmless.
    shard.unlink()
    shutil.move(outside, cache / "inside.bin")
    shard.symlink_to("inside.bin")
    assert destila_in_process("cache", "verify", cache).returncode == 0


def test_a_tokenizer_folder_linked_elsewhere_is_refused(small_cache, tiny_llama_dir, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(cache / "tokenizer", elsewhere)
    (cache / "tokenizer").symlink_to(elsewhere)
    verify = destila_in_process("cache", "verify", cache)
    assert verify.returncode == 1
    assert "FAULT tokenizer/: a symbolic link leads outside the cache folder" in verify.stdout
    error_line(train(cache, tiny_llama_dir, tmp_path), "train", 2, "a symbolic link leads outside the cache folder")


def test_a_resumed_build_adopts_no_shard_named_outside_through_a_progress_file(small_cache, tiny_llama_dir,
                                                                               tmp_path):
    """A progress file (what a killed multi-process build leaves) naming a shard outside: never adopted, never
    deleted; the build computes those sequences itself and the cache ends byte-identical to a clean one."""
    cache = copy_of(small_cache, tmp_path)
    manifest = read_manifest(cache)
    last = manifest.shards[-1]
    victim = victim_beside(tmp_path, (cache / last.name).read_bytes())
    planted = {**json.loads(json.dumps(last.__dict__)), "name": f"../outside/{victim.name}"}
    (cache / last.name).unlink()

    def drop_last(raw):
        raw["shards"].pop()
        raw["complete"] = False

    edit_manifest(cache, drop_last)
    (cache / "progress-rank0.json").write_text(json.dumps({"rank": 0, "shards": [planted]}))
    (cache / "progress-rank1.json").symlink_to(victim)
    before = victim.read_bytes()
    result = destila_in_process(*build_command(tiny_llama_dir, "pydoc", cache))
    assert result.returncode == 0, result.stderr
    assert "ignoring an entry of progress-rank0.json" in result.stderr
    assert victim.read_bytes() == before
    assert read_manifest(cache).shards == manifest.shards  # recomputed here, the same bytes
    assert sha256_file(cache / last.name) == last.sha256
    assert not list(cache.glob("progress-*"))


def test_planted_temporary_and_lock_links_are_never_written_through(tiny_llama_dir, tmp_path):
    """The names a build writes under while it works, planted as links to a victim file by another user of a
    shared folder (the names an older destila used, with this process id, and the lock): the victim stays."""
    victim = victim_beside(tmp_path)
    before = victim.read_bytes()
    out = tmp_path / "cache"
    out.mkdir()
    for name in (".manifest.json", ".shard-0000000000.safetensors", ".shard-0000000004.safetensors",
                 ".tokenizer"):
        (out / f"{name}.tmp-{os.getpid()}").symlink_to(victim)
    result = destila_in_process(*build_command(tiny_llama_dir, "pydoc", out))
    assert result.returncode == 0, result.stderr
    assert victim.read_bytes() == before
    assert not [p for p in out.iterdir() if p.is_symlink()]  # the planted links were removed, not followed
    assert destila_in_process("cache", "verify", out).returncode == 0
    # A lock planted as a link: refused in one line, nothing created where it points.
    other = tmp_path / "other"
    other.mkdir()
    (other / ".lock").symlink_to(tmp_path / "outside" / "created-by-destila")
    refused = destila_in_process(*build_command(tiny_llama_dir, "pydoc", other))
    error_line(refused, "cache", 2, f"the lock file {other / '.lock'} is a symbolic link", "remove the link")
    assert not (tmp_path / "outside" / "created-by-destila").exists()


@pytest.fixture(scope="session")
def other_cache(tiny_llama_dir, tmp_path_factory):
    """A cache of the same shape as ``small_cache`` (16 sequences, K = 8, 4 shards) with other targets."""
    path = tmp_path_factory.mktemp("other-cache") / "cache"
    result = destila_in_process(*build_command(tiny_llama_dir, "pydoc", path, "--temperature", "2"))
    assert result.returncode == 0, result.stderr
    return path


def test_a_shard_copied_from_another_cache_with_its_entry_is_caught(small_cache, other_cache, tiny_llama_dir,
                                                                    tmp_path):
    cache = copy_of(small_cache, tmp_path)
    entry = json.loads((other_cache / "manifest.json").read_text())["shards"][1]
    shutil.copy(other_cache / entry["name"], cache / entry["name"])

    def take(raw):
        raw["shards"][1] = entry

    edit_manifest(cache, take)
    verify = destila_in_process("cache", "verify", cache)
    assert verify.returncode == 1
    assert f"FAULT {entry['name']}: belongs to another cache" in verify.stdout
    error_line(train(cache, tiny_llama_dir, tmp_path), "train", 2, entry["name"], "belongs to another cache")
    error_line(destila_in_process("cache", "inspect", cache), "cache", 2, "belongs to another cache")
    assert not (tmp_path / "out").exists()


def test_a_swapped_tokenizer_with_its_file_list_updated_is_caught(small_cache, tiny_llama_dir, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    shutil.rmtree(cache / "tokenizer")
    train_tiny_tokenizer(chat=True).save_pretrained(cache / "tokenizer")  # the same size, other ids

    def relist(raw):
        raw["tokenizer_files"] = file_digests(cache / "tokenizer")

    edit_manifest(cache, relist)
    verify = destila_in_process("cache", "verify", cache)
    assert verify.returncode == 1
    assert "FAULT tokenizer/: holds another tokenizer than the one the cache was built with" in verify.stdout
    error_line(train(cache, tiny_llama_dir, tmp_path), "train", 2, "holds another tokenizer")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field, value, fault", [
    ("eos_token_id", 5, "eos_token_id is 5, but the tokenizer in tokenizer/ ends documents with 0"),
    ("targets.temperature", 2.0, "no longer give the identity it recorded"),
    ("ids_fingerprint", "0123456789abcdef", "ids_fingerprint is 0123456789abcdef, but the stored sequences give"),
    ("data_fingerprint", "0123456789abcdef", "no longer give the identity it recorded"),
    ("tokenizer_size", 300, "tokenizer_size is 300, but the tokenizer in tokenizer/ has 320 tokens"),
])
def test_verify_checks_every_manifest_field_it_can_derive(small_cache, tmp_path, field, value, fault):
    cache = copy_of(small_cache, tmp_path)

    def change(raw):
        holder, _, key = (raw["targets"], None, field.split(".")[1]) if "." in field else (raw, None, field)
        holder[key] = value

    edit_manifest(cache, change)
    verify = destila_in_process("cache", "verify", cache)
    assert verify.returncode == 1 and "Traceback" not in verify.stderr
    assert fault in verify.stdout, verify.stdout


@pytest.mark.parametrize("edit, needle", [
    (lambda raw: raw.update(complete="yes"), "complete is 'yes', expected bool"),
    (lambda raw: raw["shards"][0].pop("sha256"), "lacks sha256"),
    (lambda raw: raw["shards"][0].update(extra=1), "has unknown fields extra"),
    (lambda raw: raw.update(extras=[1]), "extras is [1], expected dict | None"),
    (lambda raw: raw.update(sequences=-1), "sequences is -1, expected an integer ≥ 0"),
])
def test_a_manifest_field_of_the_wrong_type_is_one_line(small_cache, tmp_path, edit, needle):
    cache = copy_of(small_cache, tmp_path)
    edit_manifest(cache, edit)
    error_line(destila_in_process("cache", "verify", cache), "cache", 2, needle)


def test_a_manifest_that_is_a_json_list_is_one_line(small_cache, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    (cache / "manifest.json").write_text("[1, 2]")
    error_line(destila_in_process("cache", "verify", cache), "cache", 2, "holds a JSON list, expected an object")


def test_a_cache_from_before_identities_stays_readable(small_cache, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    edit_manifest(cache, lambda raw: raw.pop("identity"))
    verify = destila_in_process("cache", "verify", cache)
    assert verify.returncode == 0, verify.stdout
    assert "records no cache identity (built by an older destila)" in verify.stderr


def test_the_identity_is_the_sha256_of_the_content_fields(small_cache):
    from destila.cache.checks.identity import cache_identity, identity_of_shard
    from conftest import shard_metadata_of

    manifest = read_manifest(small_cache)
    assert manifest.identity == cache_identity(manifest)
    assert len(manifest.identity) == 64 and int(manifest.identity, 16) >= 0
    for shard in manifest.shards:
        assert identity_of_shard(shard_metadata_of(small_cache / shard.name)) == manifest.identity
    other = hashlib.sha256(b"x").hexdigest()
    manifest.targets = {**manifest.targets, "top_k": 7}
    assert cache_identity(manifest) not in (other, manifest.identity)


def test_an_edited_compact_layout_is_named(small_cache):
    from destila.cache.checks.derived import layout_fault
    from destila.cache.encodings import encoding_of

    manifest = read_manifest(small_cache)
    assert layout_fault(manifest) is None  # plain: no layout
    manifest.encoding, manifest.compact = "compact", encoding_of("compact").layout_record(manifest.vocab_size)
    assert layout_fault(manifest) is None
    manifest.compact = {**manifest.compact, "sqrt_levels": 256}
    assert layout_fault(manifest).startswith("compact is {'id_bytes': 2, 'sqrt_levels': 256")
