"""Every data format's empty, binary, wrong-type and truncated file, and records that cannot be rendered: one line
naming the file (and the line, where the format has lines), nothing created.

The reader is the one ``cache build``, ``eval --data``, ``train --data`` and
the recipes share; ``cache build`` reads its data before loading the
teacher, so each case costs the reading only.
"""

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fault_helpers import build_command, destila_in_process, error_line

DOCS = [f"document {i}, with a comma, and a few words about the weather" for i in range(40)]


def _parquet(column) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table({"text": column}), buffer)
    return buffer.getvalue()


def _csv(rows) -> str:
    return "text,note\n" + "".join(f'"{row}",x\n' for row in rows)


GOOD = {"txt": "\n".join(DOCS).encode(), "jsonl": "".join(json.dumps({"text": d}) + "\n" for d in DOCS).encode(),
        "json": json.dumps([{"text": d} for d in DOCS]).encode(), "parquet": _parquet(DOCS),
        "csv": _csv(DOCS).encode()}
WRONG_TYPE = {"jsonl": "".join(json.dumps({"text": i}) + "\n" for i in range(40)).encode(),
              "json": json.dumps([{"text": [i]} for i in range(40)]).encode(), "parquet": _parquet(list(range(40))),
              "csv": _csv(range(40)).encode()}


