"""The embedded SmolLM2-135M teacher over pydoc: the cache equals a direct computation."""

import pytest
from cache_oracle import assert_matches_teacher
from conftest import requires_real_teacher

from destila.cache import TopKCache, build_cache, verify_cache
from destila.data import load_texts, pack_documents
from destila.models import EMBEDDED, load_causal_lm, load_tokenizer

pytestmark = [pytest.mark.real_model, requires_real_teacher]


def test_smollm2_cache_equals_direct_computation(tmp_path):
    report = build_cache(EMBEDDED, "pydoc", tmp_path / "c", seq_len=128, max_tokens=128 * 6, top_k=100,
                         batch_size=3, shard_size=4, progress=False)
    assert report.complete and report.written_tokens == 128 * 6
    assert verify_cache(tmp_path / "c").ok
    cache = TopKCache(tmp_path / "c")
    assert cache.vocab_size == 49152 and cache.manifest.eos_token_id == 2
    model = load_causal_lm(EMBEDDED)
    packed = pack_documents(load_texts("pydoc"), load_tokenizer(EMBEDDED), 128, 128 * 6)
    for i in (0, 5):
        item = cache[i]
        assert_matches_teacher(item["topk_ids"][None], item["topk_logprobs"][None], item["tail_logmass"][None],
                               model, packed[i : i + 1], 100, 1.0, "float16",
                               trained=(item["labels"] != -100)[None], position_ids=item["position_ids"][None])


def test_gguf_teacher_file(tmp_path):
    from destila.models import embedded_gguf_path

    gguf = embedded_gguf_path()
    report = build_cache(str(gguf), "pydoc", tmp_path / "c", seq_len=64, max_tokens=64 * 2, top_k=10, progress=False)
    assert report.complete
    cache = TopKCache(tmp_path / "c")
    assert cache.manifest.teacher_gguf_file == gguf.name and cache.vocab_size == 49152
    assert verify_cache(tmp_path / "c").ok
