"""Byte spans: token bytes of byte-level and ▁ tokenizers, the walk over a document, the store and every packing."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import HARD_TEXTS, conversations

from destila.data import DataSpec, packed_source, texts_source
from destila.data.spans import PROBE_TEXT, Speller, SpanError, byte_spans, check_spells_bytes


def _rebuild(table, ids, start, end) -> bytes:
    """A document's bytes from its tokens placed at their spans (each token's bytes, or their last `width`)."""
    out = bytearray(int(end[-1]))
    for token, a, b in zip(ids, start, end):
        piece = table[int(token)]
        out[int(a) : int(b)] = piece[len(piece) - int(b - a) :]
    return bytes(out)


@pytest.mark.parametrize("which", ["byte_level", "space_mark"])
def test_token_bytes_are_what_the_tokenizer_decodes(which, tiny_chat_tokenizer, space_mark_tokenizer):
    """Every token that is whole UTF-8 decodes (through the tokenizer's own decoder) to the bytes of the table."""
    tokenizer = tiny_chat_tokenizer if which == "byte_level" else space_mark_tokenizer
    table = Speller(tokenizer).table
    checked = 0
    for token in range(len(tokenizer)):
        try:
            text = table[token].decode("utf-8")
        except UnicodeDecodeError:
            continue  # a piece of a character: the decoder would print a replacement character
        decoded = tokenizer.decode([token])
        if which == "space_mark" and text.startswith(" "):
            decoded = " " + decoded if not decoded.startswith(" ") else decoded  # its decoder strips one leading space
        assert decoded == text, (token, table[token], decoded)
        checked += 1
    assert checked > len(tokenizer) // 2


@pytest.mark.parametrize("which", ["byte_level", "space_mark"])
def test_spans_cover_the_text_exactly(which, tiny_chat_tokenizer, space_mark_tokenizer):
    tokenizer = tiny_chat_tokenizer if which == "byte_level" else space_mark_tokenizer
    speller = check_spells_bytes(tokenizer)
    for text in [PROBE_TEXT, *HARD_TEXTS]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        start, end = byte_spans(text, ids, speller)
        raw = text.encode()
        assert start[0] == 0 and end[-1] == len(raw) and np.array_equal(start[1:], end[:-1])
        assert start[-1] == end[-1] == len(raw)  # the EOS after the document: empty, at its end
        assert _rebuild(speller.table, ids[:-1], start[:-1], end[:-1]) == raw
    if which == "space_mark":  # the ▁ written before the first word covers nothing
        ids = tokenizer("Hello", add_special_tokens=False)["input_ids"]
        assert speller.table[ids[0]].startswith(b" ")
        start, end = byte_spans("Hello", ids, speller)
        assert (start[0], end[-1]) == (0, 5)


def test_a_tokenizer_that_changes_the_text_is_refused_in_one_line(lowercasing_tokenizer):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    lowered = lowercasing_tokenizer
    with pytest.raises(ValueError) as err:
        check_spells_bytes(lowered, "student tokenizer")
    assert "\n" not in str(err.value) and str(err.value).startswith("student tokenizer: cannot be read as bytes")

    word_piece = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    with pytest.raises(ValueError, match="WordPiece"):
        check_spells_bytes(PreTrainedTokenizerFast(tokenizer_object=word_piece, unk_token="[UNK]"))


def test_a_wrong_token_names_where_it_stands(tiny_chat_tokenizer):
    speller = Speller(tiny_chat_tokenizer)
    ids = tiny_chat_tokenizer("abc def", add_special_tokens=False)["input_ids"]
    with pytest.raises(SpanError, match="byte 0"):
        byte_spans("xbc def", ids, speller)


@pytest.mark.parametrize("packing", ["documents", "bfd", "none"])
def test_packed_rows_carry_the_spans_of_their_documents(packing, tiny_chat_tokenizer):
    texts = HARD_TEXTS * 3
    source = texts_source(texts, tiny_chat_tokenizer, seq_len=48, packing=packing, spans=True)
    plain = texts_source(texts, tiny_chat_tokenizer, seq_len=48, packing=packing)
    assert source.fingerprint != plain.fingerprint  # the spans are content
    table = Speller(tiny_chat_tokenizer).table
    raws = [t.encode() for t in texts]
    for index in range(len(source)):
        item, bare = source[index], plain[index]
        for key in ("input_ids", "position_ids", "loss_mask"):  # spans add to the row, change nothing in it
            assert bare[key].tolist() == item[key].tolist()
        start, end = item["span_start"].numpy(), item["span_end"].numpy()
        padding = start < 0
        assert ((start == -1) == (end == -1)).all()
        ids = item["input_ids"].numpy()
        for a, b in _blocks(item["position_ids"].numpy(), padding):
            text = _rebuild(table, ids[a:b], start[a:b] - start[a], end[a:b] - start[a])
            assert any(text == raw[start[a] : start[a] + len(text)] for raw in raws), (index, a, text[:40])


def _blocks(positions, padding):
    cuts = sorted(set([0, len(positions)] + np.flatnonzero(positions == 0).tolist()))
    for a, b in zip(cuts[:-1], cuts[1:]):
        real = np.flatnonzero(~padding[a:b])
        if len(real):
            yield a + real[0], a + real[-1] + 1


def test_conversations_spans_are_in_the_rendered_text(tmp_path, tiny_chat_tokenizer):
    from datasets import Dataset

    chats = conversations()
    Dataset.from_list(chats).to_json(str(tmp_path / "chats.jsonl"))
    spec = DataSpec(str(tmp_path / "chats.jsonl"), messages_field="messages", seq_len=512, packing="none")
    source = packed_source(spec, tiny_chat_tokenizer, spans=True)
    table = Speller(tiny_chat_tokenizer).table
    for index, chat in enumerate(chats):
        rendered = tiny_chat_tokenizer.apply_chat_template(chat["messages"], tokenize=False).encode()
        item = source[index]
        real = item["span_start"].numpy() >= 0
        ids, start, end = (item[k].numpy()[real] for k in ("input_ids", "span_start", "span_end"))
        assert _rebuild(table, ids, start, end) == rendered[: end[-1]]
        assert end[-1] == len(rendered) or real.all()  # whole conversation, unless cut at the row's end
        trained = item["loss_mask"].numpy()[real]
        # Trained targets (the next token) lie in assistant turns: after "<|im_start|>assistant\n".
        for t in np.flatnonzero(trained[:-1]):
            before = rendered[: start[t + 1]]
            assert before.rfind(b"<|im_start|>assistant\n") > before.rfind(b"<|im_start|>user")
