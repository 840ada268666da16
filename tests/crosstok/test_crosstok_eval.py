"""`destila eval` of a model on another tokenizer than the cache's: bits per byte against a naive count, KL and
agreement on the aligned one-to-one rows only (the table says so); the cache's own model gets bits per byte from
the spans; what cannot be compared is refused in one line."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import make_tiny_model

from destila.cache.reader import TopKCache
from destila.constants import IGNORE_INDEX
from destila.crosstok.dataset import CrossTokenizerCache
from destila.data.spans import Speller
from destila.eval.run import evaluate_model
from destila.eval.spec import EvalSpec
from destila.eval.tables import markdown_table

SEQUENCES = 24  # of the 32-token rows of text_spans_cache
OPTIONS = dict(max_tokens=32 * SEQUENCES, new_tokens=2, batch_size=4)


def _evaluate(model, **options):
    return evaluate_model(EvalSpec([str(model)], **OPTIONS, **options))


@pytest.fixture(scope="module")
def other_model(tmp_path_factory, byte_level_student_tokenizer):
    path = tmp_path_factory.mktemp("other-model") / "model"
    model = make_tiny_model("llama", len(byte_level_student_tokenizer), layers=2, seed=5)
    model.config.max_position_embeddings = 1024
    model.save_pretrained(path)
    byte_level_student_tokenizer.save_pretrained(path)
    return path


def _naive(model_dir, items, tokenizer):
    """Σ −ln q(label) in float64 over every labelled row, each item alone; the labels' bytes from the
    tokenizer's own table (special tokens: none); top-1 agreement on the one-to-one rows."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).double().eval()
    speller = Speller(tokenizer)
    nll, nbytes, agree, aligned = 0.0, 0, 0, 0
    with torch.no_grad():
        for item in items:
            logits = model(input_ids=item["input_ids"][None], position_ids=item["position_ids"][None]).logits[0]
            labels = item["labels"]
            rows = labels != IGNORE_INDEX
            nll += float(torch.nn.functional.cross_entropy(logits[rows], labels[rows], reduction="sum"))
            nbytes += sum(0 if int(t) in speller.special else len(speller.table[int(t)]) for t in labels[rows])
            one = rows & (item["align_kind"] == 1)
            aligned += int(one.sum())
            agree += int((logits[one].argmax(-1) == item["topk_ids"][one, 0]).sum())
    return nll, nbytes, agree, aligned


def test_a_model_on_another_tokenizer_is_scored_per_byte_and_on_one_to_one_rows(text_spans_cache, other_model,
                                                                                byte_level_student_tokenizer):
    result = _evaluate(other_model, cache=str(text_spans_cache))
    data = CrossTokenizerCache(TopKCache(text_spans_cache), byte_level_student_tokenizer)
    nll, nbytes, agree, aligned = _naive(other_model, [data[i] for i in range(SEQUENCES)],
                                         byte_level_student_tokenizer)
    assert result["bits_per_byte"] == pytest.approx(nll / (math.log(2) * nbytes), rel=1e-5)
    assert result["aligned_rows"] == aligned and 0 < aligned < result["tokens"]
    assert result["top1_agreement"] == pytest.approx(agree / aligned, abs=1e-9)
    assert result["kl_to_teacher"] > 0
    table = markdown_table([result])
    assert "| bits per byte |" in table and "| one-to-one positions (KL, agreement) |" in table
    assert "on the aligned one-to-one positions only" in table


def test_the_caches_own_model_gets_bits_per_byte_from_the_spans(text_spans_cache, tiny_chat_llama_dir,
                                                                tiny_chat_tokenizer):
    result = _evaluate(tiny_chat_llama_dir, cache=str(text_spans_cache))
    cache = TopKCache(text_spans_cache)
    items = [cache[i] for i in range(SEQUENCES)]
    for item in items:
        item["align_kind"] = torch.ones_like(item["labels"])  # every row compared
    nll, nbytes, agree, aligned = _naive(tiny_chat_llama_dir, items, tiny_chat_tokenizer)
    assert result["bits_per_byte"] == pytest.approx(nll / (math.log(2) * nbytes), rel=1e-5)
    assert result["top1_agreement"] == pytest.approx(agree / aligned, abs=1e-9)
    assert "aligned_rows" not in result


def test_what_cannot_be_compared_is_refused(text_spans_cache, tiny_cache, other_model, tiny_chat_llama_dir):
    with pytest.raises(ValueError, match="has another tokenizer than the teacher's, so the teacher's logits"):
        _evaluate(other_model, cache=str(text_spans_cache), teacher=str(tiny_chat_llama_dir))
    with pytest.raises(ValueError, match=r"^eval: .*its tokenizer \(fingerprint .* stores no byte spans"):
        _evaluate(other_model, cache=str(tiny_cache))
