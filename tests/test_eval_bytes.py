"""Bits per byte: the byte count of scored tokens, and the metric against a direct computation."""

import json
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from conftest import pydoc_texts
from destila.data import DataSpec, pack_documents
from destila.eval import EvalSpec, evaluate_model, markdown_table
from destila.eval.bytes import bits_per_byte, scored_bytes, token_byte_lengths

TEXTS = ["plain ASCII text, with punctuation.\n", "héllo wörld — ✓ 日本語 😀 naïve", "tab\tand\r\nnewlines  ",
         "Ωmega≈≠" * 5]


def test_byte_level_lengths_sum_to_the_utf8_bytes_of_any_text(tiny_tokenizer):
    lengths = token_byte_lengths(tiny_tokenizer)
    assert lengths.shape == (len(tiny_tokenizer),)
    assert lengths[tiny_tokenizer.eos_token_id] == 0  # a special token spells no text
    for text in TEXTS + pydoc_texts(2):
        ids = torch.tensor(tiny_tokenizer(text, add_special_tokens=False)["input_ids"])
        # The tiny vocabulary splits the multi-byte characters into single-byte tokens: still exact.
        assert scored_bytes(ids, lengths) == len(text.encode("utf-8"))


def test_sentencepiece_lengths_count_the_space_marker_and_byte_fallback():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    # Llama 2's layout: "▁" for spaces, and <0xNN> tokens for bytes the vocabulary lacks.
    trained = Tokenizer(models.BPE(unk_token="<unk>"))
    trained.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    trained.train_from_iterator(pydoc_texts(5), trainer=trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>", "</s>"], show_progress=False))
    model = json.loads(trained.to_str())["model"]
    vocab = dict(model["vocab"])
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    core = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True))
    core.add_special_tokens(["<unk>", "</s>"])
    core.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    core.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                      decoders.Strip(" ", 1, 0)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="</s>", unk_token="<unk>")
    lengths = token_byte_lengths(tokenizer)
    vocab = tokenizer.get_vocab()
    assert lengths[vocab["<0x0A>"]] == 1 and lengths[vocab["</s>"]] == 0
    word = next(token for token in vocab if token.startswith("\u2581") and len(token) > 2)
    assert lengths[vocab[word]] == len(word.encode("utf-8")) - 2  # "▁" (3 bytes) stands for one space
    text = "The with statement, over 3 lines:\nnaïve ✓"
    ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert tokenizer.decode(ids) == text
    assert scored_bytes(ids, lengths) == len(text.encode("utf-8")) + 1  # + the space the decoder strips at the start


def test_scored_bytes_skips_ignored_labels_and_ids_past_the_table():
    lengths = torch.tensor([0, 1, 2, 3])
    labels = torch.tensor([[1, -100, 3], [2, 7, -100]])
    assert scored_bytes(labels, lengths) == 1 + 3 + 2


def test_bits_per_byte_formula_and_bad_counts():
    assert bits_per_byte(math.log(2) * 10, 5) == pytest.approx(2.0)
    assert bits_per_byte(3.0, 0) is None
    with pytest.raises(ValueError, match="byte_count"):
        bits_per_byte(1.0, -1)


def test_eval_bits_per_byte_match_a_direct_computation(tiny_llama_dir, tiny_tokenizer):
    result = evaluate_model(EvalSpec([str(tiny_llama_dir)], data=DataSpec(pydoc_texts(3), seq_len=32),
                                     max_tokens=32 * 12, new_tokens=4))
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    ids = pack_documents(pydoc_texts(3), tiny_tokenizer, 32, max_tokens=32 * 12)
    with torch.no_grad():
        loss = model(ids, labels=ids).loss.item()  # mean nats over every next token
    nll = loss * ids.shape[0] * (ids.shape[1] - 1)
    text_bytes = sum(len(tiny_tokenizer.decode(row[1:], skip_special_tokens=True).encode("utf-8")) for row in ids)
    assert result["bytes"] == text_bytes
    assert result["bits_per_byte"] == pytest.approx(nll / (math.log(2) * text_bytes), rel=1e-5)
    assert f"| bits per byte | {result['bits_per_byte']:.3f} |" in markdown_table([result])


def test_from_a_cache_the_bytes_are_those_its_scored_targets_spell(tiny_llama_dir, tiny_tokenizer, tmp_path):
    """Against a cache the bytes are counted over the cache's scored next tokens, with the cache's tokenizer."""
    from destila.cache import TopKCache, build_cache

    cache = tmp_path / "cache"
    # ASCII text, so a row can start inside no character and decoding a row's targets spells exactly their bytes
    # (any text's bytes, multi-byte characters split across rows included, are the test above).
    ascii_texts = [text.encode("ascii", "ignore").decode() for text in pydoc_texts(2)]
    build_cache(str(tiny_llama_dir), ascii_texts, cache, seq_len=32, top_k=8, progress=False)
    result = evaluate_model(EvalSpec([str(tiny_llama_dir)], cache=str(cache), new_tokens=4))
    source = TopKCache(cache)
    text_bytes = 0
    for index in range(len(source)):
        row = source[index]
        targets = row["labels"][row["labels"] != -100]  # the next token at each trained position
        text_bytes += len(tiny_tokenizer.decode(targets, skip_special_tokens=True,
                                             clean_up_tokenization_spaces=False).encode("utf-8"))
    assert result["bytes"] == text_bytes > 0
    nll = result["cross_entropy"] * result["tokens"]
    assert result["bits_per_byte"] == pytest.approx(nll / (math.log(2) * text_bytes), rel=1e-6)
