"""`benchmarks/corpus_size.py`: the token count docs/data.md gives for a corpus split is the split's real count."""

import json

import pytest

from destila.data import pydoc_texts


def expected(tokenizer) -> tuple[int, int]:
    """``(documents, tokens)`` counted without destila's store: each non-empty document, then an EOS."""
    texts = [text for text in pydoc_texts() if text.strip()]
    return len(texts), sum(len(tokenizer(text, add_special_tokens=False)["input_ids"]) + 1 for text in texts)


def test_the_worker_counts_the_documents_and_tokens_of_the_whole_split(tiny_llama_dir, tiny_tokenizer, tmp_path):
    from benchmarks.corpus_size import tokenise

    row = tokenise("pydoc", "train", str(tiny_llama_dir), str(tmp_path / "store"))
    assert (row["documents"], row["tokens"]) == expected(tiny_tokenizer)


@pytest.mark.slow
def test_the_script_measures_each_split_in_a_fresh_process(tiny_llama_dir, tiny_tokenizer, capsys):
    from benchmarks.corpus_size import main

    (row,) = main(["pydoc", "--tokenizer", str(tiny_llama_dir)])
    assert json.loads(capsys.readouterr().out.splitlines()[0])["tokens"] == row["tokens"]
    assert (row["documents"], row["tokens"]) == expected(tiny_tokenizer)
    assert row["seconds"] > 0 and row["peak_rss_bytes"] > 0
