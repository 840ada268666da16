"""Compact and sampled caches built from a tiny teacher: read like plain ones, verified, inspected."""

import hashlib
import math

import numpy as np
import pytest
import torch
from cache_oracle import direct_topk
from conftest import shard_metadata_of

from destila.cache import BuildSpec, CorruptShardError, TopKCache, build_cache, inspect_cache, read_manifest
from destila.cache import verify_cache
from destila.data import load_texts, pack_documents
from destila.models import load_causal_lm, load_tokenizer
from destila.targets.spec import TargetSpec

SMALL = dict(seq_len=32, max_tokens=32 * 11, shard_size=4, batch_size=3, progress=False)


def build(teacher, out, encoding="plain", **targets):
    spec = BuildSpec.from_options(str(teacher), "pydoc", out, encoding=encoding, targets=TargetSpec(**targets), **SMALL)
    report = build_cache(spec)
    assert report.complete
    return out


@pytest.fixture(scope="module")
def float32_and_compact(tmp_path_factory, tiny_llama_dir):
    root = tmp_path_factory.mktemp("encodings")
    plain = build_cache(str(tiny_llama_dir), "pydoc", root / "plain", logprob_dtype="float32", top_k=12, **SMALL)
    assert plain.complete
    return root / "plain", build(tiny_llama_dir, root / "compact", "compact", top_k=12)


def test_compact_reads_like_plain_within_the_quantisation_error(float32_and_compact):
    plain, compact = (TopKCache(p) for p in float32_and_compact)
    assert compact.manifest.encoding == "compact" and compact.logprob_dtype == torch.float32
    assert compact.manifest.compact["sqrt_levels"] == 512
    kls = []
    for i in range(len(plain)):
        a, b = plain[i], compact[i]
        for key in ("input_ids", "position_ids", "labels"):
            assert torch.equal(a[key], b[key]), key
        assert torch.equal(a["tail_logmass"], b["tail_logmass"])  # exact float32
        trained = a["labels"] != -100
        assert torch.isneginf(b["topk_logprobs"][~trained]).all()
        # the same id set per position; order by log-prob (ties broken by id after rounding)
        assert torch.equal(a["topk_ids"][trained].sort(1).values, b["topk_ids"][trained].sort(1).values)
        assert (b["topk_logprobs"][trained][:, 1:] <= b["topk_logprobs"][trained][:, :-1]).all()
        lp_a = a["topk_logprobs"][trained].double()
        lp_b = b["topk_logprobs"][trained].double().gather(
            1, b["topk_ids"][trained].argsort(1).gather(1, a["topk_ids"][trained].argsort(1).argsort(1)))
        bucket_a = torch.cat([lp_a, a["tail_logmass"][trained, None].double()], 1)
        bucket_b = torch.cat([lp_b, b["tail_logmass"][trained, None].double()], 1)
        kls.append((bucket_a.exp() * (bucket_a - bucket_b)).sum(1))
    kl = torch.cat(kls)
    bound = 12 / (6 * 512**2)  # K·step²/6, docs/cache.md
    assert kl.mean() <= 1.5 * bound and kl.max() <= 4 * bound


def test_compact_verifies_inspects_and_is_smaller(float32_and_compact):
    plain, compact = float32_and_compact
    report = verify_cache(compact)
    assert report.ok, report.faults
    assert report.max_mass_error < 1e-5
    small, large = inspect_cache(compact), inspect_cache(plain)
    assert small["stored_entries"] == large["stored_entries"] == 11 * 31 * 12
    assert small["bytes_per_entry"] == sum(s.bytes for s in read_manifest(compact).shards) / (11 * 31 * 12)
    assert small["bytes_per_token"] < large["bytes_per_token"] / 3
    assert small["stats"]["positions"] == 11 * 31
    assert abs(small["stats"]["topk_mass_mean"] - large["stats"]["topk_mass_mean"]) < 1e-6


