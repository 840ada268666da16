"""`benchmarks/corpus_size.py`: the token count docs/data.md gives for a corpus split is the split's real count."""

import json

import pytest

from destila.data.stdlib import read_module, stdlib_files


def expected_tokens(tokenizer, documents: int) -> int:
    """Counted without destila's store: the split's first ``documents`` non-empty modules, each followed by an EOS."""
    texts = [text for text in (read_module(path) for _, path in stdlib_files("test")) if text.strip()]
    assert 0 < documents < len(texts)  # stopped at the budget, before the split's end
    return sum(len(tokenizer(text, add_special_tokens=False)["input_ids"]) + 1 for text in texts[:documents])


def test_the_worker_counts_the_documents_and_tokens_of_the_split_read(tiny_llama_dir, tiny_tokenizer, tmp_path):
    from benchmarks.corpus_size import tokenise

    row = tokenise("stdlib", "test", str(tiny_llama_dir), str(tmp_path / "store"), max_tokens=3000)
    assert row["tokens"] == expected_tokens(tiny_tokenizer, row["documents"]) >= 3000


@pytest.mark.slow
def test_the_script_measures_each_split_in_a_fresh_process(tiny_llama_dir, tiny_tokenizer, capsys):
    from benchmarks.corpus_size import main

    (row,) = main(["stdlib", "--split", "test", "--tokenizer", str(tiny_llama_dir), "--max-tokens", "3000"])
    assert json.loads(capsys.readouterr().out.splitlines()[0])["tokens"] == row["tokens"]
    assert row["tokens"] == expected_tokens(tiny_tokenizer, row["documents"]) >= 3000
    assert row["seconds"] > 0 and row["peak_rss_bytes"] > 0
