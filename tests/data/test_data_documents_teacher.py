"""Documents stay documents: a document's teacher top-K packed with others equals its top-K alone."""

import json

import pytest
import torch

from destila.cache import TopKCache, build_cache
from destila.data import DataSpec, packed_source, pydoc_texts
from destila.models import load_causal_lm, load_tokenizer

from conftest import requires_real_teacher


def short_documents(count: int, length: int) -> list[str]:
    return [text[:length] for text in pydoc_texts()[:count]]


def assert_packed_equals_alone(teacher: str, tmp_path, seq_len: int, texts: list[str], top_k: int, **build_options):
    """Build a cache over ``texts`` packed in rows of ``seq_len``; every document inside one row must have the
    top-K it gets when the teacher reads it alone (float32; a document that saw its neighbours differs by ~0.1).

    "Log-probs within 1e-5 in float32" means ``assert_close(rtol=1e-5, atol=1e-5)``. The reference is the exact
    (float64) log-softmax of the teacher's float32 logits for the document alone: ``torch.log_softmax`` in
    float32 on CPU is itself ~3e-5 off it for SmolLM2 (logsumexp ≈ 40: ~8 ulps), a shift of every
    log-prob of a position that the teacher pass's head does not make (it stays within about one ulp). What is left
    is the float32 rounding of the decoder: sdpa attends within a packed row through a masked kernel and to a
    document alone through its causal one (with eager attention the hidden states are bit-identical), a
    relative perturbation of the hidden states whose effect on log p grows with |log p|, hence the relative part
    (measured on SmolLM2: at most 2.4e-5 at log p ≈ -7.9, 6.5e-6 relative where |log p| ≥ 1, 3.3e-6 absolute
    where |log p| < 1; under half of this tolerance everywhere)."""
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    spec = DataSpec(str(path), seq_len=seq_len)
    build_cache(teacher, spec, tmp_path / "c", top_k=top_k, logprob_dtype="float32", progress=False, **build_options)
    cache = TopKCache(tmp_path / "c")
    source = packed_source(spec, load_tokenizer(teacher))
    model = load_causal_lm(teacher)
    offsets, tokens = source.store.offsets, source.store.tokens
    compared = shared = 0
    for d in range(source.store.documents):
        begin, end = int(offsets[d]), int(offsets[d + 1])
        row = begin // seq_len
        if row >= len(cache) or (end - 1) // seq_len != row:
            continue  # cut by a row boundary, or past the last row
        ids = torch.tensor(tokens[begin:end], dtype=torch.long)[None]
        with torch.no_grad():
            alone = torch.log_softmax(model(ids, use_cache=False).logits.double(), -1)[0]
        values, top_ids = alone[:-1].float().topk(top_k, -1)  # a document's last token has no target in the cache
        item = cache[row]
        assert item["position_ids"][begin - row * seq_len : end - row * seq_len].tolist() == list(range(end - begin))
        span = slice(begin - row * seq_len, end - 1 - row * seq_len)
        assert (item["labels"][span] != -100).all() and item["labels"][end - 1 - row * seq_len] == -100
        torch.testing.assert_close(item["topk_logprobs"][span], values, rtol=1e-5, atol=1e-5)
        # ids are compared where no two log-probs are close enough to swap within that tolerance
        apart = values[:, :-1] - values[:, 1:] > 2 * (1e-5 + 1e-5 * values[:, 1:].abs())
        distinct = torch.cat([apart, torch.ones(len(values), 1, dtype=torch.bool)], -1)
        distinct[:, 1:] &= apart
        assert torch.equal(item["topk_ids"][span][distinct], top_ids[distinct])
        compared += 1
        shared += bool(begin % seq_len) or end % seq_len != 0
    assert compared >= 4 and shared >= 3, (compared, shared)


def test_packed_document_top_k_equals_alone(tiny_model_dir, tmp_path):
    assert_packed_equals_alone(str(tiny_model_dir), tmp_path, 64, short_documents(24, 90), top_k=8, batch_size=3)


@pytest.mark.real_model
@requires_real_teacher
def test_packed_document_top_k_equals_alone_embedded_teacher(tmp_path):
    assert_packed_equals_alone("smollm2", tmp_path, 96, short_documents(12, 120), top_k=20, batch_size=4)