def test_a_damaged_compact_block_is_found_even_with_a_matching_checksum(float32_and_compact, tmp_path):
    import shutil

    from safetensors.torch import load_file, save

    folder = shutil.copytree(float32_and_compact[1], tmp_path / "copy")
    manifest = read_manifest(folder)
    shard = manifest.shards[1]
    tensors = load_file(str(folder / shard.name))
    start, stop = tensors["block_offsets"][2].item(), tensors["block_offsets"][3].item()
    tensors["blocks"][(start + stop) // 2] ^= 0x04  # one bit inside row 2's block
    payload = save(tensors, metadata=shard_metadata_of(folder / shard.name))  # the cache's identity kept
    (folder / shard.name).write_bytes(payload)
    shard.sha256, shard.bytes = hashlib.sha256(payload).hexdigest(), len(payload)
    (folder / "manifest.json").write_text(manifest.to_json())
    report = verify_cache(folder)
    assert len(report.faults) == 1 and report.faults[0].startswith(f"{shard.name}: row 2 does not decode")
    cache = TopKCache(folder)
    cache[4]  # row 0 of the same shard decodes
    with pytest.raises(CorruptShardError, match="not a zstd frame"):
        cache[6]


def test_resume_refuses_another_encoding(float32_and_compact, tiny_llama_dir):
    with pytest.raises(ValueError, match="encoding: cache has 'compact', this build has 'plain'"):
        build(tiny_llama_dir, float32_and_compact[1], "plain", top_k=12)


@pytest.mark.parametrize("encoding", ["plain", "compact"])
def test_sampled_targets_follow_the_teacher(tiny_llama_dir, tmp_path, encoding):
    samples = 16
    out = build(tiny_llama_dir, tmp_path / "s", encoding, kind="sampled", samples=samples, temperature=2.0, seed=3)
    assert verify_cache(out).ok
    cache = TopKCache(out)
    assert cache.top_k == samples and cache.manifest.targets["kind"] == "sampled"
    model = load_causal_lm(str(tiny_llama_dir))
    packed = pack_documents(load_texts("pydoc"), load_tokenizer(str(tiny_llama_dir)), 32, SMALL["max_tokens"])
    item = cache[5]
    trained = item["labels"] != -100
    assert torch.isneginf(item["tail_logmass"][trained]).all() and (item["tail_logmass"][~trained] == 0).all()
    lp = item["topk_logprobs"][trained]
    counts = (lp.exp() * samples).round()
    assert torch.allclose(lp.exp() * samples, counts, atol=1e-4) and (counts.sum(1) == samples).all()
    assert (lp[:, 1:] <= lp[:, :-1]).all()  # by decreasing count
    # every drawn id has positive teacher probability at T = 2, and frequent draws are likely tokens
    _, _, _, logp = direct_topk(model, packed[5:6], 1, 2.0)
    logp = logp[0][trained]
    real = lp > -math.inf
    drawn = logp.gather(1, item["topk_ids"][trained])[real]
    assert (drawn > -30).all()
    assert drawn.exp().mean() > logp.exp().pow(2).sum(1).mean() * 0.5  # E_p[p] ≈ Σ p², within noise


def test_sampled_draws_do_not_depend_on_shards_or_head_chunks(tiny_llama_dir, tmp_path):
    a = TopKCache(build(tiny_llama_dir, tmp_path / "a", "compact", kind="sampled", samples=8))
    spec = BuildSpec.from_options(str(tiny_llama_dir), "pydoc", tmp_path / "b", encoding="compact",
                     targets=TargetSpec(kind="sampled", samples=8, head_chunk_rows=7),
                     **{**SMALL, "shard_size": 5})
    build_cache(spec)
    b = TopKCache(tmp_path / "b")
    for i in range(len(a)):
        assert all(torch.equal(a[i][k], b[i][k]) for k in a[i]), i
    c = TopKCache(build(tiny_llama_dir, tmp_path / "c", "compact", kind="sampled", samples=8, seed=1))
    assert not torch.equal(a[0]["topk_ids"], c[0]["topk_ids"])


def test_keyword_convenience_equals_the_spec(tiny_llama_dir, tmp_path):
    build_cache(str(tiny_llama_dir), "pydoc", tmp_path / "kw", encoding="compact", top_k=5, **SMALL)
    assert read_manifest(tmp_path / "kw").targets["top_k"] == 5
    with pytest.raises(ValueError, match="unknown options chunk_size"):
        build_cache(str(tiny_llama_dir), "pydoc", tmp_path / "x", chunk_size=5)
    with pytest.raises(ValueError, match="either a BuildSpec"):
        build_cache(BuildSpec(str(tiny_llama_dir), "pydoc", tmp_path / "y"), top_k=3)
    with pytest.raises(ValueError, match="encoding: expected one of plain, compact"):
        BuildSpec(str(tiny_llama_dir), "pydoc", tmp_path / "z", encoding="zip")
    np.testing.assert_equal(BuildSpec("t", "d", "o").output.name, "o")


def test_cli_builds_a_compact_sampled_cache_and_inspects_it(tiny_llama_dir, tmp_path, capsys):
    import json

    from destila.cli.main import main

    out = tmp_path / "cli"
    with pytest.raises(SystemExit) as done:
        main(["cache", "build", str(tiny_llama_dir), "pydoc", "-o", str(out), "--seq-len", "32", "--max-tokens", "192",
              "--targets", "sampled", "--samples", "8", "--encoding", "compact", "--quiet"])
    assert done.value.code == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main(["cache", "inspect", str(out), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert summary["targets"]["kind"] == "sampled" and summary["encoding"] == "compact"
    assert summary["bytes_per_token"] > 0 and 0 < summary["stored_entries"] <= 6 * 31 * 8
    with pytest.raises(SystemExit) as done:
        main(["cache", "build", str(tiny_llama_dir), "pydoc", "-o", str(tmp_path / "bad"), "--samples", "0"])
    assert done.value.code == 2 and "samples: expected a positive integer" in capsys.readouterr().err
