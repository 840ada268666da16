"""Token store and packed sequences: document bounds, positions, masks, budgets, streaming (destila.data)."""

import json

import numpy as np
import pytest
import torch

from destila.data import DataSpec, pack_documents, packed_source, pydoc_texts, texts_source


def write_jsonl(path, texts, field="text"):
    path.write_text("".join(json.dumps({field: t}) + "\n" for t in texts))
    return path


def naive_rows(tokenizer, texts, seq_len):
    """Documents end to end, every row's positions and loss mask computed token by token."""
    tokens, doc_of = [], []
    for d, text in enumerate(texts):
        ids = tokenizer(text, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        tokens += ids
        doc_of += [d] * len(ids)
    rows = []
    for r in range(len(tokens) // seq_len):
        span = range(r * seq_len, (r + 1) * seq_len)
        positions, mask = [], []
        for t in span:
            start = t
            while start > r * seq_len and doc_of[start - 1] == doc_of[t]:
                start -= 1
            positions.append(t - start)
            mask.append(t + 1 < span.stop and doc_of[t + 1] == doc_of[t])
        rows.append((tokens[span.start : span.stop], positions, mask))
    return rows


def test_documents_packing_equals_the_naive_loop(tmp_path, tiny_tokenizer):
    texts = [t[:300] for t in pydoc_texts()[:40]]  # short documents: many bounds per row
    path = write_jsonl(tmp_path / "d.jsonl", texts)
    source = packed_source(DataSpec(str(path), seq_len=37), tiny_tokenizer)
    expected = naive_rows(tiny_tokenizer, texts, 37)
    assert len(source) == len(expected) > 10
    for i, (ids, positions, mask) in enumerate(expected):
        item = source[i]
        assert item["input_ids"].tolist() == ids
        assert item["position_ids"].tolist() == positions
        assert item["loss_mask"].tolist() == mask
    assert torch.equal(source.rows(range(len(source)))["input_ids"], pack_documents(texts, tiny_tokenizer, 37))


def test_packing_none_is_one_document_per_row(tmp_path, tiny_tokenizer):
    texts = ["short one", pydoc_texts()[0]]
    source = packed_source(DataSpec(str(write_jsonl(tmp_path / "d.jsonl", texts)), packing="none", seq_len=16),
                           tiny_tokenizer)
    short = tiny_tokenizer("short one", add_special_tokens=False).input_ids + [0]
    first, second = source[0], source[1]
    n = len(short)
    assert first["input_ids"].tolist() == short + [tiny_tokenizer.pad_token_id] * (16 - n)
    assert first["loss_mask"].tolist() == [True] * (n - 1) + [False] * (16 - n + 1)
    assert first["position_ids"].tolist() == list(range(n)) + list(range(16 - n))
    long_ids = tiny_tokenizer(texts[1], add_special_tokens=False).input_ids[:16]
    assert second["input_ids"].tolist() == long_ids  # truncated
    assert second["loss_mask"].tolist() == [True] * 15 + [False]


def test_max_tokens_keeps_the_first_sequences_and_reads_no_more(tmp_path, tiny_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", pydoc_texts()[:60])
    full = packed_source(DataSpec(str(path), seq_len=64), tiny_tokenizer)
    capped = packed_source(DataSpec(str(path), seq_len=64, max_tokens=64 * 5 + 10), tiny_tokenizer)
    assert len(capped) == 5
    for i in range(5):
        assert all(torch.equal(capped[i][k], full[i][k]) for k in capped[i])
    assert capped.fingerprint == packed_source(DataSpec(str(path), seq_len=64, max_tokens=64 * 5 + 10),
                                               tiny_tokenizer).fingerprint
    assert len(capped.store.tokens) < len(full.store.tokens) / 2  # the budget stopped the tokenising early


def test_streaming_gives_the_same_sequences(tmp_path, tiny_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", pydoc_texts()[:30])
    plain = packed_source(DataSpec(str(path), seq_len=48), tiny_tokenizer)
    streamed = packed_source(DataSpec(str(path), seq_len=48, streaming=True), tiny_tokenizer)
    assert len(plain) == len(streamed) and plain.fingerprint == streamed.fingerprint


def test_store_is_reused_and_memory_mapped(tmp_path, tiny_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", pydoc_texts()[:10])
    first = packed_source(DataSpec(str(path), seq_len=32), tiny_tokenizer)
    stamp = (first.path / "tokens.bin").stat().st_mtime_ns
    again = packed_source(DataSpec(str(path), seq_len=64), tiny_tokenizer)  # another row length, same store
    assert again.path == first.path and (again.path / "tokens.bin").stat().st_mtime_ns == stamp
    assert isinstance(again.store.tokens, np.memmap)
    write_jsonl(path, pydoc_texts()[10:20])  # the data changed: a new store
    assert packed_source(DataSpec(str(path), seq_len=32), tiny_tokenizer).path != first.path


def test_fingerprint_sees_masks_and_bounds(tiny_tokenizer):
    texts = ["alpha beta gamma " * 5, "delta epsilon " * 7, "zeta eta theta " * 9]
    documents = texts_source(texts, tiny_tokenizer, seq_len=16)
    glued = texts_source(["".join(texts)], tiny_tokenizer, seq_len=16)
    assert documents.fingerprint == texts_source(texts, tiny_tokenizer, seq_len=16).fingerprint
    assert documents.fingerprint != glued.fingerprint


def test_too_little_text_is_a_clear_error(tiny_tokenizer, tmp_path):
    with pytest.raises(ValueError, match="fewer than one sequence of 4096"):
        texts_source(["short text"], tiny_tokenizer, seq_len=4096)
    with pytest.raises(ValueError, match="no documents"):
        texts_source([], tiny_tokenizer, seq_len=64)
    path = write_jsonl(tmp_path / "e.jsonl", ["", ""])
    with pytest.raises(ValueError, match=r"holds no text \(2 records, each missing, empty or not text\)"):
        packed_source(DataSpec(str(path), seq_len=8), tiny_tokenizer)


@pytest.mark.parametrize("max_tokens", [37 * 3, 37 * 40])
def test_a_token_budget_reads_long_documents_only_as_far_as_it_needs(tmp_path, tiny_tokenizer, max_tokens):
    """Long documents under --max-tokens: the rows are the naive loop's over whole documents (one document and its
    cut, or several), while the store holds the first documents only as far as the budget reached into them."""
    texts = [" ".join(pydoc_texts()[:8]), *pydoc_texts()[8:12]]  # the first one alone: ~35k characters
    path = write_jsonl(tmp_path / "d.jsonl", texts)
    source = packed_source(DataSpec(str(path), seq_len=37, max_tokens=max_tokens), tiny_tokenizer)
    expected = naive_rows(tiny_tokenizer, texts, 37)[: max_tokens // 37]
    assert len(source) == len(expected)
    for i, (ids, positions, mask) in enumerate(expected):
        assert source[i]["input_ids"].tolist() == ids
        assert source[i]["position_ids"].tolist() == positions
        assert source[i]["loss_mask"].tolist() == mask
    assert max_tokens <= len(source.store.tokens) < max_tokens + 37  # not the whole document's tokens


def test_a_huge_text_file_under_a_small_budget_costs_the_budget(tmp_path, tiny_tokenizer):
    """A 20 MB .txt of short lines (one document) with a budget of 1024 tokens: tokenised up to about 8 characters
    per wanted token, twice, never whole (a counting tokenizer wrapper sees every call)."""
    from destila.data.budgeted import BudgetedText
    from destila.data.spec import DataSpec as Spec

    line = "short line number with a few words\n"
    text = line * (20_000_000 // len(line))
    encode = BudgetedText(tiny_tokenizer, Spec("x.txt", seq_len=64), 1024)
    seen = []
    original = encode._tokenize
    encode._tokenize = lambda part: seen.append(len(part)) or original(part)
    out = encode({"text": [text, "after the budget"]})
    assert len(out["input_ids"][0]) == 1024 and out["input_ids"][1] == []
    assert max(seen) < 50_000 and sum(seen) < 100_000  # characters tokenised, of 20 M
    whole = tiny_tokenizer(text[:200_000], add_special_tokens=False)["input_ids"]
    assert out["input_ids"][0] == whole[:1024]


def test_a_texts_store_an_older_format_wrote_is_never_reopened(tiny_tokenizer, monkeypatch):
    """Documents given in Python are stored under a key of their content and the store's format version, so a
    store written in an older format sits beside the new one instead of being refused."""
    import destila.data.loader as loader

    texts = ["older format " * 40, "kept apart " * 40]
    monkeypatch.setattr(loader, "STORE_VERSION", loader.STORE_VERSION - 1)
    older_folder = texts_source(texts, tiny_tokenizer, seq_len=16).store.path
    meta = json.loads((older_folder / "store.json").read_text())
    (older_folder / "store.json").write_text(json.dumps({**meta, "version": loader.STORE_VERSION}))  # as it wrote
    monkeypatch.undo()
    current = texts_source(texts, tiny_tokenizer, seq_len=16)
    assert current.store.path != older_folder
    assert json.loads((current.store.path / "store.json").read_text())["version"] == loader.STORE_VERSION
