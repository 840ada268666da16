"""build_cache on tiny random models: content against the teacher, manifest, resume rules, errors."""

import json

import pytest
import torch
from cache_oracle import assert_matches_teacher

from destila.cache import TopKCache, build_cache, read_manifest
from destila.cache.format import CONTENT_FIELDS, MANIFEST
from destila.cache.writer import shard_blocks
from destila.data import load_texts, pack_documents
from destila.models import load_causal_lm, load_tokenizer, tokenizer_fingerprint

SMALL = dict(seq_len=32, max_tokens=32 * 23, top_k=12, logprob_dtype="float16", temperature=1.0, shard_size=5, batch_size=3, head_chunk_rows=50, progress=False)


def build(teacher, out, **overrides):
    return build_cache(str(teacher), "pydoc", out, **{**SMALL, **overrides})


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"logprob_dtype": "float32", "temperature": 2.0},
        {"logprob_dtype": "bfloat16", "top_k": 320},
    ],
    ids=["float16", "float32-T2", "bfloat16-K=V"],
)
def test_cache_equals_direct_teacher_computation(tiny_model_dir, tmp_path, options):
    settings = {**SMALL, **options}
    report = build(tiny_model_dir, tmp_path / "c", **options)
    assert report.complete and report.written_sequences == 23
    cache = TopKCache(tmp_path / "c")
    assert len(cache) == 23 and cache.top_k == settings["top_k"] and cache.seq_len == 32
    model = load_causal_lm(str(tiny_model_dir))
    packed = pack_documents(load_texts("pydoc"), load_tokenizer(str(tiny_model_dir)), 32, SMALL["max_tokens"])
    for i in (0, 4, 5, 13, 22):  # first, shard edges, middle, last
        item = cache[i]
        assert torch.equal(item["input_ids"], packed[i])
        assert item["topk_logprobs"].dtype == getattr(torch, settings["logprob_dtype"])
        assert_matches_teacher(
            item["topk_ids"][None], item["topk_logprobs"][None], item["tail_logmass"][None], model,
            packed[i : i + 1], settings["top_k"], settings["temperature"], settings["logprob_dtype"],
            trained=(item["labels"] != -100)[None], position_ids=item["position_ids"][None],
        )


def test_manifest_records_what_later_code_needs(tiny_llama_dir, tmp_path):
    build(tiny_llama_dir, tmp_path / "c")
    manifest = read_manifest(tmp_path / "c")
    raw = json.loads((tmp_path / "c" / MANIFEST).read_text())
    for name in (*CONTENT_FIELDS, "teacher", "teacher_path", "data_source", "tokens", "shards", "complete"):
        assert name in raw, name
    assert manifest.complete and manifest.sequences == 23 and manifest.tokens == 23 * 32
    assert manifest.vocab_size == 320 and manifest.top_k == 12 and manifest.temperature == 1.0
    assert [s.rows for s in manifest.shards] == [5, 5, 5, 5, 3]
    assert all(len(s.sha256) == 64 and s.bytes > 0 for s in manifest.shards)
    cache = TopKCache(tmp_path / "c")
    from transformers import AutoTokenizer

    copied = AutoTokenizer.from_pretrained(cache.tokenizer_path)
    assert tokenizer_fingerprint(copied) == manifest.tokenizer_fingerprint


def test_second_run_has_nothing_to_do(tiny_llama_dir, tmp_path):
    build(tiny_llama_dir, tmp_path / "c")
    before = (tmp_path / "c" / MANIFEST).read_bytes()
    report = build(tiny_llama_dir, tmp_path / "c", batch_size=2, shard_size=3)  # neither changes content
    assert report.nothing_to_do and report.written_sequences == 0
    assert (tmp_path / "c" / MANIFEST).read_bytes() == before


@pytest.mark.parametrize(
    "change, named",
    [({"top_k": 5}, "top_k: cache has 12, this build has 5"),
     ({"temperature": 0.5}, "temperature: cache has 1.0, this build has 0.5"),
     ({"logprob_dtype": "float32"}, "logprob_dtype")],
)
def test_different_arguments_are_refused_naming_the_difference(tiny_llama_dir, tmp_path, change, named):
    build(tiny_llama_dir, tmp_path / "c", max_tokens=32 * 4)
    with pytest.raises(ValueError, match="different arguments") as err:
        build(tiny_llama_dir, tmp_path / "c", max_tokens=32 * 4, **change)
    assert named in str(err.value)


