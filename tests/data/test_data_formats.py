"""The data format is read from the source's fields, as TRL detects it: text, messages, prompt/completion."""

import json

import pytest

from destila.cache import TopKCache
from destila.cli.main import main
from destila.data import DataSpec, packed_source
from destila.data.formats import detect_format

PAIRS = [{"prompt": f"Question {i}: what is {i} plus {i}?", "completion": f" It is {2 * i}."} for i in range(12)]
CHATS = [{"messages": [{"role": "user", "content": f"Say {i}."}, {"role": "assistant", "content": f"{i}!"}]}
         for i in range(6)]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_prompt_completion_and_messages_are_detected(tmp_path):
    pairs = detect_format(DataSpec(str(write_jsonl(tmp_path / "pc.jsonl", PAIRS))))
    assert (pairs.format, pairs.prompt_field, pairs.loss_on) == ("prompt_completion", "prompt", "completion")
    chats = detect_format(DataSpec(str(write_jsonl(tmp_path / "chat.jsonl", CHATS))))
    assert (chats.format, chats.messages_field, chats.loss_on) == ("messages", "messages", "assistant")
    text = DataSpec(str(write_jsonl(tmp_path / "t.jsonl", [{"text": "a", "messages": []}])))
    assert detect_format(text) is text  # a text field wins, as in TRL
    named = DataSpec(str(tmp_path / "pc.jsonl"), prompt_field="prompt", completion_field="completion", loss_on="all")
    assert detect_format(named) is named


def test_a_prompt_completion_file_builds_a_cache_trained_on_completions(tiny_llama_dir, tiny_tokenizer, tmp_path,
                                                                       capsys):
    data = write_jsonl(tmp_path / "pc.jsonl", PAIRS)
    with pytest.raises(SystemExit) as exit_:
        main(["cache", "build", str(tiny_llama_dir), str(data), "-o", str(tmp_path / "c"), "--seq-len", "32",
              "--top-k", "4", "--quiet"])
    assert exit_.value.code == 0, capsys.readouterr().err
    cache = TopKCache(tmp_path / "c")
    source = packed_source(DataSpec(str(data), seq_len=32), tiny_tokenizer)
    assert source.spec.format == "prompt_completion"
    trained = sum(int((cache[i]["labels"] != -100).sum()) for i in range(len(cache)))
    completions = sum(len(tiny_tokenizer(p["completion"])["input_ids"]) + 1 for p in PAIRS)  # + EOS
    total = sum(int(cache[i]["input_ids"].numel()) for i in range(len(cache)))
    assert 0 < trained <= completions < total  # the prompts are not trained
