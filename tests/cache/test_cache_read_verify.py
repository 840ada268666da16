"""Reader, verify, inspect and the CLI on a small real cache; corruption is found and refused."""

import json
import pickle

import pytest
import torch
from conftest import shard_metadata_of

from destila.cache import CorruptShardError, TopKCache, build_cache, inspect_cache, verify_cache
from destila.data import collate
from destila.cache.format import read_manifest
from destila.cli.main import main

SMALL = dict(seq_len=32, max_tokens=32 * 23, top_k=12, shard_size=5, batch_size=4, progress=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_llama_dir):
    path = tmp_path_factory.mktemp("cache") / "c"
    build_cache(str(tiny_llama_dir), "pydoc", path, **SMALL)
    return path


def copy_of(built, tmp_path):
    import shutil

    return shutil.copytree(built, tmp_path / "copy")


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def test_items_and_attributes(built):
    cache = TopKCache(built)
    assert len(cache) == 23 and cache.seq_len == 32 and cache.top_k == 12 and cache.vocab_size == 320
    assert cache.logprob_dtype == torch.float16 and (cache.tokenizer_path / "tokenizer_config.json").is_file()
    item = cache[7]
    assert set(item) == {"input_ids", "position_ids", "labels", "topk_ids", "topk_logprobs", "tail_logmass"}
    assert item["input_ids"].shape == (32,) and item["input_ids"].dtype == torch.int64
    assert torch.equal(item["position_ids"], torch.arange(32))
    assert torch.equal(item["labels"][:-1], item["input_ids"][1:]) and item["labels"][-1] == -100
    # the last position has no label, so the cache stores no target there
    assert torch.isneginf(item["topk_logprobs"][-1]).all() and item["tail_logmass"][-1] == 0
    assert item["topk_ids"].shape == (32, 12) and item["topk_ids"].dtype == torch.int64
    assert item["topk_logprobs"].shape == (32, 12) and item["topk_logprobs"].dtype == torch.float16
    assert item["tail_logmass"].shape == (32,) and item["tail_logmass"].dtype == torch.float32
    assert torch.equal(cache[-1]["input_ids"], cache[22]["input_ids"])
    with pytest.raises(IndexError):
        cache[23]


def test_collate_batches_and_labels(built):
    cache = TopKCache(built)
    batch = collate([cache[0], cache[1], cache[2]])
    assert batch["input_ids"].shape == (3, 32) and batch["topk_ids"].shape == (3, 32, 12)
    assert batch["topk_logprobs"].dtype == torch.float16 and batch["tail_logmass"].shape == (3, 32)
    # Position-aligned: position t is labelled with the token t+1 it predicts; the last has no label.
    assert torch.equal(batch["labels"][:, :-1], batch["input_ids"][:, 1:])
    assert (batch["labels"][:, -1] == -100).all()
    assert torch.equal(batch["topk_logprobs"][1], cache[1]["topk_logprobs"])


def test_dataloader_with_workers_sees_the_same_items(built):
    cache = TopKCache(built)
    pickle.dumps(cache)  # workers receive the dataset by pickling under the spawn start method
    loader = torch.utils.data.DataLoader(cache, batch_size=4, num_workers=2, collate_fn=collate)
    batches = list(loader)
    ids = torch.cat([b["topk_ids"] for b in batches])
    lps = torch.cat([b["topk_logprobs"] for b in batches])
    assert torch.equal(ids, torch.stack([cache[i]["topk_ids"] for i in range(23)]))
    assert torch.equal(lps, torch.stack([cache[i]["topk_logprobs"] for i in range(23)]))