def test_a_different_teacher_is_refused(tiny_llama_dir, tiny_gpt2_dir, tmp_path):
    build(tiny_llama_dir, tmp_path / "c", max_tokens=32 * 4)
    with pytest.raises(ValueError, match="teacher_config_hash") as err:
        build(tiny_gpt2_dir, tmp_path / "c", max_tokens=32 * 4)
    assert "teacher_weight_fingerprint" in str(err.value) and "teacher: cache was built from" in str(err.value)


def test_resume_after_a_crash_between_shard_rename_and_manifest_update(tiny_llama_dir, tmp_path):
    build(tiny_llama_dir, tmp_path / "ref")
    build(tiny_llama_dir, tmp_path / "c")
    folder = tmp_path / "c"
    manifest = read_manifest(folder)
    # Forget the last two shards in the manifest (as if killed right after their
    # rename), damage one of them, and leave half-written temporaries around.
    manifest.shards = manifest.shards[:3]
    manifest.complete = False
    (folder / MANIFEST).write_text(manifest.to_json())
    (folder / "shard-0000000015.safetensors").write_bytes(b"half a shard")
    (folder / ".shard-0000000020.safetensors.tmp-12345").write_bytes(b"partial")
    (folder / ".manifest.json.tmp-12345").write_text("{")
    report = build(tiny_llama_dir, folder)
    assert report.already_stored == 15 and report.written_sequences == 8 and report.complete
    ref, got = read_manifest(tmp_path / "ref"), read_manifest(folder)
    assert [(s.name, s.sha256) for s in got.shards] == [(s.name, s.sha256) for s in ref.shards]
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in (tmp_path / "ref").iterdir())


def test_missing_shard_is_recomputed(tiny_llama_dir, tmp_path):
    build(tiny_llama_dir, tmp_path / "c")
    before = read_manifest(tmp_path / "c")
    (tmp_path / "c" / before.shards[1].name).unlink()
    report = build(tiny_llama_dir, tmp_path / "c")
    assert report.written_sequences == before.shards[1].rows and report.complete
    assert [s.sha256 for s in read_manifest(tmp_path / "c").shards] == [s.sha256 for s in before.shards]


def test_shard_blocks_stay_aligned_to_whole_shards():
    assert shard_blocks(10, set(), 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]  # rank r of W: blocks r, r+W, …
    # a killed two-process build whose rank 0 stored blocks 0 and 2, rank 1 none: the rest are the fresh blocks
    assert shard_blocks(14, {0, 1, 2, 3, 8, 9, 10, 11}, 4) == [[4, 5, 6, 7], [12, 13]]
    assert shard_blocks(10, {0, 1, 2}, 4) == [[3], [4, 5, 6, 7], [8, 9]]  # resumed with another shard size
    assert shard_blocks(4, {0, 1, 2, 3}, 4) == []


def test_list_of_documents_as_data(tiny_llama_dir, tmp_path):
    texts = load_texts("pydoc")[:20]
    report = build_cache(str(tiny_llama_dir), texts, tmp_path / "c", **SMALL)
    assert report.complete and read_manifest(tmp_path / "c").data_source == "<20 documents given in Python>"


def test_clear_errors(tiny_llama_dir, tmp_path):
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="holds no text"):
        build_cache(str(tiny_llama_dir), tmp_path / "empty.txt", tmp_path / "c1", **SMALL)
    with pytest.raises(ValueError, match="longer than the teacher's context of 256 tokens"):
        build(tiny_llama_dir, tmp_path / "c2", seq_len=300, max_tokens=None)
    with pytest.raises(ValueError, match="top_k"):
        build(tiny_llama_dir, tmp_path / "c3", top_k=321)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "thesis.tex").write_text("precious")
    with pytest.raises(FileExistsError, match="not a destila cache"):
        build(tiny_llama_dir, tmp_path / "foreign")
    assert (tmp_path / "foreign" / "thesis.tex").read_text() == "precious"
    with pytest.raises(FileNotFoundError, match="Hugging Face Hub could not provide it"):
        build("some-org/no-such-teacher", tmp_path / "c4")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(OSError, match="cannot create or write the cache folder"):
        build(tiny_llama_dir, tmp_path / "a-file" / "cache")
