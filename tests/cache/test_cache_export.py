"""`destila cache export`: the cache as a Parquet dataset that `datasets` loads and streams, read back bit for bit,
verified, and refused when damaged."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from destila.cache import TopKCache, build_cache
from destila.cache.dataset import DatasetCache, StreamedCache, open_cache
from destila.cache.export import ExportSpec, export_cache
from destila.cli.main import main

SMALL = dict(seq_len=32, max_tokens=32 * 23, shard_size=5, batch_size=4, progress=False)


@pytest.fixture(scope="module")
def caches(tmp_path_factory, tiny_llama_dir):
    """A float16 plain top-K cache, a compact one, a bfloat16 one and a sampled one, each with its export."""
    root = tmp_path_factory.mktemp("export")
    kinds = {"plain": dict(top_k=12), "compact": dict(top_k=12, encoding="compact"),
             "bfloat16": dict(top_k=12, logprob_dtype="bfloat16"),
             "sampled": dict(targets="sampled", samples=16, encoding="compact")}
    built = {}
    for name, options in kinds.items():
        kind = options.pop("targets", None)
        extra = {"kind": kind} if kind else {}
        build_cache(str(tiny_llama_dir), "pydoc", root / name, **SMALL, **options, **extra)
        export_cache(ExportSpec(str(root / name), str(root / f"{name}-export"), rows_per_file=10, progress=False))
        built[name] = (root / name, root / f"{name}-export")
    return built


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def assert_same_items(found, expected):
    assert found.keys() == expected.keys()
    for key in expected:
        assert found[key].dtype == expected[key].dtype, key
        assert torch.equal(found[key], expected[key]), key


@pytest.mark.parametrize("name", ["plain", "compact", "bfloat16", "sampled"])
def test_an_export_reads_back_as_the_cache_bit_for_bit_and_streams(caches, name):
    cache_path, export_path = caches[name]
    cache = TopKCache(cache_path)
    exported = open_cache(export_path)
    assert isinstance(exported, DatasetCache) and len(exported) == len(cache) == 23
    assert (exported.seq_len, exported.top_k, exported.vocab_size) == (cache.seq_len, cache.top_k, cache.vocab_size)
    assert exported.logprob_dtype == cache.logprob_dtype and exported.kind is cache.kind
    assert exported.manifest.content() == cache.manifest.content()
    for i in range(len(cache)):
        assert_same_items(exported[i], cache[i])
    streamed = open_cache(export_path, streaming=True)
    assert isinstance(streamed, StreamedCache)
    count = 0
    for i, item in enumerate(streamed):
        assert_same_items(item, cache[i])
        count += 1
    assert count == len(cache)


def test_datasets_loads_and_streams_the_export_with_its_record(caches):
    import datasets

    cache_path, export_path = caches["plain"]
    cache = TopKCache(cache_path)
    rows = datasets.load_dataset(str(export_path), split="train")
    assert rows.num_rows == 23 and len(list((export_path / "data").glob("*.parquet"))) == 3  # rows_per_file=10
    assert rows.features["topk_logprobs"].feature.feature.dtype == "float16"
    first, item = rows[0], cache[0]
    trained = [t for t, on in enumerate(first["loss_mask"]) if on]
    assert trained == torch.nonzero(item["labels"] != -100).flatten().tolist()
    assert first["topk_ids"][trained[0]] == item["topk_ids"][trained[0]].tolist()
    assert first["topk_ids"][-1] == [] and first["tail_logmass"][-1] == 0.0  # the last position is never trained
    stream = datasets.load_dataset(str(export_path), split="train", streaming=True)
    assert next(iter(stream))["input_ids"] == first["input_ids"]
    record = json.loads(rows.info.description)  # the dataset card carries the record into every loaded Dataset
    assert record == json.loads((export_path / "destila_cache.json").read_text())
    assert record["manifest"]["ids_fingerprint"] == cache.manifest.ids_fingerprint
    assert json.loads(stream.info.description) == record
    # map, select and shuffle keep it: a reshuffled subset still trains as a cache, with its manifest
    subset = open_cache(rows.shuffle(seed=0).select(range(5)))
    assert len(subset) == 5 and subset.manifest.tokenizer_fingerprint == cache.manifest.tokenizer_fingerprint


def test_the_export_names_no_local_folder(caches, tiny_llama_dir):
    _, export_path = caches["plain"]
    for name in ("README.md", "destila_cache.json"):
        text = (export_path / name).read_text()
        assert str(tiny_llama_dir) not in text and str(export_path.parent) not in text
    record = json.loads((export_path / "destila_cache.json").read_text())
    assert record["manifest"]["teacher_path"] == tiny_llama_dir.name


def _with_a_flipped_byte(export_path, copy):
    """A copy of the export at ``export_path`` whose second Parquet file has one byte flipped mid-file."""
    damaged = shutil.copytree(export_path, copy)
    target = damaged / "data" / "train-00001-of-00003.parquet"
    raw = bytearray(target.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    target.write_bytes(bytes(raw))
    return damaged


def test_verify_checks_an_export_and_finds_damage(caches, tmp_path, capsys):
    _, export_path = caches["plain"]
    code, out, _ = run_cli(["cache", "verify", str(export_path)], capsys)
    assert code == 0 and "OK: 3 files checked, 23 of 23 sequences" in out

    damaged = _with_a_flipped_byte(export_path, tmp_path / "flipped")
    code, out, _ = run_cli(["cache", "verify", str(damaged)], capsys)
    assert code == 1 and "FAULT data/train-00001-of-00003.parquet: checksum mismatch" in out


def test_verify_of_rows_saved_with_save_to_disk_says_what_it_takes_in_one_line(caches, tmp_path, capsys):
    # Such a folder reads as a cache (open_cache), but records nothing to check its rows against.
    _, export_path = caches["plain"]
    open_cache(str(export_path)).dataset.save_to_disk(str(tmp_path / "saved"))
    capsys.readouterr()  # the saving bar
    code, out, err = run_cli(["cache", "verify", str(tmp_path / "saved")], capsys)
    assert code == 2 and out == "" and err.strip().count("\n") == 0
    assert "a dataset `save_to_disk` wrote" in err and "destila cache export CACHE OUT" in err


def test_verify_finds_rows_changed_behind_matching_file_checksums(caches, tmp_path, capsys):
    """A file rewritten with one value changed and its checksum updated: the content fingerprint still differs."""
    import pyarrow.parquet as pq

    from destila.cache.format import sha256_file

    _, export_path = caches["plain"]
    edited = shutil.copytree(export_path, tmp_path / "edited")
    name = "data/train-00000-of-00003.parquet"
    table = pq.read_table(edited / name).to_pylist()
    table[0]["input_ids"][0] = (table[0]["input_ids"][0] + 1) % 320
    pq.write_table(pq.read_table(edited / name).from_pylist(table, schema=pq.read_schema(edited / name)),
                   edited / name)
    record = json.loads((edited / "destila_cache.json").read_text())
    entry = next(f for f in record["files"] if f["name"] == name)
    entry.update(bytes=(edited / name).stat().st_size, sha256=sha256_file(edited / name))
    (edited / "destila_cache.json").write_text(json.dumps(record))
    code, out, _ = run_cli(["cache", "verify", str(edited)], capsys)
    assert code == 1 and "the rows were changed" in out
    assert "README.md: its record differs from destila_cache.json" in out


def test_export_refuses_an_existing_folder_and_leaves_no_partial_output(caches, tmp_path, capsys):
    cache_path, _ = caches["plain"]
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    code, _, err = run_cli(["cache", "export", str(cache_path), str(taken)], capsys)
    assert code == 2 and "already exists and is not an empty folder" in err and len(err.strip().splitlines()) == 1
    assert (taken / "keep.txt").read_text() == "mine"
    code, out, _ = run_cli(["cache", "export", str(cache_path), str(tmp_path / "fresh"), "--format", "parquet",
                            "--no-progress"], capsys)
    assert code == 0 and "23 sequences in 1 Parquet file(s)" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "taken"]  # no staging folder or lock left


def test_open_cache_names_what_it_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match="no manifest.json and no destila_cache.json"):
        open_cache(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        open_cache(tmp_path / "missing")
    with pytest.raises(ValueError, match="'org/name' is not a local folder, and the Hub is out of reach"):
        open_cache("org/name")  # the tests run with HF_HUB_OFFLINE set


@pytest.mark.slow  # two real processes, one killed
def test_a_killed_export_leaves_no_output_and_the_rerun_writes_the_same_rows(caches, tmp_path):
    import subprocess
    import sys

    from conftest import ENV, run_and_kill

    cache_path, export_path = caches["plain"]
    out = tmp_path / "out"
    command = [sys.executable, "-m", "destila", "cache", "export", str(cache_path), str(out), "--rows-per-file", "1",
               "--no-progress"]
    started = lambda: any(len(list((p / "data").glob("*.parquet"))) >= 2 for p in tmp_path.glob(".out.tmp-*"))  # noqa: E731
    assert run_and_kill(command, started)
    assert not out.exists()  # the staging folder is never renamed into place unfinished
    subprocess.run(command, env=ENV, check=True, capture_output=True, timeout=120)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # the killed run's staging folder is gone
    record = json.loads((out / "destila_cache.json").read_text())
    assert record["content_sha256"] == json.loads((export_path / "destila_cache.json").read_text())["content_sha256"]
    assert len(record["files"]) == 23


def test_verify_reads_no_file_an_export_record_names_outside_it(caches, tmp_path, capsys):
    """An export is shared data too: a listed name with `..`, or a listed file that is a link out, is a fault and
    the file outside is never hashed (see docs/reliability.md, the threat model)."""
    _, export_path = caches["plain"]
    hostile = shutil.copytree(export_path, tmp_path / "hostile")
    first = hostile / "data" / "train-00000-of-00003.parquet"
    outside = tmp_path / "outside.parquet"
    shutil.move(first, outside)
    record = json.loads((hostile / "destila_cache.json").read_text())
    record["files"][0]["name"] = "data/../../outside.parquet"
    (hostile / "destila_cache.json").write_text(json.dumps(record, indent=1))
    code, out, _ = run_cli(["cache", "verify", str(hostile)], capsys)
    assert code == 1 and "FAULT data/../../outside.parquet: not a plain data/NAME.parquet file name" in out
    record["files"][0]["name"] = "data/train-00000-of-00003.parquet"
    (hostile / "destila_cache.json").write_text(json.dumps(record, indent=1))
    first.symlink_to(outside)
    code, out, _ = run_cli(["cache", "verify", str(hostile)], capsys)
    assert code == 1 and f"FAULT data/train-00000-of-00003.parquet: a symbolic link to {outside}" in out


# What differs between a cache and its export by construction: where they are, and the bytes that hold them.
_PLACE_AND_SIZE = ("path", "shards", "shard_bytes", "folder_bytes", "bytes_per_token", "bytes_per_entry", "export",
                   "files")


@pytest.mark.parametrize("name", ["plain", "sampled"])
def test_inspect_reads_an_export_as_its_cache(caches, name, capsys):
    cache_path, export_path = caches[name]
    code, exported, err = run_cli(["cache", "inspect", str(export_path), "--json"], capsys)
    assert code == 0, err
    code, original, _ = run_cli(["cache", "inspect", str(cache_path), "--json"], capsys)
    exported, original = json.loads(exported), json.loads(original)
    assert exported["export"] is True and exported["shards"] == 3 and len(exported["files"]) == 3
    assert exported["tokenizer"].pop("path") == str(export_path / "tokenizer")
    original["tokenizer"].pop("path")
    for key in _PLACE_AND_SIZE:
        exported.pop(key, None), original.pop(key, None)
    for key in ("name", "path"):  # an export names no local folder: the teacher by its last component
        original["teacher"][key] = Path(original["teacher"][key]).name
    assert exported == original


def test_inspect_of_an_export_prints_the_summary_and_refuses_damage_in_one_line(caches, tmp_path, capsys):
    _, export_path = caches["plain"]
    code, out, _ = run_cli(["cache", "inspect", str(export_path)], capsys)
    assert code == 0 and "(an export: Parquet files" in out and "23 of 23 × 32 tokens" in out
    assert "3 Parquet file(s)" in out and "top-K mass" in out
    damaged = _with_a_flipped_byte(export_path, tmp_path / "flipped")
    code, _, err = run_cli(["cache", "inspect", str(damaged)], capsys)
    assert code == 2 and err.strip().count("\n") == 0 and "checksum" in err


def test_the_top_level_help_names_export(capsys):
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0 and "build, inspect, verify or export" in out