def test_sound_cache_verifies_and_inspects(built, capsys):
    report = verify_cache(built)
    assert report.ok and report.shards_checked == 5 and not report.faults
    assert 0 < report.max_mass_error < 1e-2
    code, out, _ = run_cli(["cache", "verify", str(built)], capsys)
    assert code == 0 and "OK" in out
    summary = inspect_cache(built)
    manifest = read_manifest(built)
    assert summary["bytes_per_token"] == sum(s.bytes for s in manifest.shards) / (23 * 32)
    # Trained positions: all but each row's last, and but the position before a new document (one pydoc
    # topic starts inside these 23 rows).
    cache = TopKCache(built)
    trained = sum(int((cache[i]["labels"] != -100).sum()) for i in range(len(cache)))
    assert 23 * 31 - 3 <= trained < 23 * 31
    # Per trained position: K ids int32 + K log-probs float16 + tail float32; per token: input id and
    # position id int32, loss mask bool; plus a small header per shard.
    per_token = trained / (23 * 32) * (12 * 6 + 4) + 9
    assert per_token <= summary["bytes_per_token"] < per_token + 20
    assert summary["stored_entries"] == trained * 12
    assert summary["bytes_per_entry"] == sum(s.bytes for s in manifest.shards) / (trained * 12)
    stats = summary["stats"]
    assert stats["positions"] == trained and 0 < stats["topk_mass_mean"] <= 1
    assert stats["tail_logmass_percentiles"]["p1"] <= stats["tail_logmass_percentiles"]["p99"] < 0
    assert 0 < stats["entropy_topk_mean"] < stats["entropy_bucket_mean"]
    code, out, _ = run_cli(["cache", "inspect", str(built), "--json"], capsys)
    assert code == 0 and json.loads(out)["sequences"] == 23
    code, out, _ = run_cli(["cache", "inspect", str(built)], capsys)
    assert code == 0 and "bytes/token" in out and "entropy" in out


def test_one_flipped_byte_is_found_by_verify_and_refused_by_the_reader(built, tmp_path, capsys):
    folder = copy_of(built, tmp_path)
    shard = read_manifest(folder).shards[2]
    path = folder / shard.name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit in the middle of the shard's tensors
    path.write_bytes(bytes(data))

    report = verify_cache(folder)
    assert not report.ok and len(report.faults) == 1
    assert report.faults[0].startswith(shard.name) and "checksum mismatch" in report.faults[0]
    code, out, _ = run_cli(["cache", "verify", str(folder)], capsys)
    assert code == 1 and f"FAULT {shard.name}: checksum mismatch" in out

    cache = TopKCache(folder)  # opening is cheap and does not read shards
    cache[0]  # an intact shard reads fine
    with pytest.raises(CorruptShardError, match=f"{shard.name}: checksum mismatch"):
        cache[10]  # sequence 10 is the first row of the third shard
    with pytest.raises(CorruptShardError, match="checksum mismatch"):
        TopKCache(folder, verify="open")


def test_truncated_shard_is_refused_at_open(built, tmp_path):
    folder = copy_of(built, tmp_path)
    shard = read_manifest(folder).shards[0]
    (folder / shard.name).write_bytes((folder / shard.name).read_bytes()[:-10])
    with pytest.raises(CorruptShardError, match="bytes, the manifest says"):
        TopKCache(folder)
    assert "size" in verify_cache(folder).faults[0]


def test_verify_checks_values_not_only_checksums(built, tmp_path):
    """A shard rewritten with a valid checksum but impossible values is still a fault."""
    import hashlib

    from safetensors.torch import load_file, save

    folder = copy_of(built, tmp_path)
    manifest = read_manifest(folder)
    shard = manifest.shards[1]
    tensors = load_file(str(folder / shard.name))
    tensors["topk_logprobs"][0, 0] = float("nan")
    payload = save(tensors, metadata=shard_metadata_of(folder / shard.name))  # the cache's identity kept
    (folder / shard.name).write_bytes(payload)
    shard.sha256, shard.bytes = hashlib.sha256(payload).hexdigest(), len(payload)
    (folder / "manifest.json").write_text(manifest.to_json())
    report = verify_cache(folder)
    assert report.faults == [f"{shard.name}: row 0: 1 non-finite top-K log-probs"]


def test_cli_errors_are_one_line(tmp_path, capsys, tiny_llama_dir):
    code, _, err = run_cli(["cache", "build", "some-org/no-such-model", "pydoc", "-o", str(tmp_path / "c")], capsys)
    assert code == 2 and "Hugging Face Hub could not provide it" in err and "Traceback" not in err
    code, _, err = run_cli(["cache", "inspect", str(tmp_path / "nothing")], capsys)
    assert code == 2 and "no manifest.json" in err
    code, _, err = run_cli(
        ["cache", "build", str(tiny_llama_dir), "pydoc", "-o", str(tmp_path / "c2"), "--seq-len", "1000"], capsys
    )
    assert code == 2 and "longer than the teacher's context" in err
