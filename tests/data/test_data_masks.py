"""Documents to tokens and trained positions: text, prompt/completion, conversations (destila.data.render)."""

import json
import time

import pytest
import torch

from destila.data import DataSpec, packed_source

CONVERSATIONS = [
    [{"role": "system", "content": "Answer in one line."}, {"role": "user", "content": "What is a list?"},
     {"role": "assistant", "content": "A mutable sequence."}],
    [{"role": "user", "content": "And a tuple?"}, {"role": "assistant", "content": "An immutable one."},
     {"role": "user", "content": "Which is faster?"}, {"role": "assistant", "content": "Tuples, slightly."}],
    [{"role": "user", "content": "Say nothing."}, {"role": "assistant", "content": ""}],
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def independent_assistant_targets(tokenizer, ids: list[int]) -> list[bool]:
    """Token j is an assistant target iff it lies after `<|im_start|>assistant\\n` and up to its `<|im_end|>`.

    Found by scanning token ids for the ChatML markers, without character offsets or prefix rendering."""
    opener = tokenizer("<|im_start|>assistant\n", add_special_tokens=False).input_ids
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    targets, inside = [False] * len(ids), False
    for j in range(len(ids)):
        if inside:
            targets[j] = True
            inside = ids[j] != end
        elif ids[j - len(opener) + 1 : j + 1] == opener:
            inside = True
    return targets


def document_rows(source):
    """(input_ids, loss_mask) of each row of a packing='none' source, without the padding."""
    for i in range(len(source)):
        item = source[i]
        restarts = (item["position_ids"][1:] == 0).nonzero()  # padding starts its own block of positions
        n = int(restarts[0]) + 1 if len(restarts) else len(item["input_ids"])
        yield item["input_ids"][:n].tolist(), item["loss_mask"][:n].tolist()


def test_chat_mask_is_exactly_the_assistant_turns(tmp_path, tiny_chat_tokenizer):
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": c, "id": i} for i, c in enumerate(CONVERSATIONS)])
    spec = DataSpec(str(path), messages_field="messages", packing="none", seq_len=256)
    assert spec.loss_on == "assistant"
    source = packed_source(spec, tiny_chat_tokenizer)
    assert len(source) == len(CONVERSATIONS)
    for (ids, mask), conversation in zip(document_rows(source), CONVERSATIONS):
        rendered = tiny_chat_tokenizer.apply_chat_template(conversation, tokenize=False)
        assert ids == tiny_chat_tokenizer(rendered, add_special_tokens=False).input_ids
        expected = independent_assistant_targets(tiny_chat_tokenizer, ids)
        assert mask[:-1] == expected[1:] and mask[-1] is False
        assert sum(expected) > 0


def test_loss_on_all_trains_every_next_token_of_a_conversation(tmp_path, tiny_chat_tokenizer):
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": c} for c in CONVERSATIONS[:1]])
    source = packed_source(DataSpec(str(path), messages_field="messages", loss_on="all", packing="none",
                                    seq_len=256), tiny_chat_tokenizer)
    ids, mask = next(document_rows(source))
    assert mask == [True] * (len(ids) - 1) + [False]


def test_prompt_completion_trains_the_completion_and_its_eos(tmp_path, tiny_tokenizer):
    path = write_jsonl(tmp_path / "pairs.jsonl", [{"q": "The len() of [1, 2] is", "a": " 2."}])
    spec = DataSpec(str(path), prompt_field="q", completion_field="a", packing="none", seq_len=64)
    assert spec.loss_on == "completion"
    ids, mask = next(document_rows(packed_source(spec, tiny_tokenizer)))
    prompt = tiny_tokenizer("The len() of [1, 2] is", add_special_tokens=False).input_ids
    completion = tiny_tokenizer(" 2.", add_special_tokens=False).input_ids + [tiny_tokenizer.eos_token_id]
    assert ids == prompt + completion
    # Position t trains token t+1: from the last prompt token (predicting the first completion token) on.
    assert mask == [False] * (len(prompt) - 1) + [True] * len(completion) + [False]


def test_text_in_a_messages_field_says_how_to_read_it(tmp_path, tiny_chat_tokenizer):
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": c} for c in CONVERSATIONS])
    with pytest.raises(ValueError, match="holds a list .*--messages-field messages"):
        packed_source(DataSpec(str(path), text_field="messages", seq_len=16), tiny_chat_tokenizer)
    with pytest.raises(ValueError, match=r"no field 'msgs'; fields found: messages; pass --messages-field"):
        packed_source(DataSpec(str(path), messages_field="msgs", seq_len=16), tiny_chat_tokenizer)


def test_a_tokenizer_without_chat_template_is_refused(tmp_path, tiny_tokenizer):
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": c} for c in CONVERSATIONS])
    with pytest.raises(ValueError, match="no chat template"):
        packed_source(DataSpec(str(path), messages_field="messages", seq_len=16), tiny_tokenizer)


def test_spec_validation_names_the_problem():
    with pytest.raises(ValueError, match="give both or neither"):
        DataSpec("x.jsonl", prompt_field="q")
    with pytest.raises(ValueError, match="'assistant' needs --messages-field"):
        DataSpec("x.jsonl", loss_on="assistant")
    with pytest.raises(ValueError, match="packing: expected one of bfd, documents, none"):
        DataSpec("x.jsonl", packing="rows")
    with pytest.raises(ValueError, match="less than one sequence"):
        DataSpec("x.jsonl", seq_len=64, max_tokens=10)
    assert DataSpec("x.jsonl", prompt_field="q", completion_field="a", loss_on="all").loss_on == "all"


@pytest.mark.parametrize("offline_env", [True, False])
def test_hub_name_without_network_fails_fast_with_one_line(monkeypatch, offline_env, tiny_tokenizer):
    from huggingface_hub import constants

    if offline_env:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
        monkeypatch.setattr(constants, "ENDPOINT", "https://hub.invalid")  # resolves nowhere, like no network
    began = time.monotonic()
    with pytest.raises(ValueError, match="pass the local folder") as caught:
        packed_source(DataSpec("someone/some-dataset", split="train", seq_len=16), tiny_tokenizer)
    assert time.monotonic() - began < 5
    assert "\n" not in str(caught.value)


def test_cli_hub_name_offline_is_one_line_and_exit_2(tmp_path, tiny_llama_dir):
    import subprocess
    import sys

    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "destila", "cache", "build", str(tiny_llama_dir), "someone/some-dataset", "-o",
         str(tmp_path / "c"), "--split", "train"],
        capture_output=True, text=True, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"}, timeout=120,
    )
    elapsed = time.monotonic() - began
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("destila cache: error: data: 'someone/some-dataset'"), done.stderr
    assert "pass the local folder" in lines[0]
    assert elapsed < 30  # the process, imports included; the refusal itself is checked under 5 s above
