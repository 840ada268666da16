"""Shard bytes do not change when the code is reorganised: golden SHA-256s of tiny caches of every kind.

Each cache of :data:`CASES` is built from a tiny random teacher and its
shards' SHA-256, and that of its manifest's content fields, compared with
``golden_cache_sha256.json``, recorded from a build before the codecs were
split into modules. The teacher's float32
logits (and zstd's output) may differ on another CPU or library version; a
probe of both is recorded beside the hashes, and when it differs the test is
skipped (the arithmetic changed, not the code under test).

Regenerate after an intended format change::

    PYTHONPATH=src python tests/cache/test_cache_golden.py
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from destila.cache import build_cache, read_manifest
from destila.data import load_texts, pack_documents
from destila.models import load_causal_lm, load_tokenizer

GOLDEN = Path(__file__).with_name("golden_cache_sha256.json")
SMALL = dict(seq_len=32, max_tokens=32 * 7, shard_size=3, batch_size=2, progress=False)
CASES = {
    "topk-plain-float16": dict(top_k=8),
    "topk-plain-bfloat16-hidden": dict(top_k=8, logprob_dtype="bfloat16", hidden_layers="1,3", hidden_dim=8),
    "topk-compact": dict(top_k=8, encoding="compact"),
    "sampled-plain": dict(kind="sampled", samples=16, seed=3),
    "sampled-compact": dict(kind="sampled", samples=16, seed=3, encoding="compact"),
}


def probe(teacher: Path) -> str:
    """SHA-256 of what the shards depend on besides destila: token ids, teacher logits, a zstd frame."""
    import zstandard

    ids = pack_documents(load_texts("pydoc"), load_tokenizer(str(teacher)), SMALL["seq_len"], SMALL["max_tokens"])
    with torch.no_grad():
        logits = load_causal_lm(str(teacher))(ids[:2], use_cache=False).logits.float()
    digest = hashlib.sha256(ids.numpy().tobytes())
    digest.update(logits.numpy().tobytes())
    digest.update(zstandard.ZstdCompressor(level=12, write_checksum=True).compress(bytes(range(256)) * 8))
    return digest.hexdigest()


def build_hashes(teacher: Path, root: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Per case: the SHA-256 of each shard, and of the manifest's content fields (paths and versions aside)."""
    shards, manifests = {}, {}
    for name, options in CASES.items():
        out = root / name
        assert build_cache(str(teacher), "pydoc", out, **SMALL, **options).complete
        manifest = read_manifest(out)
        shards[name] = [hashlib.sha256((out / s.name).read_bytes()).hexdigest() for s in manifest.shards]
        content = {**manifest.content(), "shards": [[s.name, s.rows, s.sequences, s.sha256, s.bytes]
                                                    for s in manifest.shards]}
        manifests[name] = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
    return shards, manifests


def test_shards_are_byte_identical_to_the_recorded_build(tiny_llama_dir, tmp_path):
    golden = json.loads(GOLDEN.read_text())
    if probe(tiny_llama_dir) != golden["probe"]:
        pytest.skip("this machine's float32 logits or zstd frames differ from the recording machine's")
    shards, manifests = build_hashes(tiny_llama_dir, tmp_path)
    assert shards == golden["shards"]
    assert manifests == golden["manifests"]


if __name__ == "__main__":  # regenerate the golden file
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from conftest import save_tiny_model, train_tiny_tokenizer

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        import os

        os.environ["DESTILA_DATA_CACHE"] = str(Path(tmp) / "stores")
        teacher = save_tiny_model(Path(tmp) / "teacher", train_tiny_tokenizer())
        shards, manifests = build_hashes(teacher, Path(tmp) / "caches")
        record = {"probe": probe(teacher), "shards": shards, "manifests": manifests}
    GOLDEN.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {GOLDEN}")