def _truncated(ext: str) -> bytes:
    data = GOOD[ext]
    if ext == "txt":
        return data + "é".encode()[:1]  # cut inside a two-byte character
    if ext == "csv":
        return data[:data.rfind(b'"document 20') + 12]  # cut inside a quoted field
    return data[:len(data) // 2]


# (case, extension) -> what the line says after "data: ".
CASES = {
    **{("empty", ext): "is empty; expected at least one record" for ext in ("jsonl", "json", "parquet", "csv")},
    ("empty", "txt"): "holds no text (1 records, each missing, empty or not text)",
    ("binary", "txt"): "not UTF-8 text at {file}",
    ("binary", "jsonl"): "{file}, line 1: not valid JSON",
    ("binary", "json"): "{file}, line 1: not valid JSON",
    ("binary", "parquet"): "datasets could not read {file} (Parquet magic bytes not found",
    ("binary", "csv"): "datasets could not read {file} (Error tokenizing data",
    ("wrong", "jsonl"): "holds no text (40 records, each missing, empty or not text)",
    ("wrong", "json"): "{file}, record 1 of the JSON array: field 'text' holds a list (a conversation?), not text",
    ("wrong", "parquet"): "holds no text (40 records, each missing, empty or not text)",
    ("wrong", "csv"): "holds no text (40 records, each missing, empty or not text)",
    ("truncated", "txt"): "not UTF-8 text at {file}",
    ("truncated", "jsonl"): "{file}, line 21: not valid JSON (Unterminated string",
    ("truncated", "json"): "{file}, line 1: not valid JSON (Unterminated string",
    ("truncated", "parquet"): "datasets could not read {file} (Parquet magic bytes not found",
    ("truncated", "csv"): "datasets could not read {file} (Error tokenizing data. C error: EOF inside string",
}


@pytest.mark.parametrize("case, ext", list(CASES), ids=[f"{c}.{e}" for c, e in CASES])
def test_every_format_refuses_its_empty_binary_wrong_type_and_truncated_file(tiny_llama_dir, tmp_path, case, ext):
    file = tmp_path / f"{case}.{ext}"
    content = {"empty": lambda: b"", "binary": lambda: bytes(range(256)) * 8, "wrong": lambda: WRONG_TYPE[ext],
               "truncated": lambda: _truncated(ext)}[case]()
    file.write_bytes(content)
    out = tmp_path / "cache"
    result = destila_in_process(*build_command(tiny_llama_dir, file, out))
    error_line(result, "cache", 2, "data: ", CASES[case, ext].format(file=file))
    assert not out.exists()


def chats(tmp_path, rows: list) -> str:
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


GOOD_CHAT = {"messages": [{"role": "user", "content": "what is a list?"},
                          {"role": "assistant", "content": "a sequence of values"}]}


@pytest.mark.parametrize("assistant, found", [
    ({"role": "assistant"}, "has no content"),
    ({"role": "assistant", "content": None}, "has no content"),
    ({"role": "assistant", "content": 5}, "has content of type int"),
])
def test_a_chat_message_without_text_is_named_with_its_line(tiny_chat_llama_dir, tmp_path, assistant, found):
    bad = {"messages": [{"role": "user", "content": "what is a dict?"}, assistant]}
    data = chats(tmp_path, [GOOD_CHAT, GOOD_CHAT, bad, GOOD_CHAT])
    result = destila_in_process(*build_command(tiny_chat_llama_dir, data, tmp_path / "cache",
                                               "--messages-field", "messages"))
    error_line(result, "cache", 2, f"data: {data}, line 3: field 'messages', message 2 (role 'assistant') {found}",
               "expected its text as a string in 'content'")
    assert not (tmp_path / "cache").exists()


def test_messages_given_as_a_string_are_named_with_their_line(tiny_chat_llama_dir, tmp_path):
    data = chats(tmp_path, [GOOD_CHAT, {"messages": "hello there"}])
    result = destila_in_process(*build_command(tiny_chat_llama_dir, data, tmp_path / "cache",
                                               "--messages-field", "messages"))
    error_line(result, "cache", 2, f"data: {data}, line 2: field 'messages' holds str; expected a conversation")


@pytest.mark.parametrize("ext", ["jsonl", "json"])
def test_a_text_that_is_a_list_is_refused_naming_its_record(tiny_llama_dir, tmp_path, ext):
    """A list in the text field is no document left out and counted (as a number is): most likely a conversation
    read as text, it is refused, naming the file, the record and the field."""
    records = [{"text": DOCS[0]}, {"text": DOCS[1]}, {"text": ["a", "list"]}, {"text": DOCS[2]}]
    data = tmp_path / f"notes.{ext}"
    data.write_text("".join(json.dumps(r) + "\n" for r in records) if ext == "jsonl" else json.dumps(records, indent=1))
    result = destila_in_process(*build_command(tiny_llama_dir, data, tmp_path / "cache"))
    where = "line 3" if ext == "jsonl" else "record 3 of the JSON array"
    error_line(result, "cache", 2, f"data: {data}, {where}: field 'text' holds a list (a conversation?), not text",
               "--messages-field text")
    assert not (tmp_path / "cache").exists()


ASKED = [{"role": "user", "content": "what is a set?"}]
ANSWER = [{"role": "assistant", "content": "an unordered collection"}]


@pytest.mark.parametrize("bad, needle", [
    ({"prompt": "what is a set?", "completion": ["an", "answer"]},
     "field 'completion' holds a list of str, not of {'role', 'content'} messages"),
    ({"prompt": ASKED, "completion": ["an", "answer"]},
     "field 'completion' holds a list of str, not of {'role', 'content'} messages"),
    ({"prompt": "what is a set?", "completion": ANSWER},
     "field 'completion' holds a list of messages, but field 'prompt' holds text"),
    ({"prompt": ASKED, "completion": [{"role": "assistant"}]},
     "field 'completion', message 1 (role 'assistant') has no content"),
], ids=["text and a list of str", "messages and a list of str", "text and messages", "a message without content"])
def test_a_prompt_completion_pair_is_refused_naming_its_field_and_line(tiny_chat_llama_dir, tmp_path, bad, needle):
    """A list-valued completion was called "messages" (or, without content, ended in the chat template's traceback)."""
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [{"prompt": ASKED, "completion": ANSWER}, bad]))
    result = destila_in_process(*build_command(tiny_chat_llama_dir, data, tmp_path / "cache", "--prompt-field",
                                               "prompt", "--completion-field", "completion"))
    error_line(result, "cache", 2, f"data: {data}, line 2: {needle}")
    assert not (tmp_path / "cache").exists()


def test_invalid_utf8_in_a_jsonl_is_named_with_its_line(tiny_llama_dir, tmp_path):
    data = tmp_path / "notes.jsonl"
    data.write_bytes(b'{"text": "a fine first line"}\n{"text": "a second one"}\n{"text": "bad \xff\xfe bytes"}\n')
    result = destila_in_process(*build_command(tiny_llama_dir, data, tmp_path / "cache"))
    error_line(result, "cache", 2, f"data: {data}, line 3: not UTF-8 text (invalid start byte at byte 14 of the line)")
    assert not (tmp_path / "cache").exists()
